"""The ``bai-cluster`` command line (``python -m bai_cli`` does the same).

Progress goes to stderr as it happens, results to stdout (a summary, or JSON with
``--json``). Exit codes: 0 success, 2 bad input, 3 PENDING, 1 anything else.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from . import __version__
from .commands import agent, lab, metrics, queue, session
from .commands.common import Context, UsageError, emit_json
from .errors import EXIT_BAD_INPUT, EXIT_FAILED, BaiClusterError
from .progress import Printer

EPILOG = """exit codes: 0 success, 2 bad input, 3 PENDING (the session cannot be placed now),
1 any other failure (also a drain that left sessions on the agent). Progress goes to stderr,
results to stdout (--json: one JSON document).
"""

# The commands: what each runs (commands/*.py), by the command's name.
COMMANDS: dict[str, Callable[[Context], int]] = {
    "lab": lab.run_lab,
    "site": lab.run_site,
    "session": session.run,
    "agent": agent.run,
    "metrics": metrics.run,
    "queue": queue.run,
}


def common_options() -> argparse.ArgumentParser:
    """The options of every command, before or after the sub-command."""
    common = argparse.ArgumentParser(add_help=False)
    # SUPPRESS: the options work before and after the sub-command without the
    # sub-parser's defaults overwriting what was given before it.
    common.add_argument(
        "-i",
        "--inventory",
        default=argparse.SUPPRESS,
        help="inventory (default: the lab, from ansible.cfg); relative paths are also "
        "looked up in the repository, e.g. -i inventories/local",
    )
    common.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print JSON on stdout"
    )
    common.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=argparse.SUPPRESS,
        help="more progress detail (-vv and more: ansible verbosity too)",
    )
    common.add_argument(
        "-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help="no progress lines"
    )
    common.add_argument("--keep-runner-dir", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return common


def build_parser() -> argparse.ArgumentParser:
    common = common_options()
    parser = argparse.ArgumentParser(
        prog="bai-cluster",
        description="Backend.AI-style cluster sessions on Docker (runs the project's "
        "playbooks through ansible-runner).",
        epilog=EPILOG,
        parents=[common],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    top = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    lab.add_parser(top, common)
    session.add_parser(top, common)
    agent.add_parser(top, common)
    metrics.add_parser(top, common)
    queue.add_parser(top, common)
    return parser


def run_command(args: argparse.Namespace, printer: Printer) -> int:
    return COMMANDS[args.command](Context.of(args, printer))


def split_remote(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """``session ssh NAME [HOST] -- COMMAND...``: the arguments before the first ``--``
    and the command after it."""
    argv = list(argv)
    if "--" in argv:
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1 :]
    return argv, []


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    own, remote = split_remote(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(own)
    if remote and not (args.command == "session" and args.action in ("ssh", "run")):
        parser.error(
            "a command after -- is only for: session ssh NAME [HOST] -- COMMAND and "
            "session run NAME [options] -- COMMAND"
        )
    args.remote = remote
    printer = Printer(sys.stderr, quiet=bool(getattr(args, "quiet", False)))
    try:
        return run_command(args, printer)
    except UsageError as exc:
        parser.print_usage(sys.stderr)
        print(f"bai-cluster: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BaiClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        if getattr(args, "json", False):
            emit_json({"error": exc.to_dict()})
        return exc.exit_code
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
