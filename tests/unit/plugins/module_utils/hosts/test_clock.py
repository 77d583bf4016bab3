"""Time on the hosts (module_utils/hosts/clock.py): what role preflight concludes from bai_clock."""

from ansible_collections.bai.cluster.plugins.module_utils.hosts.clock import (
    assess,
    parse_timedatectl,
    sync_daemons,
)


def test_timedatectl_flags():
    assert parse_timedatectl("NTP=yes\nNTPSynchronized=no\n") == {
        "ntp": True,
        "synchronized": False,
    }
    assert parse_timedatectl("") == {"ntp": None, "synchronized": None}


def test_sync_daemons_from_process_names():
    names = ["systemd\n", "chronyd\n", "sshd\n", "systemd-timesyn\n", "chronyd\n"]
    assert sync_daemons(names) == ["chronyd", "systemd-timesyn"]


def test_a_synchronized_host_passes():
    got = assess({"synchronized": True, "daemons": ["chronyd"]}, 0.2, 10)
    assert got == {"problem": None, "warning": None, "how": "synchronized (chronyd)"}


def test_a_running_service_not_yet_synchronized_is_a_warning():
    got = assess({"synchronized": False, "ntp": True, "daemons": []}, 0.0, 10)
    assert got["problem"] is None and "not synchronized yet" in got["warning"]


def test_a_container_reads_its_hosts_clock():
    got = assess({"container": True, "daemons": []}, 0.0, 10)
    assert got["problem"] is None and "container host" in got["how"]


def test_a_host_without_time_sync_fails_with_the_fix():
    got = assess({"container": False, "daemons": []}, 0.0, 10)
    assert "no time sync service runs" in got["problem"]
    assert "apt-get install chrony" in got["problem"]


def test_a_clock_far_from_the_controllers_fails_even_when_synchronized():
    got = assess({"synchronized": True, "daemons": ["ntpd"]}, -42.0, 10)
    assert "-42.0 s off the controller's" in got["problem"]
    both = assess({"daemons": []}, 30.0, 10)
    assert "no time sync service" in both["problem"] and "+30.0 s" in both["problem"]
