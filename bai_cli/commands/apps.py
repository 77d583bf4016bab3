"""``bai-cluster session app NAME [APP]``: a session's interactive apps (docs/apps.md) -
the list, or one opened through the app proxy with its link; and ``session create
--app``'s opening of apps once the session is made."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from .. import api
from ..errors import EXIT_OK
from .common import Context, emit_json

LINK_NOTE = "the link is a credential: whoever holds it gets into the app"


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    common: argparse.ArgumentParser,
    owner_help: str,
) -> None:
    app = sub.add_parser(
        "app",
        parents=[common],
        help="a session's apps (JupyterLab, its terminal, your own ports) through the app proxy",
        description="Without APP: list the session's apps in main1 (its image's, and its own "
        "declared with create --app NAME=http:PORT), where each is published and whether it "
        "runs. With APP: open it - start it in main1 as user work when it does not run (an "
        "image's app), give it an HTTPS route on the app proxy with its own secret, and "
        "print the link that opens it. " + LINK_NOTE + ".",
    )
    app.add_argument("name")
    app.add_argument("app", nargs="?", help="the app to open, e.g. jupyter")
    app.add_argument("--owner", metavar="NAME", help=owner_help)
    app.add_argument(
        "--start-timeout",
        type=int,
        metavar="SECONDS",
        help="how long the app may take to listen after its start (default 90)",
    )


def apps_text(found: api.Apps) -> list[str]:
    """The table of a session's apps."""
    if not found.apps:
        return [f"session {found.session}: no apps (its image declares none, nor does it)"]
    rows = [("APP", "PROTOCOL", "PORT", "STATE", "KIND", "LINK")]
    rows += [
        (
            a.name,
            a.protocol,
            str(a.port),
            a.state,
            "declared" if a.declared else "image",
            a.url or "-",
        )
        for a in found.apps
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    tail = [f"open one: bai-cluster session app {found.session} APP (LINK: - until opened)"]
    if any(a.url for a in found.apps):
        tail.append(f"# {LINK_NOTE}")
    return [*lines, *tail]


def opened_text(found: api.Apps) -> list[str]:
    app = found.app
    how = "started" if found.started else (app.state if app else "")
    return [
        f"app {app.name if app else '?'} of session {found.session} ({how}): {found.url}",
        f"# {LINK_NOTE}; the app proxy's certificate is from the cluster's CA",
    ]


def run_app(ctx: Context) -> int:
    args = ctx.args
    found = api.open_app(
        args.name,
        args.app,
        owner=args.owner,
        start_timeout_s=args.start_timeout,
        on_event=ctx.verbose_plays(),
        **ctx.common,
    )
    if ctx.as_json:
        emit_json(found.to_dict())
    else:
        print("\n".join(opened_text(found) if args.app else apps_text(found)))
    return EXIT_OK


def open_after_create(ctx: Context, name: str, names: Sequence[str]) -> list[dict]:
    """``session create --app APP``: open each app once the session is made; what each
    open found (printed, or returned for --json)."""
    opened = []
    for app in names:
        found = api.open_app(
            name, app, owner=ctx.args.owner, on_event=ctx.verbose_plays(), **ctx.common
        )
        if not ctx.as_json:
            print("\n".join(opened_text(found)))
        opened.append(found.to_dict())
    return opened
