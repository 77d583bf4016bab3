"""The environment injected into every container (docs/environment.md)."""

import json

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError
from ansible_collections.bai.cluster.plugins.module_utils.session.env import (
    IFNAME_VARS,
    cluster_env,
    parse_image_env,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import (
    expand_kernels,
    normalize_spec,
)


def kernels_for(size=None, roles=None):
    raw = {"name": "job", "size": size, "roles": roles}
    return expand_kernels(normalize_spec(raw))


def env_for(kernels, host, *, mode="single-node", user_env=None, image_env=None):
    kernel = next(k for k in kernels if k.hostname == host)
    return cluster_env(
        kernels,
        kernel,
        session_name="job",
        session_id="sid-main1",
        kernel_id=f"kid-{host}",
        mode=mode,
        user_env=user_env or {},
        image_env=image_env or {},
    )


def tf_config(workers, index):
    return json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}})


def test_size_1_has_no_distributed_variables():
    got = env_for(kernels_for(1), "main1", user_env={"FOO": "bar"})
    assert got == {
        "FOO": "bar",
        "BACKENDAI_CLUSTER_SIZE": "1",
        "BACKENDAI_CLUSTER_HOSTS": "main1",
        "BACKENDAI_CLUSTER_REPLICAS": "main:1",
        "BACKENDAI_CLUSTER_HOST": "main1",
        "BACKENDAI_CLUSTER_IDX": "1",
        "BACKENDAI_CLUSTER_ROLE": "main",
        "BACKENDAI_CLUSTER_LOCAL_RANK": "0",
        "BACKENDAI_CLUSTER_MODE": "single-node",
        "BACKENDAI_KERNEL_ID": "kid-main1",
        "BACKENDAI_SESSION_ID": "sid-main1",
        "BACKENDAI_SESSION_NAME": "job",
    }


def test_size_2_exact():
    kernels = kernels_for(2)
    assert env_for(kernels, "sub1", mode="multi-node") == {
        "BACKENDAI_CLUSTER_SIZE": "2",
        "BACKENDAI_CLUSTER_HOSTS": "main1,sub1",
        "BACKENDAI_CLUSTER_REPLICAS": "main:1,sub:1",
        "BACKENDAI_CLUSTER_HOST": "sub1",
        "BACKENDAI_CLUSTER_IDX": "1",
        "BACKENDAI_CLUSTER_ROLE": "sub",
        "BACKENDAI_CLUSTER_LOCAL_RANK": "1",
        "BACKENDAI_CLUSTER_MODE": "multi-node",
        "BACKENDAI_KERNEL_ID": "kid-sub1",
        "BACKENDAI_SESSION_ID": "sid-main1",
        "BACKENDAI_SESSION_NAME": "job",
        "MASTER_ADDR": "main1",
        "MASTER_PORT": "29500",
        "TF_CONFIG": (
            '{"cluster": {"worker": ["main1:29500", "sub1:29501"]}, '
            '"task": {"type": "worker", "index": 1}}'
        ),
        "NCCL_SOCKET_IFNAME": "eth0",
        "GLOO_SOCKET_IFNAME": "eth0",
        "OMPI_MCA_btl_tcp_if_include": "eth0",
        "OMPI_MCA_oob_tcp_if_include": "eth0",
    }


def test_size_5_every_container():
    kernels = kernels_for(5)
    hosts = ["main1", "sub1", "sub2", "sub3", "sub4"]
    workers = [f"{h}:{29500 + i}" for i, h in enumerate(hosts)]
    for rank, host in enumerate(hosts):
        got = env_for(kernels, host)
        assert got["BACKENDAI_CLUSTER_SIZE"] == "5"
        assert got["BACKENDAI_CLUSTER_HOSTS"] == ",".join(hosts)
        assert got["BACKENDAI_CLUSTER_REPLICAS"] == "main:1,sub:4"
        assert got["BACKENDAI_CLUSTER_HOST"] == host
        assert got["BACKENDAI_CLUSTER_IDX"] == ("1" if rank == 0 else str(rank))
        assert got["BACKENDAI_CLUSTER_ROLE"] == ("main" if rank == 0 else "sub")
        assert got["BACKENDAI_CLUSTER_LOCAL_RANK"] == str(rank)
        assert got["MASTER_ADDR"] == "main1"
        assert got["MASTER_PORT"] == "29500"
        assert got["TF_CONFIG"] == tf_config(workers, rank)
        assert json.loads(got["TF_CONFIG"])["task"]["index"] == rank
        assert not {"WORLD_SIZE", "RANK", "LOCAL_RANK"} & set(got)


def test_heterogeneous_roles():
    kernels = kernels_for(
        roles=[
            {"role": "chief", "replicas": 1},
            {"role": "worker", "replicas": 2},
            {"role": "ps", "replicas": 1},
        ]
    )
    got = env_for(kernels, "worker2")
    assert got["BACKENDAI_CLUSTER_HOSTS"] == "chief1,worker1,worker2,ps1"
    assert got["BACKENDAI_CLUSTER_REPLICAS"] == "chief:1,worker:2,ps:1"
    assert got["BACKENDAI_CLUSTER_ROLE"] == "worker"
    assert got["BACKENDAI_CLUSTER_IDX"] == "2"
    assert got["BACKENDAI_CLUSTER_LOCAL_RANK"] == "2"
    assert got["MASTER_ADDR"] == "chief1"
    assert json.loads(got["TF_CONFIG"]) == {
        "cluster": {"worker": ["chief1:29500", "worker1:29501", "worker2:29502", "ps1:29503"]},
        "task": {"type": "worker", "index": 2},
    }


def test_user_empty_master_port_is_kept():
    got = env_for(kernels_for(3), "sub2", user_env={"MASTER_PORT": ""})
    assert got["MASTER_PORT"] == ""
    assert got["MASTER_ADDR"] == "main1"
    assert json.loads(got["TF_CONFIG"])["cluster"]["worker"][0] == "main1:29500"


def test_user_master_port_also_drives_tf_config():
    got = env_for(kernels_for(2), "main1", user_env={"MASTER_PORT": "4000"})
    assert got["MASTER_PORT"] == "4000"
    assert json.loads(got["TF_CONFIG"])["cluster"]["worker"] == [
        "main1:4000",
        "sub1:4001",
    ]


def test_image_tf_config_is_not_set_by_the_toolkit():
    image_env = {"TF_CONFIG": '{"custom": true}', "PATH": "/usr/bin"}
    got = env_for(kernels_for(2), "sub1", image_env=image_env)
    assert "TF_CONFIG" not in got
    assert "PATH" not in got  # image env reaches the container through the caller
    assert got["MASTER_ADDR"] == "main1"
    assert got["MASTER_PORT"] == "29500"
    final = {**image_env, **got}
    assert final["TF_CONFIG"] == '{"custom": true}'


def test_image_and_user_preset_all_distributed_variables():
    preset = {"MASTER_ADDR": "", "MASTER_PORT": "", "TF_CONFIG": ""}
    preset |= dict.fromkeys(IFNAME_VARS, "")
    for where in ("user_env", "image_env"):
        got = env_for(kernels_for(2), "sub1", **{where: dict(preset)})
        mine = {k: v for k, v in got.items() if not k.startswith("BACKENDAI_")}
        assert mine == (preset if where == "user_env" else {})


def test_interface_variables_name_the_session_network_and_a_preset_wins():
    got = env_for(kernels_for(3), "sub2", user_env={"NCCL_SOCKET_IFNAME": "ib0"})
    assert got["NCCL_SOCKET_IFNAME"] == "ib0"
    assert {k: got[k] for k in IFNAME_VARS[1:]} == dict.fromkeys(IFNAME_VARS[1:], "eth0")
    from_image = env_for(kernels_for(2), "main1", image_env={"GLOO_SOCKET_IFNAME": "eth1"})
    assert "GLOO_SOCKET_IFNAME" not in from_image  # the image's value reaches the container
    assert not set(IFNAME_VARS) & set(env_for(kernels_for(1), "main1"))


def test_dist_master_port_sets_master_port_and_tf_ports():
    user_env = {"BACKENDAI_DIST_MASTER_PORT": "1234"}
    got = env_for(kernels_for(3), "sub1", user_env=user_env)
    assert got["MASTER_PORT"] == "1234"
    assert got["BACKENDAI_DIST_MASTER_PORT"] == "1234"
    assert got["TF_CONFIG"] == tf_config(["main1:1234", "sub1:1235", "sub2:1236"], 1)


def test_dist_master_port_user_beats_image():
    got = env_for(
        kernels_for(2),
        "main1",
        user_env={"BACKENDAI_DIST_MASTER_PORT": "2000"},
        image_env={"BACKENDAI_DIST_MASTER_PORT": "3000"},
    )
    assert got["MASTER_PORT"] == "2000"
    image_only = env_for(kernels_for(2), "main1", image_env={"BACKENDAI_DIST_MASTER_PORT": "3000"})
    assert image_only["MASTER_PORT"] == "3000"


@pytest.mark.parametrize("port", ["0", "65536", "abc", "", "12.5"])
def test_bad_dist_master_port_is_a_spec_error(port):
    image_env = {"BACKENDAI_DIST_MASTER_PORT": port}
    with pytest.raises(SpecError, match="BACKENDAI_DIST_MASTER_PORT.*image"):
        env_for(kernels_for(2), "main1", image_env=image_env)


def test_dist_master_port_ignored_for_size_1():
    got = env_for(kernels_for(1), "main1", image_env={"BACKENDAI_DIST_MASTER_PORT": "bad"})
    assert "MASTER_PORT" not in got


def test_backendai_values_always_come_from_the_toolkit():
    sneaky = {"BACKENDAI_CLUSTER_HOST": "evil", "BACKENDAI_SESSION_NAME": "evil"}
    got = env_for(kernels_for(2), "sub1", user_env=sneaky, image_env=sneaky)
    assert got["BACKENDAI_CLUSTER_HOST"] == "sub1"
    assert got["BACKENDAI_SESSION_NAME"] == "job"


def test_unknown_mode_and_foreign_kernel_are_rejected():
    kernels = kernels_for(2)
    with pytest.raises(SpecError, match="mode"):
        env_for(kernels, "main1", mode="cluster")
    other = kernels_for(3)[2]
    with pytest.raises(ValueError, match="sub2"):
        cluster_env(
            kernels,
            other,
            session_name="job",
            session_id="s",
            kernel_id="k",
            mode="single-node",
            user_env={},
            image_env={},
        )


def test_parse_image_env():
    assert parse_image_env(["A=1", "B=x=y", "C=", "A=2"]) == {
        "A": "2",
        "B": "x=y",
        "C": "",
    }
    assert parse_image_env(None) == {}
