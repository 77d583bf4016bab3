"""Unit tests of plugins/module_utils/hosts/packages.py (the roles' reading of dpkg-query).

The answers below are dpkg-query's, for the showformat the roles use.
"""

from __future__ import annotations

from ansible_collections.bai.cluster.plugins.module_utils.hosts.packages import (
    installed_versions,
    missing_packages,
    package_name,
)
from hypothesis import given
from hypothesis import strategies as st

# docker.io installed, containerd removed with its configuration kept, runc half-installed;
# python3-docker unknown to dpkg (no row at all; dpkg-query exits 1).
ANSWER = (
    "docker.io\tinstalled\t20.10.24+dfsg1-1+b3\n"
    "containerd\tconfig-files\t1.6.20~ds1-1+b1\n"
    "runc\thalf-installed\t1.1.5+ds1-1\n"
)


def test_only_installed_rows_count():
    assert installed_versions(ANSWER) == {"docker.io": "20.10.24+dfsg1-1+b3"}


def test_missing_keeps_order_and_pins_and_drops_repeats():
    wanted = ["containerd", "docker.io", "python3-docker", "runc=1.1.5+ds1-1", "containerd"]
    assert missing_packages(ANSWER, wanted) == ["containerd", "python3-docker", "runc=1.1.5+ds1-1"]


def test_nothing_known_means_everything_missing():
    assert missing_packages("", ["nftables"]) == ["nftables"]
    assert missing_packages(None, ["nftables"]) == ["nftables"]
    assert missing_packages(ANSWER, []) == []


def test_space_separated_rows_without_version_are_read():
    assert installed_versions("haproxy installed\nnftables not-installed\n") == {"haproxy": ""}


def test_pinned_and_arch_qualified_names():
    assert package_name("nvidia-container-toolkit=1.17.3-1") == "nvidia-container-toolkit"
    assert package_name("docker-ce:amd64") == "docker-ce"
    assert package_name("docker-ce>=5:24") == "docker-ce"
    assert missing_packages("docker-ce\tinstalled\t5:24.0.7-1\n", ["docker-ce=5:24.0.7-1"]) == []


NAMES = st.from_regex(r"[a-z0-9][a-z0-9+.-]{0,12}", fullmatch=True)


@given(st.dictionaries(NAMES, st.booleans()), st.lists(NAMES))
def test_missing_is_exactly_the_wanted_names_not_installed(state, extra):
    answer = "".join(
        f"{name}\t{'installed' if on else 'config-files'}\t1.0\n" for name, on in state.items()
    )
    wanted = list(state) + extra
    missing = missing_packages(answer, wanted)
    assert set(missing) == {name for name in wanted if not state.get(name)}
    assert len(missing) == len(set(missing))
