"""A session's apps in main1, on main1's agent (bai_session_app; docs/apps.md): which apps
it has, where each is published, and the start of one on its first open.

An image app (its image's ``ai.backend.service-ports`` label) starts from the image's
service definition (``/etc/backend.ai/service-defs/NAME.json``) the first time it is
opened, and again when it is opened after it died: as user ``work``, in the first data
folder (else ``/home/work``), with main1's environment (the session's variables and the
user's ``env``: ``docker exec`` gives the container's own). Its output goes to
``/tmp/bai-app-NAME.log`` in main1, its process ID to ``/tmp/bai-app-NAME.pid``, and it
has ``BAI_APP=NAME`` in its environment: an open while an earlier start is still coming up
(one that did not listen in time) waits for that one rather than starting a second.
Nothing in it runs through a shell but the redirection, whose arguments are positional
parameters, never text of the command. A session's own app (``session_apps``) is started
by the user; it is only found.

    main1(api, session, session_id)      main1's inspect, or Failure
    session_apps(info)                   main1's apps (session/apps.App), image's first
    published(info, app)                 (host address, host port) of an app's port
    listening(api, cid)                  TCP ports that listen in main1
    open_app(api, info, app, timeout)    start it if nothing listens on its port
    describe(api, info)                  every app: name, protocol, port, host port, state
    url_path(api, cid, app)              the path that opens it
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import Failure
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_APPS,
    LABEL_HOST,
    LABEL_SESSION,
    LABEL_SESSION_ID,
)
from ansible_collections.bai.cluster.plugins.module_utils.network.appproxy import (
    listening_ports,
)
from ansible_collections.bai.cluster.plugins.module_utils.session import apps as apps_

LOG = "/tmp/bai-app-{name}.log"
PIDFILE = "/tmp/bai-app-{name}.pid"
# In the environment of an app that an open started (and of what it starts): BAI_APP=NAME.
MARK = "BAI_APP"
HOME = "/home/work"
# Writes its process ID (the app's, after the exec) to the pidfile and the app's output
# to its log, and becomes the app ("$0" is the log's path, "$1" the pidfile's, the rest
# the app's argv).
_REDIRECT = 'echo $$ >"$1"; shift; exec "$@" >>"$0" 2>&1'
_LOG_LINES = 20


class _Ended(Exception):
    """An earlier start that was waited for ended without listening."""


class StartFailure(Failure):
    """An app that was started but did not come up (it ended, or did not listen in
    time): what the app proxy counts as a failed start."""


def main1(api: Any, session: str, session_id: str) -> dict[str, Any]:
    """main1's ``docker inspect`` on this engine; Failure when it is not here or not
    running."""
    found = api.containers(
        all=True,
        filters={
            "label": [
                f"{LABEL_SESSION}={session}",
                f"{LABEL_SESSION_ID}={session_id}",
                f"{LABEL_HOST}=main1",
            ]
        },
    )
    if not found:
        raise Failure(f"session {session}: main1 is not on this agent")
    info = api.inspect_container(found[0]["Id"])
    if not (info.get("State") or {}).get("Running"):
        raise Failure(
            f"session {session}: main1 is not running ({(info.get('State') or {}).get('Status')})"
        )
    return info


def session_apps(info: Mapping[str, Any]) -> tuple[apps_.App, ...]:
    """main1's apps: its image's (the image label, which Docker copies onto the
    container's labels), then the session's own (its label ai.backend.cluster.apps)."""
    labels = (info.get("Config") or {}).get("Labels") or {}
    image = apps_.parse_service_ports(labels.get(apps_.SERVICE_PORTS_LABEL))
    declared = apps_.parse_declared([e for e in str(labels.get(LABEL_APPS) or "").split(",") if e])
    return apps_.merged(image, declared)


def find(info: Mapping[str, Any], name: str) -> apps_.App:
    known = session_apps(info)
    for app in known:
        if app.name == name:
            return app
    names = ", ".join(a.name for a in known) or "none"
    raise Failure(f"main1 has no app {name} (its apps: {names})")


def published(info: Mapping[str, Any], app: apps_.App) -> tuple[str, int]:
    """Where the agent publishes ``app``'s port: (host address, host port)."""
    ports = (info.get("NetworkSettings") or {}).get("Ports") or {}
    bindings = ports.get(f"{app.port}/tcp") or []
    for binding in bindings:
        if binding.get("HostPort"):
            return str(binding.get("HostIp") or ""), int(binding["HostPort"])
    raise Failure(
        f"app {app.name}: main1 publishes no port for {app.port}/tcp (the session was made "
        f"before the app was declared: destroy it and create it anew)"
    )


def _exec(api: Any, cid: str, argv: list[str], user: str = "root") -> tuple[int, str]:
    exec_id = api.exec_create(cid, argv, user=user)
    out = api.exec_start(exec_id).decode("utf-8", "replace")
    return int(api.exec_inspect(exec_id).get("ExitCode") or 0), out


def listening(api: Any, cid: str) -> set[int]:
    """TCP ports that listen in main1 (its /proc/net/tcp and tcp6)."""
    # The second file's header line is no socket: listening_ports skips it as any other.
    _code, out = _exec(api, cid, ["cat", "/proc/net/tcp", "/proc/net/tcp6"])
    return listening_ports(out)


def workdir(info: Mapping[str, Any]) -> str:
    """The first data folder (the session's first mount), else the user's home."""
    binds = (info.get("HostConfig") or {}).get("Binds") or []
    for bind in binds:
        parts = str(bind).split(":")
        if len(parts) >= 2 and parts[1].startswith("/"):
            return parts[1]
    return HOME


def service_definition(api: Any, cid: str, app: apps_.App) -> str | None:
    """The text of an image app's service definition in main1; None when there is none."""
    if app.declared:
        return None
    code, text = _exec(api, cid, ["cat", f"{apps_.SERVICE_DEFS_DIR}/{app.name}.json"])
    return text if code == 0 else None


def url_path(api: Any, cid: str, app: apps_.App) -> str:
    """The path that opens the app: its service definition's ``url_path`` (JupyterLab's
    is /lab), else /."""
    return apps_.url_path(service_definition(api, cid, app))


def log_tail(api: Any, cid: str, app: apps_.App) -> str:
    code, out = _exec(api, cid, ["tail", "-n", str(_LOG_LINES), LOG.format(name=app.name)])
    return out.strip() if code == 0 else "(no log)"


def open_app(
    api: Any, info: Mapping[str, Any], app: apps_.App, timeout: float, check_mode: bool = False
) -> dict[str, Any]:
    """Make ``app`` listen in main1: nothing to do when something listens on its port;
    else start it from its service definition (an image app) and wait until it listens.
    A session's own app is only looked at. Returns its state: running, started (or
    would start, in check mode), or idle (a session's own app nothing listens on yet)."""
    cid = str(info["Id"])
    if app.port in listening(api, cid):
        return {"state": "running", "changed": False}
    if app.declared:
        return {"state": "idle", "changed": False}
    definition = service_definition(api, cid, app)
    if definition is None:
        raise Failure(
            f"app {app.name}: the image declares it but has no service definition "
            f"{apps_.SERVICE_DEFS_DIR}/{app.name}.json"
        )
    argv = apps_.service_command(definition, app)
    if check_mode:
        return {"state": "started", "changed": True, "command": argv}
    earlier = _starting(api, cid, app)
    if earlier is not None:

        def gone() -> None:
            if _starting(api, cid, app) != earlier:
                raise _Ended

        try:
            _await_listen(api, cid, app, timeout, gone, f"started earlier, process {earlier}")
            return {"state": "running", "changed": False}
        except _Ended:
            pass  # the earlier start ended without listening: this run starts it anew
    log = LOG.format(name=app.name)
    exec_id = api.exec_create(
        cid,
        ["/bin/sh", "-c", _REDIRECT, log, PIDFILE.format(name=app.name), *argv],
        user="work",
        workdir=workdir(info),
        environment=[_mark(app)],
    )
    api.exec_start(exec_id, detach=True)
    began = time.monotonic()

    def ended() -> None:
        done = api.exec_inspect(exec_id)
        if not done.get("Running") and done.get("ExitCode") is not None:
            raise StartFailure(
                f"app {app.name} ended (exit {done.get('ExitCode')}) before it listened on "
                f"port {app.port}; the last lines of its log ({log} in main1):\n"
                f"{log_tail(api, cid, app)}"
            )

    _await_listen(api, cid, app, timeout, ended, "", failure=StartFailure)
    return {
        "state": "started",
        "changed": True,
        "command": argv,
        "start_s": round(time.monotonic() - began, 2),
    }


def _await_listen(
    api: Any,
    cid: str,
    app: apps_.App,
    timeout: float,
    ended: Callable[[], None],
    still: str,
    failure: type[Failure] = Failure,
) -> None:
    """Wait until something listens on the app's port; ``ended`` raises when the start
    is over without it; ``failure`` when ``timeout`` s pass (``still`` says why the app
    was waited for, when this run did not start it)."""
    began = time.monotonic()
    while app.port not in listening(api, cid):
        ended()
        if time.monotonic() - began > timeout:
            why = f" ({still})" if still else ""
            raise failure(
                f"app {app.name}{why} did not listen on port {app.port} within {timeout:g} s; "
                f"the last lines of its log ({LOG.format(name=app.name)} in main1):\n"
                f"{log_tail(api, cid, app)}"
            )
        time.sleep(0.1)


def _starting(api: Any, cid: str, app: apps_.App) -> str | None:
    """The process ID of an earlier start of ``app`` that still runs: its pidfile names a
    live process whose environment has the start's mark (a process ID can be another
    process's after main1 restarted, and the app's command line need not be its argv:
    ``jupyter lab`` execs ``jupyter-lab``); None when there is none."""
    code, pid = _exec(api, cid, ["cat", PIDFILE.format(name=app.name)])
    pid = pid.strip()
    if code != 0 or not pid.isdigit():
        return None
    code, environ = _exec(api, cid, ["cat", f"/proc/{pid}/environ"])
    return pid if code == 0 and _mark(app) in environ.split("\0") else None


def _mark(app: apps_.App) -> str:
    return f"{MARK}={app.name}"


def describe(api: Any, info: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every app of main1: name, protocol, port, its published host port, and whether
    something listens on it now (running) or not (idle)."""
    up = listening(api, str(info["Id"]))
    rows = []
    for app in session_apps(info):
        try:
            host_ip, host_port = published(info, app)
        except Failure:  # main1 was made before the app was declared
            host_ip, host_port = "", None
        rows.append(
            {
                **app.as_dict(),
                "host_address": host_ip,
                "host_port": host_port,
                "state": "running" if app.port in up else "idle",
            }
        )
    return rows
