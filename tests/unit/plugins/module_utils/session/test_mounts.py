"""plugins/module_utils/session/mounts.py: the mount policy (docs/mounts.md)."""

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError
from ansible_collections.bai.cluster.plugins.module_utils.session.mounts import (
    PROTECTED_DESTINATIONS,
    SYSTEM_PATHS,
    data_roots,
    destination_error,
    resolved_source_error,
    source_error,
    within,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import normalize_spec
from hypothesis import given
from hypothesis import strategies as st

ROOTS = ["/srv/bai-data", "/mnt/scratch"]


def test_within_is_by_component_not_by_prefix():
    assert within("/srv/bai-data", "/srv/bai-data")
    assert within("/srv/bai-data/a/b", "/srv/bai-data")
    assert not within("/srv/bai-data2", "/srv/bai-data")
    assert not within("/srv", "/srv/bai-data")
    assert within("/anything", "/")


def test_data_roots_default_and_normalise():
    assert data_roots(None) == ["/srv/bai-data"]
    assert data_roots("/data/") == ["/data"]
    assert data_roots(["/a", "/a/", "/b"]) == ["/a", "/b"]


@pytest.mark.parametrize(
    ("roots", "text"),
    [
        (["/"], "whole file system"),
        (["/etc"], "overlaps /etc"),
        (["/var/lib/docker/volumes"], "overlaps /var/lib/docker"),
        (["/var"], "overlaps /var/lib/containerd"),
        (["srv/data"], "absolute folder path"),
        ([], "expected a list"),
        ([7], "absolute folder path"),
    ],
)
def test_a_root_that_would_expose_the_host_is_refused(roots, text):
    with pytest.raises(SpecError, match=text):
        data_roots(roots)


@pytest.mark.parametrize(
    ("src", "text"),
    [
        ("/", "the agent's whole file system"),
        ("/var/run/docker.sock", "system path of the agent (overlaps /var/run)"),
        ("/run/docker.sock", "overlaps /run"),
        ("/etc", "overlaps /etc"),
        ("/proc", "overlaps /proc"),
        ("/var/lib/docker", "overlaps /var/lib/docker"),
        ("/var", "system path"),
        ("/home/alice", "outside the agent's data roots"),
        ("/srv/bai-data2/x", "outside the agent's data roots"),
    ],
)
def test_sources_outside_the_roots_are_refused_naming_the_roots(src, text):
    problem = source_error(src, ROOTS, "mounts[0].src")
    assert problem is not None and text in problem
    assert problem.startswith(f"mounts[0].src: {src} ")
    assert "bai_data_roots: /srv/bai-data, /mnt/scratch" in problem


def test_sources_under_a_root_pass():
    assert source_error("/srv/bai-data", ROOTS) is None
    assert source_error("/mnt/scratch/team/a", ROOTS) is None


def test_a_link_out_of_the_roots_is_refused_and_one_inside_passes():
    out = resolved_source_error("/srv/bai-data/link", "/etc", "directory", ROOTS)
    assert out is not None and "resolves to /etc" in out and "symbolic link" in out
    assert resolved_source_error("/srv/bai-data/l", "/mnt/scratch/x", "directory", ROOTS) is None
    sock = resolved_source_error("/srv/bai-data/s", "/srv/bai-data/s", "socket", ROOTS)
    assert sock is not None and "is a socket" in sock
    assert resolved_source_error("/srv/bai-data/f", "/srv/bai-data/f", "file", ROOTS) is None


@pytest.mark.parametrize(
    "dst",
    [
        "/",
        "/etc",
        "/etc/ssh",
        "/proc/x",
        "/usr",
        "/home/work",
        "/home",
        "/home/work/.ssh",
        "/opt/bai",
        "/opt",
        "/var",
        "/dev/shm",
        "/sys/fs",
    ],
)
def test_destinations_that_hide_what_the_container_needs_are_refused(dst):
    assert destination_error(dst) is not None
    raw = {"name": "s", "size": 1, "mounts": [{"src": "/srv/bai-data/a", "dst": dst}]}
    with pytest.raises(SpecError, match=r"mounts\[0\]\.dst"):
        normalize_spec(raw)


@pytest.mark.parametrize("dst", ["/home/work/data", "/data", "/data/ro", "/mnt/x", "/tmp/in"])
def test_ordinary_destinations_pass(dst):
    assert destination_error(dst) is None


_paths = st.lists(st.sampled_from(["srv", "bai-data", "etc", "run", "x", "var", "lib"]), max_size=4)


@given(_paths)
def test_a_passing_source_never_touches_a_system_path(parts):
    """Whatever the path, a source that passes lies under a root, and a root never
    overlaps a system path, so a passing source never does either."""
    src = "/" + "/".join(parts)
    if source_error(src, ROOTS) is None:
        assert any(within(src, root) for root in ROOTS)
        assert not any(within(src, p) or within(p, src) for p in SYSTEM_PATHS)


@given(_paths)
def test_a_passing_destination_never_covers_a_protected_path(parts):
    dst = "/" + "/".join(parts)
    if destination_error(dst) is None:
        assert not any(within(dst, p) or within(p, dst) for p in PROTECTED_DESTINATIONS)
