"""bai_session_containers run as a module - its ``main()``, argument spec included -
against a Docker engine in memory.

SIMULATED: the engine is tests/unit/docker_fake.py's ``FakeEngine`` (docker-py's
low-level client in memory; the integration suite runs the same module against real
engines). The agent has no GPU, no RDMA device and may raise its resource limits
(``detect``, ``rdma_devices`` and ``limits_ceiling`` patched). Everything else is real:
the module is given what playbooks/session_make.yml gives it for a single-agent session
- the kernels, network and spec of the real planner (``plan_session`` over
``normalize_spec``), the agent's settings from its host variables
(``bai_agent_settings``) - and each test checks what the engine holds afterwards.
"""

from __future__ import annotations

import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_AGENT_ID,
    LABEL_GPU_DEVICES,
    LABEL_LEDGER,
    LABEL_SESSION_ID,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement import Agent
from ansible_collections.bai.cluster.plugins.modules import (
    bai_agent_availability,
    bai_session_containers,
)
from availability_fake import on_the_agent
from containers_fake import AGENT, HOST, KEYPAIR, args_for, container_names, plan_for, run
from docker_fake import GI, SSHD_LISTENING, api_error, run_module


# --- create -----------------------------------------------------------------------------
def test_a_two_container_session_is_created_on_its_network_with_the_plan_s_labels_and_limits(
    engine, tmp_path, data_root
):
    plan = plan_for(env={"EPOCHS": "3"}, mounts=[{"src": str(data_root / "ds"), "dst": "/data"}])
    result = run(args_for(plan, tmp_path, data_root, ledger_ids=["ledger-1"]), engine)

    assert result["changed"] is True, result
    assert result["created"] == ["bai-s1-main1", "bai-s1-sub1"]
    assert result["restarted"] == [] and result["removed"] == []
    assert result["mesh"] == ["ok main1", "ok sub1"]
    network = engine.network_named("bai-s1-net")
    assert network is not None and result["network"]["name"] == "bai-s1-net"
    assert network["Labels"] == {**plan["network"]["labels"]}
    assert network["Labels"][LABEL_SESSION_ID] == plan["session_id"]

    main1, sub1 = engine.session_containers("s1")
    assert [main1.name, sub1.name] == ["bai-s1-main1", "bai-s1-sub1"]
    for container, kernel in zip((main1, sub1), plan["kernels"]):
        assert container.status == "running"
        assert container.hostname == kernel["hostname"]
        # The plan's labels, this agent's identity (its engine ID) and the ledger.
        assert container.labels == {
            **kernel["labels"],
            LABEL_AGENT_ID: engine.engine_id,
            LABEL_LEDGER: "ledger-1",
        }
        hc = container.host_config
        assert hc["NanoCpus"] == 2 * 10**9
        assert hc["Memory"] == hc["MemorySwap"] == 2 * GI == kernel["resources"]["mem"]
        assert hc["ShmSize"] == kernel["resources"]["shm"]
        assert hc["RestartPolicy"] == {"Name": "unless-stopped"}
        assert hc["CapDrop"] == ["ALL"] and "SYS_ADMIN" not in hc["CapAdd"]
        assert hc["SecurityOpt"] == ["no-new-privileges:true"]
        assert hc["Init"] is True
        assert hc["Binds"] == [f"{os.path.realpath(data_root / 'ds')}:/data:rw"]
        # Only on the session network, reachable by its hostname.
        assert hc["NetworkMode"] == "bai-s1-net"
        assert list(container.networks.values()) == [[kernel["hostname"]]]
        env = container.env
        assert env["EPOCHS"] == "3"
        assert env["BACKENDAI_CLUSTER_HOST"] == kernel["hostname"]
        assert env["BACKENDAI_CLUSTER_HOSTS"] == "main1,sub1"
        assert env["BACKENDAI_SESSION_ID"] == plan["session_id"]
        assert env["GPU_COUNT"] == "0" and "NVIDIA_VISIBLE_DEVICES" not in env
        # The session keys went in (root-only files) before the first start.
        path, members = container.archives[0]
        assert path == "/opt/bai"
        assert members["session/id_cluster"] == (0o600, 0, KEYPAIR["private_key"].encode())
        assert members["session/host_key.pub"][2] == KEYPAIR["host_public_key"].encode()
        assert container.keys_at_start

    # Only main1 publishes sshd, on a host port of settings.port_range (30000-31000).
    assert main1.host_config["PortBindings"] == {
        "2200/tcp": [{"HostIp": "127.0.0.1", "HostPort": "30000-31000"}]
    }
    assert "PortBindings" not in sub1.host_config and sub1.ports == []
    (published,) = main1.ports
    assert 30000 <= published["PublicPort"] <= 31000
    assert result["ssh_port"] == published["PublicPort"]
    assert [c["state"] for c in result["containers"]] == ["running", "running"]
    assert result["containers"][0]["ports"][0]["host_port"] == published["PublicPort"]

    # Keys in before start, each container; created under the admission lock file.
    for name in ("bai-s1-main1", "bai-s1-sub1"):
        assert engine.calls.index(("put_archive", name)) < engine.calls.index(("start", name))
    assert len(os.listdir(tmp_path / "locks")) == 1
    assert "keypair" not in str(result) and KEYPAIR["private_key"] not in str(result)


def test_a_second_run_changes_nothing(engine, tmp_path, data_root):
    args = args_for(plan_for(), tmp_path, data_root)
    first = run(args, engine)
    ids = sorted(c.id for c in engine.session_containers("s1"))
    engine.calls.clear()

    again = run(args, engine)

    assert again["changed"] is False, again
    assert again["created"] == [] and again["restarted"] == []
    assert again["ssh_port"] == first["ssh_port"]
    assert again["mesh"] == ["ok main1", "ok sub1"]
    assert sorted(c.id for c in engine.session_containers("s1")) == ids
    made = {"create_container", "start", "put_archive", "create_network", "remove_container"}
    assert not [call for call in engine.calls if call[0] in made]


def test_main1_s_agent_returns_its_addresses_for_the_app_proxy_route(engine, tmp_path, data_root):
    # ip is the host's: its answer is given here, and the module hands its lines on.
    line = "2: eth0    inet 10.210.1.12/24 brd 10.210.1.255 scope global eth0"
    asked = []

    def ip(module, argv, **kwargs):
        asked.append(argv)
        return 0, line + "\n", ""

    args = args_for(plan_for(), tmp_path, data_root)
    patches = {**HOST, (AnsibleModule, "run_command"): ip}
    with_them = run_module(
        bai_session_containers, {**args, "host_addresses": True}, engine, patches=patches
    )
    assert with_them["host_addresses"] == [line] and asked == [["ip", "-o", "-4", "addr", "show"]]
    # Not asked: not read. ip failing: left out (the route reads them itself).
    assert "host_addresses" not in run_module(bai_session_containers, args, engine, patches=patches)
    patches[(AnsibleModule, "run_command")] = lambda module, argv, **kw: (1, "", "no ip")
    failed_ip = {**args, "host_addresses": True}
    assert "host_addresses" not in run_module(
        bai_session_containers, failed_ip, engine, patches=patches
    )
    assert len(asked) == 1


def test_a_stopped_container_is_started_again(engine, tmp_path, data_root):
    args = args_for(plan_for(), tmp_path, data_root)
    run(args, engine)
    engine.stop("bai-s1-sub1")
    sub1 = engine.by_name("bai-s1-sub1")
    engine.calls.clear()
    engine.log_reads.clear()
    began = int(time.time())

    result = run(args, engine)

    assert result["changed"] is True, result
    assert result["created"] == []
    assert result["restarted"] == ["bai-s1-sub1"]
    assert engine.by_name("bai-s1-sub1") is sub1 and sub1.status == "running"
    assert engine.called("start") == ["bai-s1-sub1"]
    assert engine.called("create_container") == []
    # Its sshd was waited for in the log written since this start: the line of its first
    # start does not count.
    assert [name for name, _since in engine.log_reads] == ["bai-s1-sub1"]
    since = engine.log_reads[0][1]
    assert since is not None and since >= began
    assert [line for _at, line in sub1.log].count(SSHD_LISTENING) == 2


def test_check_mode_reports_what_would_be_created_and_creates_nothing(engine, tmp_path, data_root):
    result = run(args_for(plan_for(), tmp_path, data_root), engine, check_mode=True)

    assert result["changed"] is True, result
    assert result["created"] == ["bai-s1-main1", "bai-s1-sub1"]
    assert [c["state"] for c in result["containers"]] == ["planned", "planned"]
    assert result["ssh_port"] is None
    assert engine.store == {}
    assert engine.network_named("bai-s1-net") is None
    assert not (tmp_path / "locks").exists()


# --- refused before anything is made ----------------------------------------------------
def test_a_mount_source_outside_the_data_roots_fails_and_creates_nothing(
    engine, tmp_path, data_root
):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    plan = plan_for(mounts=[{"src": str(outside), "dst": "/data"}])

    result = run(args_for(plan, tmp_path, data_root), engine)

    assert result["failed"] is True and result["refused"] is False
    assert f"mounts[0].src: {outside} is outside the agent's data roots" in result["msg"]
    assert result["msg"].endswith("nothing was created")
    assert engine.store == {} and engine.network_named("bai-s1-net") is None


def test_a_symbolic_link_out_of_the_data_roots_fails_and_creates_nothing(
    engine, tmp_path, data_root
):
    outside = tmp_path / "secret"
    outside.mkdir()
    (data_root / "link").symlink_to(outside)
    plan = plan_for(mounts=[{"src": str(data_root / "link"), "dst": "/data"}])

    result = run(args_for(plan, tmp_path, data_root), engine)

    assert result["failed"] is True
    assert f"resolves to {outside}, outside the agent's data roots" in result["msg"]
    assert engine.store == {} and engine.network_named("bai-s1-net") is None


def test_a_missing_image_fails_naming_it_and_creates_nothing(engine, tmp_path, data_root):
    plan = plan_for(image="registry.example/bai/train:2")

    result = run(args_for(plan, tmp_path, data_root), engine)

    assert result["failed"] is True and result["agent"] == AGENT
    assert "image registry.example/bai/train:2 not on agent agent1" in result["msg"]
    assert "nothing was created" in result["msg"]
    assert engine.store == {} and engine.network_named("bai-s1-net") is None


def test_admission_refuses_cpus_another_session_holds_and_creates_nothing(
    engine, tmp_path, data_root
):
    # Session big holds 6 of the 8 CPUs; s1 was planned on a stale read (agent1 empty).
    big = run(args_for(plan_for("big", size=1, cpu=6), tmp_path, data_root), engine)
    assert big["changed"] is True, big
    engine.calls.clear()

    result = run(args_for(plan_for("s1", cpu=2), tmp_path, data_root), engine)

    assert result["failed"] is True
    assert result["refused"] is True and result["agent"] == AGENT
    assert f"agent agent1 ({engine.engine_id}) refuses session s1" in result["msg"]
    assert "short of cpu (free 2)" in result["msg"]
    assert "big: 1 container(s), running" in result["msg"]
    assert container_names(engine, "s1") == []
    assert engine.called("create_container") == []
    # Refused before its bridge was made: nothing to remove, nothing said to be removed.
    assert engine.called("create_network") == []
    assert engine.network_named("bai-s1-net") is None
    assert "removed" not in result["msg"]
    assert container_names(engine, "big") == ["bai-big-main1"]
    assert engine.by_name("bai-big-main1").status == "running"


def test_admission_counts_a_stopped_session_too(engine, tmp_path, data_root):
    # A session holds what it was given until it is destroyed, in any state.
    run(args_for(plan_for("big", size=1, cpu=6), tmp_path, data_root), engine)
    engine.stop("bai-big-main1")

    result = run(args_for(plan_for("s1", cpu=2), tmp_path, data_root), engine)

    assert result["refused"] is True, result
    assert "big: 1 container(s), exited" in result["msg"]
    assert container_names(engine, "s1") == []


def test_another_ledger_s_sessions_make_the_agent_refuse(engine, tmp_path, data_root):
    run(args_for(plan_for("big", size=1, cpu=1), tmp_path, data_root, ledger_ids=["L-a"]), engine)

    result = run(args_for(plan_for("s1"), tmp_path, data_root, ledger_ids=["L-b"]), engine)

    assert result["failed"] is True, result
    assert "session(s) big counted by another session ledger (L-a)" in result["msg"]
    assert container_names(engine, "s1") == []
    assert engine.network_named("bai-s1-net") is None


def test_a_container_of_another_instance_of_the_session_is_left_alone(engine, tmp_path, data_root):
    run(args_for(plan_for(), tmp_path, data_root), engine)
    before = {c.id: c.status for c in engine.store.values()}

    # The same name planned again: new session and kernel ids.
    result = run(args_for(plan_for(), tmp_path, data_root), engine)

    assert result["failed"] is True, result
    assert "belongs to another instance of session s1" in result["msg"]
    assert {c.id: c.status for c in engine.store.values()} == before


def test_a_container_name_taken_outside_the_session_fails_untouched(engine, tmp_path, data_root):
    engine.create_container("bai/session:latest", name="bai-s1-sub1", labels={"app": "mine"})
    engine.calls.clear()

    result = run(args_for(plan_for(), tmp_path, data_root), engine)

    assert result["failed"] is True, result
    msg = result["msg"]
    assert "container name(s) bai-s1-sub1 already used by containers that are not" in msg
    assert [c.labels for c in engine.store.values()] == [{"app": "mine"}]
    assert engine.called("create_container") == []


# --- failures after something was made ----------------------------------------------------
def test_a_create_that_fails_part_way_removes_what_it_made(engine, tmp_path, data_root):
    engine.fail(
        "start",
        "bai-s1-sub1",
        api_error(500, "OCI runtime create failed: unable to start container process"),
    )

    result = run(args_for(plan_for(), tmp_path, data_root), engine)

    assert result["failed"] is True and result["refused"] is False, result
    msg = result["msg"]
    assert "could not start session s1 on agent agent1: bai-s1-sub1: OCI runtime" in msg
    assert "removed the 2 container(s) and network bai-s1-net this run had made" in msg
    assert engine.called("create_container") == ["bai-s1-main1", "bai-s1-sub1"]
    assert engine.store == {}
    assert engine.network_named("bai-s1-net") is None


ATTACH_TIMED_OUT = "Could not attach to network bai-s1-net: context deadline exceeded"


def test_an_attach_that_timed_out_asking_a_gone_manager_is_tried_once_more(
    engine, tmp_path, data_root
):
    # A swarm worker asks a manager to attach the overlay; one that has just stopped
    # leaves the engine's request to run out (20 s) while its agent moves to another.
    engine.fail("start", "bai-s1-sub1", api_error(500, ATTACH_TIMED_OUT))

    result = run(args_for(plan_for(), tmp_path, data_root), engine)

    assert result.get("failed") is not True, result
    assert engine.called("start") == ["bai-s1-main1", "bai-s1-sub1", "bai-s1-sub1"]
    assert any("timed out asking a swarm manager" in w for w in result["warnings"]), result
    assert all(c.status == "running" for c in engine.store.values())


def test_an_attach_that_times_out_twice_fails_and_removes_what_it_made(engine, tmp_path, data_root):
    engine.fail("start", "bai-s1-sub1", api_error(500, ATTACH_TIMED_OUT), always=True)

    result = run(args_for(plan_for(), tmp_path, data_root), engine)

    assert result["failed"] is True, result
    assert f"bai-s1-sub1: {ATTACH_TIMED_OUT}" in result["msg"], result["msg"]
    assert engine.called("start").count("bai-s1-sub1") == 2
    assert engine.store == {}


def test_a_container_that_exits_before_sshd_listens_fails_the_run_and_is_removed(
    engine, tmp_path, data_root
):
    engine.crash("bai-s1-sub1", 1, b"entrypoint: /opt/container/bootstrap.sh: line 3: oops\n")

    result = run(args_for(plan_for(), tmp_path, data_root), engine)

    assert result["failed"] is True, result
    msg = result["msg"]
    assert "container bai-s1-sub1 on agent agent1 stopped (exit code 1) before sshd" in msg
    assert "bootstrap.sh: line 3: oops" in result["msg"]
    assert engine.store == {} and engine.network_named("bai-s1-net") is None


def test_a_container_ssh_cannot_reach_fails_the_gate_and_the_run(engine, tmp_path, data_root):
    engine.unreachable.add("sub1")

    result = run(args_for(plan_for(), tmp_path, data_root), engine)

    assert result["failed"] is True, result
    assert result["msg"].startswith(
        "the health gate of session s1 failed (checked twice): sub1 on agent agent1: ssh: "
    ), result["msg"]
    assert "Connection refused" in result["msg"]
    assert "removed the 2 container(s)" in result["msg"]
    assert engine.store == {} and engine.network_named("bai-s1-net") is None
    assert engine.gate_runs == 2


def test_a_gate_fault_seen_once_is_checked_again_and_passes(engine, tmp_path, data_root):
    engine.gate_faults = {"sub1": ("mtu", "no full-size packet")}
    engine.gate_faults_left = 1

    result = run(args_for(plan_for(), tmp_path, data_root), engine)

    assert result["changed"] is True and engine.gate_runs == 2, result
    assert result["gate"]["members"] == {"main1": {"ssh": "ok"}, "sub1": {"ssh": "ok"}}
    assert result["mesh"] == ["ok main1", "ok sub1"]


def test_a_gate_fault_seen_twice_fails_naming_the_check_member_and_agent(
    engine, tmp_path, data_root
):
    engine.gate_faults = {"sub1": ("data", "/home/work/data is not mounted")}

    result = run(args_for(plan_for(), tmp_path, data_root), engine)

    assert result["failed"] is True, result
    assert result["msg"].startswith(
        "the health gate of session s1 failed (checked twice): sub1 on agent agent1: data: "
        "/home/work/data is not mounted; "
    ), result["msg"]
    assert engine.store == {} and engine.gate_runs == 2


def test_the_gate_runs_the_checks_asked_for(engine, tmp_path, data_root):
    args = args_for(plan_for(), tmp_path, data_root, gate={"checks": ["dns", "clock"]})
    assert run(args, engine)["changed"] is True
    assert engine.gate_checks == ["dns,clock"]
    bad = run(args_for(plan_for(), tmp_path, data_root, gate={"checks": ["ping"]}), engine)
    assert "value of checks must be one or more of: ssh, dns," in bad["msg"], bad


# --- absent -----------------------------------------------------------------------------
def test_state_absent_removes_the_session_s_containers_and_network(engine, tmp_path, data_root):
    run(args_for(plan_for(), tmp_path, data_root), engine)
    run(args_for(plan_for("other", size=1, cpu=1), tmp_path, data_root), engine)
    # As session_destroy.yml calls it.
    absent = {"session": "s1", "agent": AGENT, "state": "absent", "networks": True}

    result = run(absent, engine)

    assert result["changed"] is True, result
    assert result["removed"] == ["bai-s1-main1", "bai-s1-sub1"]
    assert result["networks_removed"] == ["bai-s1-net"]
    assert container_names(engine, "s1") == [] and engine.network_named("bai-s1-net") is None
    assert container_names(engine, "other") == ["bai-other-main1"]
    assert engine.network_named("bai-other-net") is not None

    again = run(absent, engine)
    assert again == {**again, "changed": False, "removed": [], "networks_removed": []}


def test_state_absent_in_check_mode_removes_nothing(engine, tmp_path, data_root):
    run(args_for(plan_for(), tmp_path, data_root), engine)

    result = run(
        {"session": "s1", "agent": AGENT, "state": "absent", "networks": True},
        engine,
        check_mode=True,
    )

    assert result["changed"] is True
    assert result["removed"] == ["bai-s1-main1", "bai-s1-sub1"]
    assert result["networks_removed"] == ["bai-s1-net"]
    assert container_names(engine) == ["bai-s1-main1", "bai-s1-sub1"]
    assert engine.network_named("bai-s1-net") is not None


# --- bad options: nothing is asked of Docker ------------------------------------------------
def test_a_bad_settings_value_fails_before_any_docker_call(engine, tmp_path, data_root):
    args = args_for(plan_for(), tmp_path, data_root)
    args["settings"] = {**args["settings"], "restart_policy": "sometimes"}

    result = run(args, engine)

    assert result["failed"] is True
    assert "restart_policy" in result["msg"] and "sometimes" in result["msg"]
    assert engine.connections == 0 and engine.calls == []


def test_an_unknown_setting_fails_before_any_docker_call(engine, tmp_path, data_root):
    args = args_for(plan_for(), tmp_path, data_root)
    args["settings"] = {**args["settings"], "port_ranges": "30000-31000"}

    result = run(args, engine)

    assert result["failed"] is True
    assert "port_ranges" in result["msg"]
    assert engine.connections == 0 and engine.calls == []


def test_an_invalid_kernels_entry_fails_before_docker_is_asked_anything(
    engine, tmp_path, data_root
):
    args = args_for(plan_for(), tmp_path, data_root)
    args["kernels"] = [{"hostname": "main1", "role": "main"}, *args["kernels"][1:]]

    result = run(args, engine)

    assert result["failed"] is True
    assert result["msg"].startswith("kernels: entry 'main1' is not a kernel of the session's plan")
    assert result["msg"].endswith("pass plan.kernels unchanged; nothing was changed")
    assert engine.calls == []


def test_a_bad_port_range_fails_before_anything_is_made(engine, tmp_path, data_root):
    args = args_for(plan_for(), tmp_path, data_root)
    args["settings"] = {**args["settings"], "port_range": "31000-30000"}

    result = run(args, engine)

    assert result["failed"] is True, result
    assert "port_range" in result["msg"] and "nothing was changed" in result["msg"]
    assert engine.calls == []


def test_a_bad_authorized_key_fails_before_docker_is_reached(engine, tmp_path, data_root):
    args = args_for(plan_for(), tmp_path, data_root, authorized_keys=["not a key"])

    result = run(args, engine)

    assert result["failed"] is True
    assert result["msg"].startswith("authorized_keys: ")
    assert result["msg"].endswith("nothing was changed")
    assert engine.connections == 0


def test_people_s_keys_go_into_every_new_container_before_it_starts(engine, tmp_path, data_root):
    person = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPerson alice@laptop"
    args = args_for(plan_for(), tmp_path, data_root, authorized_keys=[person])

    result = run(args, engine)

    assert result["changed"] is True, result
    for container in engine.session_containers("s1"):
        paths = [path for path, _members in container.archives]
        assert paths == ["/opt/bai", "/home/work/.ssh"]
        (_mode, _uid, data) = container.archives[1][1]["authorized_keys2"]
        assert data == f"{person}\n".encode()


# --- misdirected calls ----------------------------------------------------------------------
def test_mesh_check_on_an_agent_without_the_master_fails_cleanly(engine, tmp_path, data_root):
    two = [Agent(AGENT, "default", 2, 4 * GI, 0), Agent("agent2", "default", 2, 4 * GI, 0)]
    plan = plan_for(mode="multi-node", agents=two)
    assert [(k["hostname"], k["agent"]) for k in plan["kernels"]] == [
        ("main1", AGENT),
        ("sub1", "agent2"),
    ]
    # The overlay is made on a Swarm manager beforehand; here a network of that name.
    engine.create_network(plan["network"]["name"], labels=plan["network"]["labels"])
    args = args_for(plan, tmp_path, data_root, agent="agent2", network_spec=None)

    result = run(args, engine)

    assert result["failed"] is True and "runs from the master" in result["msg"], result
    assert engine.store == {}


def test_an_agent_the_plan_does_not_use_is_refused(engine, tmp_path, data_root):
    plan = plan_for()
    result = run(args_for(plan, tmp_path, data_root, agent="agnet1"), engine)
    assert result["failed"] is True and "no container of session s1" in result["msg"], result
    assert engine.store == {}


# --- availability ---------------------------------------------------------------------
def pause(engine, tmp_path, availability="pause"):
    """Pause agent1 as playbooks/agent_availability.yml does on the agent."""
    return on_the_agent(engine, tmp_path, availability, reason="driver upgrade", by="alice")


def test_a_paused_agent_refuses_a_new_session_and_still_repairs_one_it_holds(
    engine, tmp_path, data_root
):
    held = args_for(plan_for("held", size=1, cpu=1), tmp_path, data_root)
    run(held, engine)
    engine.stop("bai-held-main1")

    paused = pause(engine, tmp_path)

    assert paused["changed"] is True, paused
    assert paused["record"]["by"] == "alice" and paused["identity"] == engine.engine_id
    assert [s["name"] for s in paused["sessions"]] == ["held"]
    assert pause(engine, tmp_path)["changed"] is False  # paused already: kept as it was

    refused = run(args_for(plan_for("s1", cpu=1), tmp_path, data_root), engine)
    assert refused["refused"] is True, refused
    assert "paused by alice" in refused["msg"] and "driver upgrade" in refused["msg"]
    assert container_names(engine, "s1") == [] and engine.network_named("bai-s1-net") is None

    # A rerun of the session already there starts its container again.
    repaired = run(held, engine)
    assert repaired["restarted"] == ["bai-held-main1"], repaired

    activated = pause(engine, tmp_path, "active")
    assert activated["changed"] is True and activated["record"] is None
    assert run(args_for(plan_for("s1", cpu=1), tmp_path, data_root), engine)["changed"] is True


def test_pause_in_check_mode_writes_nothing(engine, tmp_path):
    result = run_module(
        bai_agent_availability,
        {"agent": AGENT, "availability": "drain", "state_dir": str(tmp_path / "state")},
        engine,
        check_mode=True,
    )
    assert result["changed"] is True and result["record"]["availability"] == "drain"
    assert not (tmp_path / "state").exists()


# --- dcgm-exporter's job mapping (gpu/job_mapping.py) --------------------------------------
# SIMULATED: no GPU exists here, so a session container is given the label a GPU session's
# container has (ai.backend.cluster.gpu-devices) in the in-memory engine; the mapping reads
# nothing else of a GPU.
def mapping_files(folder):
    return {n: (folder / n).read_text() for n in sorted(os.listdir(folder))}


def test_the_module_keeps_the_mapping_after_a_create_and_a_removal(engine, tmp_path, data_root):
    folder = tmp_path / "map"
    mapped = {"gpu_job_mapping_dir": str(folder)}
    plan = plan_for()
    made = run(args_for(plan, tmp_path, data_root, **mapped), engine)
    # A session without a GPU on an agent that never had one: no folder.
    assert "gpu_job_mapping" not in made and not folder.exists()

    for container in engine.session_containers("s1"):
        devices = "0,1" if container.name.endswith("main1") else "2"
        container.config["Labels"][LABEL_GPU_DEVICES] = devices
    folder.mkdir()
    (folder / "5").write_text("a session long gone\n")
    absent = {"session": "nothing", "agent": "agent1", "state": "absent", **mapped}
    kept = run({**absent, "lock_dir": str(tmp_path / "locks")}, engine)
    assert kept["gpu_job_mapping"] is True, kept
    sid = plan["session_id"]
    assert mapping_files(folder) == {"0": f"{sid}\n", "1": f"{sid}\n", "2": f"{sid}\n"}

    gone = run({**absent, "session": "s1", "lock_dir": str(tmp_path / "locks")}, engine)
    assert gone["removed"] and gone["gpu_job_mapping"] is True
    assert mapping_files(folder) == {}
