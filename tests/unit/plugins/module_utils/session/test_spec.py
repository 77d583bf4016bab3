"""Session spec validation, kernel expansion, hashing, naming and labels."""

import dataclasses

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_CPU,
    LABEL_GPU,
    LABEL_GPU_DEVICES,
    LABEL_HOST,
    LABEL_IDX,
    LABEL_KERNEL_ID,
    LABEL_MEM,
    LABEL_MODE,
    LABEL_RESOURCE_GROUP,
    LABEL_ROLE,
    LABEL_SESSION,
    LABEL_SESSION_ID,
    LABEL_SIZE,
    LABEL_SPEC_HASH,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.capacity import (
    used_from_labels,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps.plan import (
    container_labels,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.model import (
    Kernel,
    Mount,
    Resources,
    RoleSpec,
    SessionSpec,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.naming import (
    container_name,
    kernel_id,
    network_name,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import (
    DEFAULT_IMAGE,
    expand_kernels,
    normalize_spec,
    spec_canonical,
    spec_hash,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.topology_request import (
    check_known,
)

GI, MI = 1024**3, 1024**2
DEFAULT_RES = Resources(1.0, GI, 0)


def spec(**raw):
    raw.setdefault("name", "s1")
    return normalize_spec(raw)


# --- happy paths ----------------------------------------------------------------------
def test_minimal_spec_gets_defaults():
    got = spec(size=1)
    assert got == SessionSpec(
        name="s1",
        mode="single-node",
        resource_group="default",
        roles=(RoleSpec("main", 1, DEFAULT_IMAGE, DEFAULT_RES),),
        env=(),
        mounts=(),
    )
    assert got.size == 1


@pytest.mark.parametrize(("size", "subs"), [(2, 1), ("3", 2), (" 4 ", 3), (64, 63)])
def test_size_makes_main_and_subs(size, subs):
    got = spec(size=size)
    assert [(r.role, r.replicas) for r in got.roles] == [("main", 1), ("sub", subs)]
    assert got.size == subs + 1


def test_full_spec():
    got = spec(
        name="train-01",
        size=3,
        mode="multi-node",
        image="registry:5000/ns/img:1.2",
        resource_group="gpu.a100",
        env={"B": "2", "A": "", "PATH_X": "a=b c"},
        resources={"cpu": 2, "mem": "512m", "gpu": 1},
        mounts=[
            {"src": "/srv/data/", "dst": "/home/work/data"},
            {"src": "/srv/models", "dst": "/models", "readonly": True},
        ],
    )
    res = Resources(2.0, 512 * MI, 1)
    assert got.mode == "multi-node"
    assert got.resource_group == "gpu.a100"
    assert got.roles == (
        RoleSpec("main", 1, "registry:5000/ns/img:1.2", res),
        RoleSpec("sub", 2, "registry:5000/ns/img:1.2", res),
    )
    assert got.env == (("A", ""), ("B", "2"), ("PATH_X", "a=b c"))
    assert got.env_dict == {"A": "", "B": "2", "PATH_X": "a=b c"}
    assert got.mounts == (
        Mount("/srv/data", "/home/work/data", False),
        Mount("/srv/models", "/models", True),
    )


def test_none_values_count_as_absent():
    got = spec(size=2, mode=None, image=None, env=None, mounts=None, roles=None)
    assert got == spec(size=2)


def test_roles_inherit_and_override_session_image_and_resources():
    got = spec(
        image="base:1",
        resources={"cpu": 2, "mem": "2g"},
        roles=[
            {"role": "ps", "replicas": 1, "resources": {"cpu": 1}},
            {
                "role": "worker",
                "replicas": "3",
                "image": "gpu:1",
                "resources": {"gpu": 1},
            },
        ],
    )
    assert got.roles == (
        RoleSpec("ps", 1, "base:1", Resources(1.0, 2 * GI, 0)),
        RoleSpec("worker", 3, "gpu:1", Resources(2.0, 2 * GI, 1)),
    )
    assert got.size == 4


def test_roles_with_matching_size_is_fine():
    roles = [{"role": "main", "replicas": 1}, {"role": "sub", "replicas": 3}]
    assert spec(size=4, roles=roles) == spec(size="4")


def test_mount_paths_are_normalised():
    got = spec(size=1, mounts=[{"src": "//srv//./data/", "dst": "/home/work/x/"}])
    assert got.mounts == (Mount("/srv/data", "/home/work/x", False),)


def test_dist_master_port_is_the_one_allowed_backendai_key():
    got = spec(size=2, env={"BACKENDAI_DIST_MASTER_PORT": "1234"})
    assert got.env_dict == {"BACKENDAI_DIST_MASTER_PORT": "1234"}


# --- bad input matrix -----------------------------------------------------------------
NAME_RULE = "lowercase letters, digits and '-'"


@pytest.mark.parametrize(
    ("raw", "field", "hint"),
    [
        ({"size": 0}, "size", ">= 1"),
        ({"size": -1}, "size", ">= 1"),
        ({"size": "abc"}, "size", "whole number"),
        ({"size": "-3"}, "size", "whole number"),
        ({"size": True}, "size", "boolean"),
        ({"size": 2.5}, "size", "whole number"),
        ({"size": 65}, "size", "at most 64"),
        ({}, "size", "required"),
        ({"size": 1, "mode": "cluster"}, "mode", "single-node, multi-node"),
        ({"size": 1, "name": "Train"}, "name", NAME_RULE),
        ({"size": 1, "name": "my_session"}, "name", NAME_RULE),
        ({"size": 1, "name": "a" * 33}, "name", NAME_RULE),
        ({"size": 1, "name": "-abc"}, "name", NAME_RULE),
        ({"size": 1, "name": "abc-"}, "name", NAME_RULE),
        ({"size": 1, "name": ""}, "name", NAME_RULE),
        ({"size": 1, "name": 12}, "name", NAME_RULE),
        ({"size": 1, "name": None}, "name", "required"),
        ({"size": 1, "image": "bad image"}, "image", "no spaces"),
        ({"size": 1, "image": ""}, "image", "image reference"),
        ({"size": 1, "resource_group": ""}, "resource_group", "1-64"),
        ({"size": 1, "resource_group": "a b"}, "resource_group", "1-64"),
        (
            {"size": 3, "roles": [{"role": "main", "replicas": 1}]},
            "size",
            "roles add up to 1",
        ),
        (
            {"roles": [{"role": "w", "replicas": 1}, {"role": "w", "replicas": 2}]},
            "roles",
            "more than once: w",
        ),
        ({"roles": []}, "roles", "at least one role"),
        ({"roles": "main"}, "roles", "expected a list"),
        ({"roles": [{"role": "Main", "replicas": 1}]}, "roles[0].role", "lowercase"),
        ({"roles": [{"role": "1st", "replicas": 1}]}, "roles[0].role", "lowercase"),
        ({"roles": [{"role": "a" * 17, "replicas": 1}]}, "roles[0].role", "1-16"),
        ({"roles": [{"role": "main"}]}, "roles[0].replicas", "required"),
        ({"roles": [{"role": "main", "replicas": 0}]}, "roles[0].replicas", ">= 1"),
        (
            {"roles": [{"role": "main", "replicas": 1, "gpus": 1}]},
            "roles[0]",
            "unknown key(s) gpus",
        ),
        (
            {"roles": [{"role": "a", "replicas": 40}, {"role": "b", "replicas": 40}]},
            "roles",
            "at most 64",
        ),
        (
            {
                "roles": [
                    {"role": "sub", "replicas": 11},
                    {"role": "sub1", "replicas": 1},
                ]
            },
            "roles",
            "'sub11'",
        ),
        ({"size": 1, "env": {"N": 1}}, "env.N", "quote it"),
        ({"size": 1, "env": {"B": True}}, "env.B", "quote it"),
        ({"size": 1, "env": {"F": 1.5}}, "env.F", "quote it"),
        ({"size": 1, "env": {"L": ["x"]}}, "env.L", "expected a string"),
        ({"size": 1, "env": {"NL": "a\nb"}}, "env.NL", "newline"),
        ({"size": 1, "env": {"Z": "a\0b"}}, "env.Z", "NUL"),
        ({"size": 1, "env": {"1X": "v"}}, "env", "not a valid variable name"),
        ({"size": 1, "env": {"A-B": "v"}}, "env", "not a valid variable name"),
        ({"size": 1, "env": {"BACKENDAI_X": "v"}}, "env.BACKENDAI_X", "toolkit"),
        ({"size": 1, "env": ["A=1"]}, "env", "mapping"),
        (
            {"size": 2, "env": {"BACKENDAI_DIST_MASTER_PORT": "0"}},
            "env.BACKENDAI_DIST_MASTER_PORT",
            "1 to 65535",
        ),
        (
            {"size": 4, "env": {"BACKENDAI_DIST_MASTER_PORT": "65534"}},
            "env.BACKENDAI_DIST_MASTER_PORT",
            "at most 65532",
        ),
        ({"size": 1, "mounts": [{"src": "data", "dst": "/d"}]}, "mounts[0].src", "abs"),
        ({"size": 1, "mounts": [{"src": "/d", "dst": "d"}]}, "mounts[0].dst", "abs"),
        (
            {"size": 1, "mounts": [{"src": "/d/../etc", "dst": "/d"}]},
            "mounts[0].src",
            "..",
        ),
        ({"size": 1, "mounts": [{"src": "/d", "dst": "/a:b"}]}, "mounts[0].dst", "':'"),
        ({"size": 1, "mounts": [{"src": "/d", "dst": "/"}]}, "mounts[0].dst", "root"),
        ({"size": 1, "mounts": [{"dst": "/d"}]}, "mounts[0].src", "absolute"),
        (
            {"size": 1, "mounts": [{"src": "/d", "dst": "/d", "readonly": "yes"}]},
            "mounts[0].readonly",
            "true or false",
        ),
        (
            {
                "size": 1,
                "mounts": [{"src": "/a", "dst": "/d"}, {"src": "/b", "dst": "/d/"}],
            },
            "mounts",
            "more than once: /d",
        ),
        (
            {"size": 1, "mounts": [{"src": "/a", "dst": "/d", "mode": "ro"}]},
            "mounts[0]",
            "unknown key(s) mode",
        ),
        ({"size": 1, "wait_s": 10}, "session", "unknown key(s) wait_s"),
        ({"size": 1, "resources": {"cpu": 0}}, "resources.cpu", "greater than 0"),
        ({"size": 2, "topology": "Rack"}, "topology", "lowercase letters"),
        ({"size": 2, "topology": ["rack"]}, "topology", "bai_topology_levels"),
        ({"size": 2, "topology_prefer_s": 20}, "topology_prefer_s", "names no topology level"),
        (
            {"size": 2, "topology": "rack", "topology_prefer_s": 86401},
            "session_topology_prefer_s",
            "from 0 to 86400",
        ),
    ],
)
def test_bad_input_is_rejected_with_actionable_message(raw, field, hint):
    raw.setdefault("name", "s1")
    with pytest.raises(SpecError) as err:
        normalize_spec(raw)
    text = str(err.value)
    assert text.startswith(f"{field}:"), text
    assert hint in text, text


def test_not_a_mapping():
    with pytest.raises(SpecError, match="^session: expected a mapping"):
        normalize_spec(["name", "s1"])


def test_spec_error_is_a_value_error():
    assert issubclass(SpecError, ValueError)


def test_name_error_shows_the_value_and_the_rule():
    with pytest.raises(SpecError) as err:
        spec(name="My_Session", size=1)
    assert "'My_Session'" in str(err.value)
    assert "1-32 characters" in str(err.value)


def test_longest_name_is_accepted():
    assert spec(name="a" * 32, size=1).name == "a" * 32
    assert spec(name="0", size=1).name == "0"


# --- kernels --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("size", "hosts"),
    [
        (1, ["main1"]),
        (2, ["main1", "sub1"]),
        (5, ["main1", "sub1", "sub2", "sub3", "sub4"]),
    ],
)
def test_expand_kernels_homogeneous(size, hosts):
    kernels = expand_kernels(spec(size=size))
    assert [k.hostname for k in kernels] == hosts
    assert [k.rank for k in kernels] == list(range(size))
    assert kernels[0] == Kernel("main", 1, "main1", 0, DEFAULT_IMAGE, DEFAULT_RES)
    assert [k.idx for k in kernels[1:]] == list(range(1, size))
    assert {k.role for k in kernels[1:]} <= {"sub"}


def test_expand_kernels_heterogeneous():
    got = spec(
        roles=[
            {"role": "ps", "replicas": 2, "image": "ps:1"},
            {"role": "worker", "replicas": 2, "resources": {"gpu": 1}},
            {"role": "chief", "replicas": 1},
        ]
    )
    kernels = expand_kernels(got)
    assert [(k.hostname, k.role, k.idx, k.rank) for k in kernels] == [
        ("ps1", "ps", 1, 0),
        ("ps2", "ps", 2, 1),
        ("worker1", "worker", 1, 2),
        ("worker2", "worker", 2, 3),
        ("chief1", "chief", 1, 4),
    ]
    assert [k.image for k in kernels] == ["ps:1", "ps:1"] + [DEFAULT_IMAGE] * 3
    assert [k.resources.gpu for k in kernels] == [0, 0, 1, 1, 0]


# --- hashing --------------------------------------------------------------------------
def test_spec_hash_is_stable_and_short():
    first = spec_hash(spec(size=3))
    assert first == spec_hash(spec(size="3"))
    assert len(first) == 16
    assert int(first, 16) >= 0


def test_spec_hash_ignores_env_key_order():
    a = spec(size=2, env={"A": "1", "B": "2"})
    b = spec(size=2, env={"B": "2", "A": "1"})
    assert a == b
    assert spec_hash(a) == spec_hash(b)


def test_spec_hash_equal_for_equivalent_spellings():
    a = spec(size=2, resources={"cpu": 1, "mem": "1g"})
    b = spec(
        roles=[{"role": "main", "replicas": 1}, {"role": "sub", "replicas": 1}],
        resources={"cpu": "1.0", "mem": 1024**3},
    )
    assert spec_hash(a) == spec_hash(b)


@pytest.mark.parametrize(
    "change",
    [
        {"size": 3},
        {"mode": "multi-node"},
        {"image": "other:1"},
        {"resource_group": "gpu"},
        {"env": {"A": "1"}},
        {"env": {"A": ""}},
        {"resources": {"cpu": 2}},
        {"resources": {"mem": "2g"}},
        {"resources": {"gpu": 1}},
        {"mounts": [{"src": "/a", "dst": "/b"}]},
        {"mounts": [{"src": "/a", "dst": "/b", "readonly": True}]},
        {"name": "s2"},
    ],
)
def test_spec_hash_changes_with_every_field(change):
    raw = {"size": 2, **change}
    assert spec_hash(spec(**raw)) != spec_hash(spec(size=2))


def test_spec_hash_depends_on_role_and_mount_order():
    roles = [{"role": "a", "replicas": 1}, {"role": "b", "replicas": 1}]
    assert spec_hash(spec(roles=roles)) != spec_hash(spec(roles=roles[::-1]))
    mounts = [{"src": "/a", "dst": "/x"}, {"src": "/b", "dst": "/y"}]
    assert spec_hash(spec(size=1, mounts=mounts)) != spec_hash(spec(size=1, mounts=mounts[::-1]))


# --- names and labels -----------------------------------------------------------------
def test_names():
    assert container_name("train", "sub3") == "bai-train-sub3"
    assert network_name("train") == "bai-train-net"
    ids = {kernel_id() for _kernel in range(5)}
    assert len(ids) == 5
    assert all(len(i) == 36 and i.count("-") == 4 for i in ids)


def test_container_labels_round_trip_to_used_resources():
    got = spec(size=2, resources={"cpu": 1.5, "mem": "512m", "gpu": 1})
    kernels = expand_kernels(got)
    labels = [
        container_labels(
            got, k, session_id="S", kernel_id=f"K{k.rank}", mode="x", gpu_devices=[k.rank + 2]
        )
        for k in kernels
    ]
    assert labels[1] == {
        LABEL_SESSION: "s1",
        LABEL_SESSION_ID: "S",
        LABEL_SPEC_HASH: spec_hash(got),
        LABEL_RESOURCE_GROUP: "default",
        LABEL_ROLE: "sub",
        LABEL_IDX: "1",
        LABEL_HOST: "sub1",
        LABEL_KERNEL_ID: "K1",
        LABEL_MODE: "x",
        LABEL_SIZE: "2",
        LABEL_CPU: "1.5",
        LABEL_MEM: str(512 * MI),
        LABEL_GPU: "1",
        LABEL_GPU_DEVICES: "3",
    }
    assert used_from_labels(labels) == Resources(3.0, GI, 2)
    assert (
        container_labels(got, kernels[0], session_id="S", kernel_id="K", mode="x")[
            LABEL_GPU_DEVICES
        ]
        == ""
    )  # no GPU: the label is there, empty


def test_label_names_follow_the_contract():
    assert LABEL_SESSION == "ai.backend.cluster.session"
    assert LABEL_SESSION_ID == "ai.backend.cluster.session-id"
    assert LABEL_ROLE == "ai.backend.cluster.role"
    assert LABEL_IDX == "ai.backend.cluster.idx"
    assert LABEL_HOST == "ai.backend.cluster.host"
    assert LABEL_KERNEL_ID == "ai.backend.cluster.kernel-id"


def test_spec_is_frozen_and_hashable():
    got = spec(size=2, env={"A": "1"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.name = "other"
    assert hash(got) == hash(spec(size=2, env={"A": "1"}))


def test_canonical_spec_validates_to_the_same_session():
    """The create playbook validates once, then passes the canonical form around."""
    raw = {
        "name": "s1",
        "mode": "multi-node",
        "image": "img:1",
        "resources": {"cpu": 0.5, "mem": "512m"},
        "env": {"B": "2", "A": ""},
        "mounts": [{"src": "/data/", "dst": "/home/work/data", "readonly": True}],
        "roles": [
            {"role": "main", "replicas": 1, "resources": {"cpu": 2}},
            {"role": "worker", "replicas": 2, "image": "img:2"},
        ],
    }
    first = normalize_spec(raw)
    again = normalize_spec(spec_canonical(first))
    assert again == first
    assert spec_hash(again) == spec_hash(first)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"BIG": "x" * 32769}, "env.BIG: value of 32769 bytes; at most 32768"),
        ({f"K{i}": "v" for i in range(257)}, "env: 257 variables; at most 256"),
        ({f"K{i}": "x" * 30000 for i in range(5)}, "bytes in all (KEY=VALUE); at most 131072"),
    ],
    ids=["one-value", "count", "total"],
)
def test_env_beyond_what_docker_and_sshd_take_is_refused(env, message):
    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
        normalize_spec({"name": "s", "size": 1, "env": env})


def test_env_at_the_limits_is_accepted():
    spec = normalize_spec({"name": "s", "size": 1, "env": {"BIG": "é" * 16384}})
    assert len(spec.env_dict["BIG"].encode()) == 32768


def test_shm_defaults_to_half_the_memory_and_is_given_per_role():
    spec = normalize_spec(
        {
            "name": "s",
            "resources": {"mem": "4g"},
            "roles": [
                {"role": "main", "replicas": 1, "resources": {"shm": "3g"}},
                {"role": "sub", "replicas": 1},
                {"role": "tiny", "replicas": 1, "resources": {"mem": "100m"}},
            ],
        }
    )
    sizes = {role.role: role.resources.shm_size for role in spec.roles}
    assert sizes == {"main": 3 * 1024**3, "sub": 2 * 1024**3, "tiny": 64 * 1024**2}
    # Given: part of the request (its hash); not given: requests keep their old hash.
    assert spec_canonical(spec)["roles"][0]["resources"]["shm"] == 3 * 1024**3
    assert "shm" not in spec_canonical(spec)["roles"][1]["resources"]


@pytest.mark.parametrize(
    ("resources", "message"),
    [
        ({"mem": "1g", "shm": "2g"}, r"resources\.shm: got 2g .*between 1m and mem \(1g\)"),
        ({"shm": "lots"}, r"resources\.shm: cannot read 'lots'"),
        ({"shm": "512k"}, r"resources\.shm: got 512k"),
    ],
)
def test_bad_shm_is_refused(resources, message):
    with pytest.raises(SpecError, match=message):
        normalize_spec({"name": "s", "size": 1, "resources": resources})


def test_a_topology_level_is_kept_in_the_request_but_not_in_its_hash():
    plain = spec(size=2, mode="multi-node")
    racked = spec(size=2, mode="multi-node", topology="rack")
    assert racked.topology == "rack" and plain.topology == ""
    # Where a session runs is not what it is: a rerun with or without it is the same one.
    assert spec_hash(racked) == spec_hash(plain)
    assert spec_canonical(racked)["topology"] == "rack"
    assert "topology" not in spec_canonical(plain)  # old requests keep their form
    assert normalize_spec(spec_canonical(racked)) == racked
    preferred = spec(size=2, mode="multi-node", topology="rack", topology_prefer_s="20")
    assert preferred.topology_prefer_s == 20 and spec_hash(preferred) == spec_hash(plain)
    assert spec_canonical(preferred)["topology_prefer_s"] == 20


@pytest.mark.parametrize(
    ("level", "levels", "message"),
    [
        ("rack", [], "this cluster has no topology levels"),
        ("rakc", ["block", "rack"], "this cluster's levels are block, rack"),
    ],
)
def test_a_level_the_cluster_does_not_have_is_refused(level, levels, message):
    with pytest.raises(SpecError, match=message):
        check_known(level, levels)
    check_known("rack", ["block", "rack"])
    check_known("", [])
