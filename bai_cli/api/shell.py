"""The commands the CLI runs in a session's containers itself: a shell (``session ssh``)
and what a container prints (``session logs --follow``, ``session run``)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from .session_model import Access, Session, SessionDetails


@dataclass
class ShellCommand:
    """``session ssh``: the command that opens a shell (or runs ``command``) as user work
    in a container; ``runnable`` is False where it can only be printed."""

    argv: list[str]
    runnable: bool
    note: str = ""

    def __str__(self) -> str:
        return shlex.join(self.argv)


def shell_command(
    details: SessionDetails,
    host: str | None = None,
    command: list[str] | None = None,
    tty: bool = True,
) -> ShellCommand:
    """The command that opens a shell as user work in ``host`` (default main1), or runs
    ``command`` there:

    - agent on this machine (``ansible_connection: local``): ``docker exec``;
    - docker-connected agent (the lab): ``docker exec`` into the agent's node, then into
      the container with the node's own engine;
    - agents reached over SSH (real hosts): users reach containers only through the app
      proxy, so the command is ``ssh -p <route port> work@<app proxy>`` (the session's
      route, roles/appproxy), or without a route ``ssh -J <appproxy> -p <main1's published sshd
      port> work@<agent>``; then ``ssh <host>`` from main1. It is printed, not run: it
      needs a key the session accepts (``authorized_keys``).
    """
    target = details.container(host)
    # As ``ssh host 'cmd; cmd'`` does: the words are joined and run by the user's shell.
    line = " ".join(command or [])
    inner = ["bash", "-c", line] if command else ["bash", "-l"]
    flags = ["-it"] if tty else ["-i"]
    exec_argv = ["exec", *flags, "-u", "work", "-w", "/home/work", target.container, *inner]
    access = details.access.get(target.agent) or Access(connection="ssh", host=target.agent)
    connection = access.connection.rsplit(".", 1)[-1]
    if connection == "local":
        return ShellCommand(["docker", *exec_argv], runnable=True)
    if connection == "docker":
        return ShellCommand(["docker", "exec", *flags, access.host, "docker", *exec_argv], True)
    master = details.container(None)
    route = details.appproxy_route or {}
    if route.get("port"):
        # The app proxy's user-facing port for this session -> main1's sshd.
        argv = ["ssh", "-t", "-p", str(route["port"]), f"work@{route.get('address')}"]
    else:
        # No route known: the app proxy host as the jump host to main1's published sshd.
        master_access = details.access.get(master.agent) or Access("ssh", master.agent)
        proxy = details.access.get(details.appproxy)
        jump = proxy.host if proxy else details.appproxy
        argv = ["ssh", "-t"]
        if jump:
            argv += ["-J", f"{proxy.user + '@' if proxy and proxy.user else ''}{jump}"]
        argv += ["-p", str(details.ssh_port or 22), f"work@{master_access.host}"]
    if target.host != master.host:
        argv += ["ssh", "-t", target.host]
        if command:  # main1's shell must pass the line on whole to the second hop
            argv.append(shlex.quote(line))
    elif command:
        argv.append(line)
    note = (
        f"{target.host} runs on {target.agent}, reached over SSH: users reach sessions only "
        f"through the app proxy ({details.appproxy or 'none in the inventory'}) to main1's "
        "sshd; the session must accept your key (session create --authorized-key)"
    )
    return ShellCommand(argv, runnable=False, note=note)


def logs_command(details: Session, host: str | None = None, follow: bool = True) -> ShellCommand:
    """The command that prints (``follow``: and follows, until the container stops) what
    ``host`` (default main1) prints, with the engine's own ``docker logs``: on this machine,
    in the lab's agent node, or on an SSH-reached agent with sudo (as Ansible reaches it).
    Its stderr is the container's: for main1 of a batch session, throw it away (sshd's
    log) to keep the command's output alone."""
    target = details.container(host)
    argv = ["docker", "logs", *(["--follow"] if follow else []), target.container]
    access = details.access.get(target.agent) or Access(connection="ssh", host=target.agent)
    connection = access.connection.rsplit(".", 1)[-1]
    if connection == "local":
        return ShellCommand(argv, runnable=True)
    if connection == "docker":
        return ShellCommand(["docker", "exec", access.host, *argv], runnable=True)
    ssh = ["ssh", *(["-p", access.port] if access.port else [])]
    where = f"{access.user}@{access.host}" if access.user else access.host
    return ShellCommand([*ssh, where, "sudo", "-n", *argv], runnable=True)
