"""plugins/module_utils/containers/apps_open.py against a stand-in of main1's engine: which
apps main1 has, where they are published, and the start of one on its first open (argv,
user, working folder), with its failures naming the app and showing its log. The real
engine and JupyterLab: tests/integration/test_apps_lab.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import Failure
from ansible_collections.bai.cluster.plugins.module_utils.containers import apps_open

HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid\n"
DEFINITION = {"command": ["/opt/app/bin/jupyter", "lab", "--port={ports[0]}"], "url_path": "/lab"}


def tcp(*ports: int) -> str:
    rows = [
        f"   0: 00000000:{p:04X} 00000000:0000 0A 00000000:00000000 00:00000000 0 1000"
        for p in ports
    ]
    return HEADER + "\n".join(rows) + "\n" + HEADER


class Main1:
    """main1's engine: its inspect, what listens in it, and what an exec does."""

    def __init__(self, *, listening=(2200,), starts=True, exits=None, definition=True):
        self.listening = set(listening)
        self.starts, self.exits = starts, exits
        self.definition = DEFINITION if definition else None
        self.execs: list[dict[str, Any]] = []
        self.files: dict[str, str] = {}  # what main1's cat reads, beside the definition
        self.info = {
            "Id": "c1",
            "State": {"Running": True, "Status": "running"},
            "Config": {
                "Labels": {
                    "ai.backend.service-ports": "jupyter:http:8090",
                    "ai.backend.cluster.apps": "web:http:8000",
                }
            },
            "HostConfig": {"Binds": ["/srv/data/s1:/home/work/data:rw"]},
            "NetworkSettings": {
                "Ports": {
                    "2200/tcp": [{"HostIp": "10.0.3.21", "HostPort": "30000"}],
                    "8090/tcp": [{"HostIp": "10.0.3.21", "HostPort": "30001"}],
                    "8000/tcp": [{"HostIp": "10.0.3.21", "HostPort": "30002"}],
                }
            },
        }

    def containers(self, **_kw):
        return [{"Id": "c1"}]

    def inspect_container(self, _cid):
        return self.info

    def exec_create(self, _cid, argv, user="root", workdir=None, environment=None):
        self.execs.append({"argv": argv, "user": user, "workdir": workdir, "env": environment})
        return len(self.execs) - 1

    def exec_start(self, exec_id, detach=False):
        argv = self.execs[exec_id]["argv"]
        if detach:
            self.execs[exec_id]["detached"] = True
            # sh writes its process ID ($1) and becomes the app, in main1's environment
            # and the exec's.
            pid = str(100 + exec_id)
            self.files[argv[4]] = pid + "\n"
            env = ["PATH=/usr/bin", *(self.execs[exec_id]["env"] or [])]
            self.files[f"/proc/{pid}/environ"] = "\0".join([*env, ""])
            if self.starts:
                self.listening.add(8090)
            return b""
        if argv[:2] == ["cat", "/proc/net/tcp"]:
            return tcp(*sorted(self.listening)).encode()
        if argv[0] == "cat" and argv[1].endswith(".json"):
            self.execs[exec_id]["code"] = 0 if self.definition else 1
            return json.dumps(self.definition).encode() if self.definition else b"no file"
        if argv[0] == "cat":
            self.execs[exec_id]["code"] = 0 if argv[1] in self.files else 1
            return self.files.get(argv[1], "cat: No such file").encode()
        if argv[0] == "tail":
            return b"Traceback ...\nOSError: [Errno 98] Address already in use"
        raise AssertionError(argv)

    def exec_inspect(self, exec_id):
        done = self.execs[exec_id]
        if done.get("detached"):
            return {"Running": self.exits is None, "ExitCode": self.exits}
        return {"ExitCode": done.get("code", 0)}


def test_main1_lists_its_image_app_then_its_own_with_their_published_ports():
    engine = Main1()
    rows = apps_open.describe(engine, engine.info)
    assert [(r["name"], r["port"], r["declared"], r["host_port"], r["state"]) for r in rows] == [
        ("jupyter", 8090, False, 30001, "idle"),
        ("web", 8000, True, 30002, "idle"),
    ]


def test_an_image_app_starts_as_work_in_the_data_folder_from_its_definition():
    engine = Main1()
    app = apps_open.find(engine.info, "jupyter")
    opened = apps_open.open_app(engine, engine.info, app, timeout=5)
    assert opened["state"] == "started" and opened["changed"] is True
    start = next(e for e in engine.execs if e.get("detached"))
    assert start["user"] == "work" and start["workdir"] == "/home/work/data"
    assert start["env"] == ["BAI_APP=jupyter"]
    # sh only writes the pidfile and redirects the output; the log's and pidfile's paths
    # and the app's argv come as positional parameters.
    assert start["argv"][:5] == [
        "/bin/sh",
        "-c",
        'echo $$ >"$1"; shift; exec "$@" >>"$0" 2>&1',
        "/tmp/bai-app-jupyter.log",
        "/tmp/bai-app-jupyter.pid",
    ]
    assert start["argv"][5:] == ["/opt/app/bin/jupyter", "lab", "--port=8090"]
    assert apps_open.url_path(engine, "c1", app) == "/lab"
    # Open again: it runs, nothing is started.
    again = apps_open.open_app(engine, engine.info, app, timeout=5)
    assert again == {"state": "running", "changed": False}
    assert sum(1 for e in engine.execs if e.get("detached")) == 1


def test_a_declared_app_is_only_looked_at():
    engine = Main1()
    app = apps_open.find(engine.info, "web")
    assert apps_open.open_app(engine, engine.info, app, timeout=5)["state"] == "idle"
    engine.listening.add(8000)
    assert apps_open.open_app(engine, engine.info, app, timeout=5)["state"] == "running"
    assert not any(e.get("detached") for e in engine.execs)
    assert apps_open.url_path(engine, "c1", app) == "/"


def test_check_mode_says_what_would_start_and_starts_nothing():
    engine = Main1()
    app = apps_open.find(engine.info, "jupyter")
    opened = apps_open.open_app(engine, engine.info, app, timeout=5, check_mode=True)
    assert opened["state"] == "started" and opened["command"][-1] == "--port=8090"
    assert not any(e.get("detached") for e in engine.execs)


@pytest.mark.parametrize(
    ("engine", "says"),
    [
        (Main1(starts=False, exits=1), "app jupyter ended (exit 1) before it listened"),
        (Main1(starts=False), "app jupyter did not listen on port 8090 within 0.3 s"),
    ],
)
def test_an_app_that_does_not_come_up_names_itself_and_shows_its_log(engine, says):
    app = apps_open.find(engine.info, "jupyter")
    with pytest.raises(Failure) as failed:
        apps_open.open_app(engine, engine.info, app, timeout=0.3)
    assert str(failed.value).startswith(says)
    assert "Address already in use" in str(failed.value)


def test_unknown_apps_missing_definitions_and_a_stopped_main1_are_said():
    engine = Main1(definition=False)
    with pytest.raises(Failure, match="main1 has no app tb .its apps: jupyter, web."):
        apps_open.find(engine.info, "tb")
    with pytest.raises(Failure, match="has no service definition"):
        apps_open.open_app(engine, engine.info, apps_open.find(engine.info, "jupyter"), 5)
    engine.info["State"] = {"Running": False, "Status": "exited"}
    with pytest.raises(Failure, match="main1 is not running .exited."):
        apps_open.main1(engine, "s1", "i1")


def test_an_open_while_an_earlier_start_comes_up_waits_for_it_and_starts_none():
    """An open that timed out left the app coming up: the next open waits for that one
    (not a second start, which could not bind the port), and says so if it does not."""
    engine = Main1(starts=False)
    app = apps_open.find(engine.info, "jupyter")
    with pytest.raises(apps_open.StartFailure):
        apps_open.open_app(engine, engine.info, app, timeout=0)
    with pytest.raises(Failure) as waited:
        apps_open.open_app(engine, engine.info, app, timeout=0.2)
    assert not isinstance(waited.value, apps_open.StartFailure)  # not a failed start
    pid = engine.files["/tmp/bai-app-jupyter.pid"].strip()
    assert str(waited.value).startswith(
        f"app jupyter (started earlier, process {pid}) did not listen on port 8090 within 0.2 s"
    )
    engine.listening.add(8090)
    assert apps_open.open_app(engine, engine.info, app, timeout=5) == {
        "state": "running",
        "changed": False,
    }
    assert sum(1 for e in engine.execs if e.get("detached")) == 1


@pytest.mark.parametrize(
    ("pidfile", "environ"),
    [
        ("7\n", None),
        ("7\n", "PATH=/usr/bin\0HOME=/home/work\0"),
        ("7\n", "PATH=/usr/bin\0BAI_APP=tensorboard\0"),
        ("../1\n", "BAI_APP=jupyter\0"),
    ],
    ids=["ended", "another-process", "another-app", "not-a-process-id"],
)
def test_a_pidfile_whose_process_is_not_the_app_starts_it_anew(pidfile, environ):
    """The pidfile's process ended, or its ID is another process's now (main1 restarted),
    or the pidfile is not one: the open starts the app."""
    engine = Main1()
    engine.files["/tmp/bai-app-jupyter.pid"] = pidfile
    if environ is not None:
        engine.files["/proc/7/environ"] = environ
        engine.files["/proc/../1/environ"] = environ
    app = apps_open.find(engine.info, "jupyter")
    assert apps_open.open_app(engine, engine.info, app, timeout=5)["state"] == "started"


def test_an_earlier_start_that_ends_while_waited_for_is_started_anew():
    engine = Main1(starts=False)
    app = apps_open.find(engine.info, "jupyter")
    with pytest.raises(apps_open.StartFailure):
        apps_open.open_app(engine, engine.info, app, timeout=0)
    pid = engine.files["/tmp/bai-app-jupyter.pid"].strip()
    del engine.files[f"/proc/{pid}/environ"]  # the earlier start ended
    engine.starts = True
    assert apps_open.open_app(engine, engine.info, app, timeout=5)["state"] == "started"
    assert sum(1 for e in engine.execs if e.get("detached")) == 2
