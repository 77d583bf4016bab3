#!/usr/bin/env bash
# Lab node init: sshd, the Docker engine where LAB_DOCKERD=1, the services the roles
# enabled, stand-in listeners on LAB_LISTEN ("8080/tcp 10205-10300/tcp 4789/udp"), then
# wait for signals.
set -u
[ -e /etc/ssh/ssh_host_ed25519_key ] || ssh-keygen -q -A
mkdir -p /run/sshd  # /run is a tmpfs: empty at every start
/usr/sbin/sshd
if [ "${LAB_DOCKERD:-0}" = 1 ]; then
  # Without --privileged Docker mounts this node's cgroups read-only; the inner engine
  # must create cgroups for its containers (below this node's own, so limits nest).
  awk '$3 == "cgroup" && $4 ~ /(^|,)ro(,|$)/ {print $2}' /proc/mounts |
    while read -r m; do mount -o remount,bind,rw "$m" || true; done
fi
if [ "${LAB_DOCKERD:-0}" = 1 ]; then
  service docker start >/dev/null
fi
# The services the roles enabled (their runlevel links: node_exporter, the registry,
# Prometheus, haproxy...) start as a SysV host's boot starts them, so a restart of the
# node is a reboot. sshd and the engine are started above; rcS.d is left out (the clock
# and the kernel are the machine's; the host firewall comes back with the engine).
for script in /etc/rc2.d/S*; do
  case ${script##*/} in S??ssh | S??docker | 'S*') continue ;; esac
  "$script" start >/dev/null 2>&1 || echo "lab-entrypoint: $script start failed" >&2
done
if [ -n "${LAB_LISTEN:-}" ]; then
  read -ra lab_ports <<< "$LAB_LISTEN"  # e.g. "8081/tcp 2379/tcp"
  python3 /usr/local/lib/bai-lab/lab-listen.py "${lab_ports[@]}" &
fi
trap 'service docker stop >/dev/null 2>&1; exit 0' TERM INT
while :; do sleep 3600 & wait $!; done
