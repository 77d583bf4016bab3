"""Request input is data (module_utils/session/request.py, limits.py, bai_cli's unsafe extravars
and numeric options): no Docker, no playbook run."""

from __future__ import annotations

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.template import is_trusted_as_template, trust_as_template
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError
from ansible_collections.bai.cluster.plugins.module_utils.session.limits import (
    LIMITS,
    check_number,
    check_numbers,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.request import (
    looks_like_template,
    request_problems,
    template_strings,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import normalize_spec

from bai_cli import __main__ as cli
from bai_cli import api, runner
from bai_cli.errors import EXIT_BAD_INPUT, BaiClusterError
from bai_cli.runner import unsafe_yaml

HOSTILE = {
    "JINJA": '{{ lookup("pipe", "touch /tmp/canary") }}',
    "BLOCK": "{% if true %}yes{% endif %}",
    "COMMENT": "a {# b #} c",
    "GO": "{{.State.Status}}",
    "SHELL": "$(touch /tmp/canary); `id`; x",
    "ODD": "line\nnext\ttab \\ \"q\" 'q' \x7f \x1b[0m é \U0001f600 \u2028",
}
# Strings YAML would read as something else unquoted (and Ansible's !unsafe constructor
# would, even quoted): they must arrive as the same strings.
LOOKALIKES = {
    "YES": "yes",
    "NO": "no",
    "TRUE": "true",
    "ON": "on",
    "INT": "123",
    "HEX": "0x10",
    "FLOAT": "1.5",
    "NULL": "null",
    "TILDE": "~",
    "EMPTY": "",
    "DATE": "2026-11-27",
    "JINJA_HEADER": "#jinja2:variable_start_string:'[['\n[[ 1 + 1 ]]",
}


# --- limits ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("session_network_mtu", 1280, 1280),
        ("session_network_mtu", "9000", 9000),
        ("session_network_mtu", 1500.0, 1500),
        ("session_wait_s", 0, 0),
        ("session_wait_s", "2.5", 2.5),
        ("session_stop_grace_s", 0, 0),
        ("session_lifetime_s", 86400, 86400),
        ("agent_drain_timeout_s", " 600 ", 600),
    ],
)
def test_numbers_in_range_are_kept(name, value, expected):
    got = check_number(name, value)
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        (
            "session_network_mtu",
            100,
            "session_network_mtu: got 100; expected a whole number from 1280 to 9000",
        ),
        ("session_network_mtu", 70000, "session_network_mtu: got 70000; expected"),
        ("session_network_mtu", 1500.5, "got 1500.5; expected a whole number"),
        ("session_wait_s", -1, "session_wait_s: got -1; expected a number from 0 to 86400"),
        ("session_wait_s", "-0.5", "session_wait_s: got -0.5"),
        ("session_stop_grace_s", -1, "session_stop_grace_s: got -1; expected a whole number"),
        ("session_ssh_timeout_s", 0, "from 1 to 3600"),
        ("session_lifetime_s", 10**9, "session_lifetime_s: got 1000000000"),
        ("session_wait_s", "soon", "session_wait_s: got 'soon'"),
        ("session_wait_s", "{{ 5 }}", "got '{{ 5 }}'"),
        ("session_wait_s", True, "got bool True"),
        ("session_wait_s", float("nan"), "got nan"),
        ("session_wait_s", float("inf"), "got inf"),
        ("session_wait_s", [1], "got list [1]"),
    ],
)
def test_numbers_out_of_range_name_the_variable_and_the_range(name, value, message):
    with pytest.raises(SpecError, match=None) as err:
        check_number(name, value)
    assert message in str(err.value)


def test_every_limit_describes_its_unit_and_has_a_sane_range():
    for name, limit in LIMITS.items():
        assert 0 <= limit.low < limit.high, name
        assert limit.what and "from" in limit.describe(), name


def test_check_numbers_passes_over_other_variables_and_nones():
    given = {"session_network_mtu": None, "session_name": "x", "session_wait_s": -2}
    assert check_numbers(given) == [
        "session_wait_s: got -2; expected a number from 0 to 86400 "
        "(seconds a PENDING session waits for capacity)"
    ]


def test_the_spec_bounds_the_lifetime():
    assert normalize_spec({"name": "a", "size": 1, "lifetime_s": 3600}).lifetime_s == 3600
    with pytest.raises(SpecError, match="lifetime_s: got 40000000; expected a whole number"):
        normalize_spec({"name": "a", "size": 1, "lifetime_s": 40_000_000})


# --- template detection -------------------------------------------------------------------
@pytest.mark.parametrize(
    "text", ["{{ x }}", "a{%b", "{# c #}", "#jinja2:variable_start_string:'<<'"]
)
def test_what_jinja_would_render_is_seen(text):
    assert looks_like_template(text)


@pytest.mark.parametrize("text", ["$(id)", "`id`", "a; b", "{ x }", "}} {", "%{x}", "${X}"])
def test_shell_and_plain_braces_are_not_templates(text):
    assert not looks_like_template(text)


def test_template_strings_walks_mappings_and_lists_but_not_keys():
    value = {"{{ k }}": "plain", "env": {"A": "{{ a }}"}, "keys": ["ok", "x {% y %}"]}
    assert list(template_strings(value, "v")) == [
        ("v.env.A", "{{ a }}"),
        ("v.keys[1]", "x {% y %}"),
    ]


def test_request_problems_refuse_only_what_ansible_would_render():
    loader = DataLoader()
    # -e '{...}' (JSON on the command line): Ansible trusts it as templates.
    plain = loader.load(
        trust_as_template('{"session_env": {"A": "{{ 1 + 1 }}", "S": "$(id)"}, "bai_x": "{{ y }}"}')
    )
    problems = request_problems(plain, is_trusted_as_template)
    assert len(problems) == 1
    assert problems[0].startswith("session_env.A: '{{ 1 + 1 }}' would be run as a Jinja template")
    assert "!unsafe" in problems[0]
    # The same through bai-cluster's YAML (every string !unsafe): data, no problem.
    tagged = loader.load(unsafe_yaml({"session_env": {"A": "{{ 1 + 1 }}"}}))
    assert request_problems(tagged, is_trusted_as_template) == []


def test_request_problems_check_numbers_too():
    given = {"session_network_mtu": "100", "agent_drain_delay_s": 0, "session_size": "2"}
    problems = request_problems(given, lambda value: True)
    assert [p.split(":")[0] for p in problems] == ["session_network_mtu", "agent_drain_delay_s"]


# --- bai-cluster: unsafe extravars --------------------------------------------------------
def test_unsafe_yaml_carries_every_string_byte_for_byte_and_untrusted(tmp_path):
    extravars = {
        "session_name": "s1",
        "session_size": 2,
        "session_wait_s": 1.5,
        "session_queue": True,
        "session_env": {**HOSTILE, **LOOKALIKES},
        "session_command": "echo '{{ 1 + 1 }}'; docker inspect -f '{{.State.Status}}' c",
        "session_mounts": [{"src": "/srv/bai-data/{{ x }}", "dst": "/d", "readonly": False}],
        "nothing": None,
    }
    path = tmp_path / "extravars"
    path.write_text(unsafe_yaml(extravars))
    loaded = DataLoader().load_from_file(str(path), trusted_as_template=True)
    assert loaded == extravars
    for key, value in extravars["session_env"].items():
        assert isinstance(loaded["session_env"][key], str), key
        assert loaded["session_env"][key] == value, key
    strings = [loaded["session_command"], *loaded["session_env"].values()]
    strings.append(loaded["session_mounts"][0]["src"])
    # Every string Jinja would render is untrusted; the others cannot be rendered.
    templates = [s for s in strings if looks_like_template(s)]
    assert len(templates) == 7  # the command, the mount, JINJA, BLOCK, COMMENT, GO, JINJA_HEADER
    assert not any(is_trusted_as_template(s) for s in templates)
    assert isinstance(loaded["session_size"], int) and loaded["session_queue"] is True


def test_the_runner_writes_unsafe_extravars(monkeypatch, tmp_path):
    """What ansible-runner is handed as env/extravars is the !unsafe YAML."""
    import ansible_runner

    seen = {}

    class Done:
        rc, status = 0, "successful"

        @property
        def stdout(self):
            raise FileNotFoundError

    def fake_run(**kwargs):
        seen["text"] = (
            tmp_path.parent / kwargs["private_data_dir"] / "env" / "extravars"
        ).read_text()
        return Done()

    monkeypatch.setattr(ansible_runner, "run", fake_run)
    from bai_cli.runner import run_playbook

    run_playbook("playbooks/session_list.yml", {"session_env": {"A": "{{ a }}"}})
    assert seen["text"] == 'session_env:\n  A: !unsafe "{{ a }}"\n'


# --- bai-cluster: numeric options ---------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["session", "create", "s1", "-n", "1", "--mtu", "100"],
            "--mtu: session_network_mtu: got 100",
        ),
        (["session", "create", "s1", "-n", "1", "--mtu", "70000"], "from 1280 to 9000"),
        (["session", "create", "s1", "-n", "1", "--wait", "-1"], "--wait: session_wait_s: got -1"),
        (["session", "create", "s1", "-n", "1", "--lifetime", "-1"], "--lifetime:"),
        (["session", "create", "s1", "-n", "1", "--ssh-timeout", "0"], "--ssh-timeout:"),
        (["session", "run", "s1", "-n", "1", "--grace", "-1", "--", "true"], "--grace: "),
    ],
)
def test_numeric_options_out_of_range_are_bad_input_and_run_nothing(
    argv, message, monkeypatch, capsys
):
    def never(*args, **kwargs):
        raise AssertionError("a playbook ran")

    monkeypatch.setattr(runner, "run_playbook", never)
    assert cli.main(argv) == EXIT_BAD_INPUT
    assert message in capsys.readouterr().err


def test_the_api_checks_numbers_before_running(monkeypatch):
    monkeypatch.setattr(runner, "run_playbook", lambda *a, **k: pytest.fail("a playbook ran"))
    with pytest.raises(BaiClusterError) as err:
        api.create_session("s1", 1, network_mtu=100, stop_grace_s=-1)
    assert err.value.kind == "bad_input"
    assert "session_network_mtu: got 100" in err.value.message
    assert "session_stop_grace_s: got -1" in err.value.message
    with pytest.raises(BaiClusterError, match="session_batch_timeout_s: got -1"):
        api.wait_job("s1", timeout_s=-1)
