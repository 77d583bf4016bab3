"""Request input is data, never code (docs/security.md, "Request input is data"), on this
machine's engine (``-i inventories/local``: the agent is this machine too).

Jinja, shell and Go-template strings go into every string field a request carries, through
the ``bai-cluster`` command (which marks them ``!unsafe``) and through ``ansible-playbook
-e @request.yml`` with ``!unsafe`` tags: they reach the containers byte for byte, and no
canary file appears on the controller (= the agent) or in a container. The same strings
given as plain ``-e`` JSON, which Ansible would render, are refused before anything reads
them. Numbers out of their range are refused with nothing made.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import LABEL_SESSION
from conftest import VENV_BIN
from conftest import bai_cli as cli

pytestmark = pytest.mark.integration

LOCAL = "inventories/local"
INVENTORY = ("-i", LOCAL)
DATA_ROOT = Path("/srv/bai-data")
# A public key line whose comment is hostile (the comment is free text).
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOqYFzEZmbX0Zn1x6UPtZbC2QHgSXhcFJAuRApFvLXbN"


def hostile(canary: Path) -> dict[str, str]:
    """Strings that would do something if anything rendered or ran them: each names the
    canary it would make (``canary``'s folder, on the controller = the agent)."""
    return {
        "JINJA_LOOKUP": f'{{{{ lookup("pipe", "touch {canary}-jinja") }}}}',
        "JINJA_BLOCK": "{% if true %}yes{% endif %}",
        "JINJA_MATH": "{{ 1 + 1 }}{# comment #}",
        "SHELL_SUBST": f"$(touch {canary}-subst)",
        "SHELL_SEMI": f"x; touch {canary}-semi",
        "SHELL_TICKS": f"`touch {canary}-ticks`",
        "GO_TEMPLATE": "{{.State.Status}} {{json .Config}}",
        "QUOTES": 'it\'s "quoted" \\ back',
    }


def labelled(name: str) -> tuple[list[str], list[str]]:
    """(containers, networks) on this engine labelled with session ``name``."""
    flt = ["--filter", f"label={LABEL_SESSION}={name}"]
    containers = subprocess.run(
        ["docker", "ps", "-aq", *flt], capture_output=True, text=True, check=True
    ).stdout.split()
    networks = subprocess.run(
        ["docker", "network", "ls", "-q", *flt], capture_output=True, text=True, check=True
    ).stdout.split()
    return containers, networks


def exec_in(container: str, *argv: str, user: str = "work") -> str:
    done = subprocess.run(
        ["docker", "exec", "-u", user, container, *argv],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def container_env(container: str) -> dict[str, str]:
    out = subprocess.run(
        ["docker", "inspect", "-f", "{{json .Config.Env}}", container],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return dict(item.split("=", 1) for item in json.loads(out))


def no_canary(canary: Path, container: str | None = None) -> None:
    left = sorted(p.name for p in canary.parent.glob(f"{canary.name}*"))
    assert left == [], f"something ran a request string on the controller: {left}"
    if container:
        found = exec_in(container, "sh", "-c", f"ls -d /tmp/*canary* {canary}* 2>/dev/null; true")
        assert found.strip() == "", f"something ran a request string in {container}: {found}"


def destroy(name: str) -> None:
    cli(None, *INVENTORY, "session", "destroy", name)
    for ctr in labelled(name)[0]:
        subprocess.run(["docker", "rm", "-f", ctr], capture_output=True, check=False)
    for net in labelled(name)[1]:
        subprocess.run(["docker", "network", "rm", net], capture_output=True, check=False)


@pytest.fixture
def canary(tmp_path):
    if not (VENV_BIN / "bai-cluster").exists():
        pytest.skip(f"{VENV_BIN / 'bai-cluster'} is missing: run scripts/setup.sh venv")
    return tmp_path / "canary"


@pytest.fixture
def data_dir():
    """A data folder whose name is hostile too, and the destination to mount it on."""
    folder = DATA_ROOT / "it-input" / "{{ 1 + 1 }} $(touch x) {{.Id}}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "file").write_text("data\n")
    yield str(folder)
    (folder / "file").unlink()
    folder.rmdir()


def check_session(name: str, env: dict[str, str], canary: Path, mount: str | None = None):
    """Every hostile string arrived as given: in the container's environment, in an SSH
    login's environment, in the mount, the people's keys file and the labels."""
    main1 = f"bai-{name}-main1"
    got = container_env(main1)
    assert {key: got.get(key) for key in env} == env
    # An SSH login reads ~/.ssh/environment: the same bytes, nothing expanded.
    for key, value in env.items():
        out = exec_in(main1, "ssh", "main1", f"printenv {key}")
        assert out == value + "\n", key
    if mount:
        assert exec_in(main1, "cat", f"{mount}/file") == "data\n"
    keys = exec_in(main1, "cat", "/home/work/.ssh/authorized_keys2")
    assert f"{KEY} {env['JINJA_LOOKUP']}" in keys.splitlines()
    no_canary(canary, main1)


def test_the_cli_carries_hostile_strings_byte_for_byte(canary, data_dir):
    name = "it-input-cli"
    env = hostile(canary)
    mount = "/home/work/{{.Name}} {{ 7 * 7 }}"
    argv = [*INVENTORY, "--json", "session", "create", name, "-n", "1", "--mem", "256m"]
    argv += [arg for key, value in env.items() for arg in ("--env", f"{key}={value}")]
    argv += ["--mount", f"{data_dir}:{mount}:ro"]
    argv += ["--authorized-key", f"{KEY} {env['JINJA_LOOKUP']}"]
    try:
        run = cli(None, *argv)
        assert run.returncode == 0, run.stderr
        check_session(name, env, canary, mount)
        # What the CLI reads back (session env, show) holds the same strings.
        show = cli(None, *INVENTORY, "--json", "session", "show", name)
        assert show.returncode == 0, show.stderr
    finally:
        destroy(name)
    no_canary(canary)
    assert labelled(name) == ([], [])


def test_the_cli_refuses_hostile_names_and_owners_literally(canary):
    """Fields whose rules leave no room for braces are refused, the message showing the
    string as it was given (never rendered), and nothing runs."""
    jinja = f'{{{{ lookup("pipe", "touch {canary}-owner") }}}}'
    # --role splits at commas: a template without one.
    for argv, field, given in (
        (["it-input-owner", "-n", "1", "--owner", jinja], "session_owner", jinja),
        (["it-input-role", "--role", "main=1,image={{ 7 * 7 }}"], "image", "{{ 7 * 7 }}"),
        (["it-input-group", "-n", "1", "-g", jinja], "resource_group", jinja),
        (["{{ 7 * 7 }}", "-n", "1"], "name", "{{ 7 * 7 }}"),
    ):
        run = cli(None, *INVENTORY, "session", "create", *argv, "--mem", "256m")
        assert run.returncode == 2, run.stderr
        assert field in run.stderr and given in run.stderr, run.stderr
        assert labelled(argv[0]) == ([], [])
    no_canary(canary)


def test_session_run_takes_templates_and_go_templates_as_the_command(canary):
    name = "it-input-run"
    command = (
        "echo '{{ 1 + 1 }}' '{% if true %}yes{% endif %}' '{{.State.Status}}'"
        f" '$(touch {canary}-run)' '`touch {canary}-tick`'; echo \"{{{{ x }}}}\""
    )
    try:
        run = cli(
            None, *INVENTORY, "session", "run", name, "-n", "1", "--mem", "256m", "--", command
        )
    finally:
        destroy(name)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[-2:] == [
        f"{{{{ 1 + 1 }}}} {{% if true %}}yes{{% endif %}} {{{{.State.Status}}}}"
        f" $(touch {canary}-run) `touch {canary}-tick`",
        "{{ x }}",
    ], run.stdout
    no_canary(canary)


def unsafe_yaml_file(path: Path, extra_vars: dict) -> str:
    """``extra_vars`` as a YAML file with every string tagged ``!unsafe``: what the docs
    tell playbook users to pass (``-e @request.yml``)."""
    from bai_cli.runner import unsafe_yaml

    path.write_text(unsafe_yaml(extra_vars))
    assert "!unsafe" in path.read_text()
    return f"@{path}"


def test_the_playbook_keeps_unsafe_request_values_as_data(run_playbook, canary, data_dir):
    name = "it-input-pb"
    env = hostile(canary)
    mount = "/home/work/{{.Name}}"
    request = {
        "session_name": name,
        "session_size": 1,
        "session_resources": {"mem": "256m"},
        "session_env": env,
        "session_mounts": [{"src": data_dir, "dst": mount, "readonly": True}],
        "session_authorized_keys": [f"{KEY} {env['JINJA_LOOKUP']}"],
        "session_owner": "it-input",
    }
    vars_file = unsafe_yaml_file(canary.parent / "request.yml", request)
    try:
        run = run_playbook("session_create.yml", "-e", vars_file, inventory=LOCAL)
        assert run.rc == 0, run
        check_session(name, env, canary, mount)
    finally:
        destroy(name)
    no_canary(canary)


def test_the_playbook_runs_an_unsafe_batch_command_literally(run_playbook, canary):
    name = "it-input-pbrun"
    command = f"echo '{{{{ 1 + 1 }}}} {{{{.State.Status}}}}' '$(touch {canary}-pb)'"
    request = {
        "session_name": name,
        "session_size": 1,
        "session_resources": {"mem": "256m"},
        "session_type": "batch",
        "session_command": command,
        "session_batch_wait": True,
    }
    vars_file = unsafe_yaml_file(canary.parent / "request.yml", request)
    try:
        run = run_playbook("session_create.yml", "-e", vars_file, inventory=LOCAL)
        assert run.rc == 0, run
        logs = cli(None, *INVENTORY, "--json", "session", "logs", name)
        assert (
            json.loads(logs.stdout)["output"]
            == f"{{{{ 1 + 1 }}}} {{{{.State.Status}}}} $(touch {canary}-pb)\n"
        )
    finally:
        destroy(name)
    no_canary(canary)


def test_the_playbook_refuses_what_ansible_would_render(run_playbook, canary):
    """Plain -e JSON: Ansible renders its strings when a task reads them. The request
    check reads them first, unrendered, and refuses: no lookup runs, nothing is made."""
    name = "it-input-plain"
    env = hostile(canary)
    extra = {
        "session_name": name,
        "session_size": 1,
        "session_env": env,
        "session_owner": f'{{{{ lookup("pipe", "touch {canary}-owner") }}}}',
        "session_type": "batch",
        "session_command": f'{{{{ lookup("pipe", "touch {canary}-command") }}}}',
        "session_authorized_keys": [f'{KEY} {{{{ lookup("pipe", "touch {canary}-key") }}}}'],
    }
    run = run_playbook("session_create.yml", extra_vars=extra, inventory=LOCAL)
    assert run.rc != 0
    text = " ".join(run.failures)
    for path in ("session_env.JINJA_LOOKUP", "session_owner", "session_command"):
        assert f"{path}: " in text and "would be run as a Jinja template" in text, run
    assert "session_authorized_keys[0]" in text, run
    assert "session_env.SHELL_SUBST" not in text  # shell is data to Ansible
    assert labelled(name) == ([], [])
    no_canary(canary)
    # The other playbooks check first too: a destroy and an agent pause.
    for playbook, variables in (
        ("session_destroy.yml", {"session_name": f'{{{{ lookup("pipe", "touch {canary}-d") }}}}'}),
        (
            "agent_availability.yml",
            {
                "agent_name": "localhost",
                "agent_availability": "pause",
                "agent_reason": f'{{{{ lookup("pipe", "touch {canary}-a") }}}}',
            },
        ),
    ):
        run = run_playbook(playbook, extra_vars=variables, inventory=LOCAL)
        assert run.rc != 0 and "would be run as a Jinja template" in " ".join(run.failures), run
    no_canary(canary)


NUMBERS = [
    ("mtu-small", ["--mtu", "100"], {"session_network_mtu": 100}, "session_network_mtu: got 100"),
    ("mtu-huge", ["--mtu", "70000"], {"session_network_mtu": 70000}, "from 1280 to 9000"),
    ("wait", ["--wait", "-1"], {"session_wait_s": -1}, "session_wait_s: got -1"),
    ("lifetime", ["--lifetime", "-5"], {"session_lifetime_s": -5}, "lifetime_s: got -5"),
    ("ssh", ["--ssh-timeout", "0"], {"session_ssh_timeout_s": 0}, "session_ssh_timeout_s"),
    ("grace", ["--grace", "-1"], {"session_stop_grace_s": -1}, "session_stop_grace_s: got -1"),
    ("size", ["-n", "65"], {"session_size": 65}, "64"),
]


@pytest.mark.parametrize(
    ("option", "variables", "message"), [n[1:] for n in NUMBERS], ids=[n[0] for n in NUMBERS]
)
def test_numbers_out_of_range_are_refused_with_nothing_made(
    run_playbook, canary, option, variables, message
):
    name = "it-input-num"
    size = [] if option[0] == "-n" else ["-n", "1"]
    action = "run" if option[0] == "--grace" else "create"
    tail = ["--", "true"] if action == "run" else []
    done = cli(None, *INVENTORY, "session", action, name, *size, *option, *tail)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr, done.stderr
    assert labelled(name) == ([], [])
    extra = {"session_name": name, "session_size": 1, **variables}
    if option[0] == "--grace":
        extra.update(session_type="batch", session_command="true")
    run = run_playbook("session_create.yml", extra_vars=extra, inventory=LOCAL)
    assert run.rc != 0
    assert any(message in failure for failure in run.failures), run
    assert labelled(name) == ([], [])
