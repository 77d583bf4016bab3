#!/usr/bin/env bash
# Session container entrypoint (runs as root, PID 1 under docker-init).
# Inputs: the BACKENDAI_* environment, and the session's keys that the toolkit copies
# into /opt/bai/session/ (root-only) before the container starts:
#   id_cluster, id_cluster.pub   the session's user keypair (same in every container)
#   host_key, host_key.pub       the session's SSH host key (same in every container)
set -euo pipefail
keys=/opt/bai/session
home=/home/work

# An image may bring a bootstrap script; what it exports wins over the toolkit's
# distributed-training defaults (docs/environment.md), but BACKENDAI_* always describe reality.
if [ -r /opt/container/bootstrap.sh ]; then
  saved=$(export -p | grep -E '^declare -x BACKENDAI_' || true)
  # shellcheck disable=SC1091
  . /opt/container/bootstrap.sh
  eval "$saved"
fi

if [ -r "$keys/host_key" ]; then
  install -m 600 -o root -g root "$keys/host_key" /etc/ssh/ssh_host_ed25519_key
  install -m 644 -o root -g root "$keys/host_key.pub" /etc/ssh/ssh_host_ed25519_key.pub
  install -d -m 700 -o work -g work "$home/.ssh"
  install -m 600 -o work -g work "$keys/id_cluster" "$home/.ssh/id_cluster"
  install -m 644 -o work -g work "$keys/id_cluster.pub" "$home/.ssh/id_cluster.pub"
  install -m 600 -o work -g work "$keys/id_cluster.pub" "$home/.ssh/authorized_keys"
  rm -f "$keys/id_cluster" "$keys/host_key"

  # known_hosts and client config for every host of the cluster: verified host keys,
  # port 2200 and the session key, so `ssh sub1` needs no options and asks nothing.
  # Key exchange curve25519: OpenSSH's default hybrid post-quantum exchange costs ~10x
  # the CPU (16 parallel logins from main1 on 2 vCPUs: 3.5 s instead of 0.4 s), and
  # MPI launchers open one login per host.
  IFS=, read -r -a hosts <<< "${BACKENDAI_CLUSTER_HOSTS:-$(hostname)}"
  hostkey=$(cut -d' ' -f1,2 "$keys/host_key.pub")
  : > "$home/.ssh/known_hosts"
  : > "$home/.ssh/config"
  for h in "${hosts[@]}"; do
    echo "[$h]:2200 $hostkey" >> "$home/.ssh/known_hosts"
    printf 'Host %s\n  Port 2200\n  IdentityFile ~/.ssh/id_cluster\n  IdentitiesOnly yes\n  KexAlgorithms curve25519-sha256,curve25519-sha256@libssh.org\n' "$h" >> "$home/.ssh/config"
  done
  chown work:work "$home/.ssh/known_hosts" "$home/.ssh/config"
  chmod 644 "$home/.ssh/known_hosts"; chmod 600 "$home/.ssh/config"
fi

# The same environment for SSH logins as for `docker exec` (sshd's PermitUserEnvironment).
if [ -d "$home/.ssh" ]; then
  env -0 | while IFS= read -r -d '' kv; do
    case "${kv%%=*}" in
      HOME|HOSTNAME|PWD|SHLVL|_|TERM|OLDPWD) ;;
      *) [[ "$kv" == *$'\n'* ]] || printf '%s\n' "$kv" ;;
    esac
  done > "$home/.ssh/environment"
  chown work:work "$home/.ssh/environment"; chmod 600 "$home/.ssh/environment"
fi

if [ ! -e /etc/ssh/ssh_host_ed25519_key ]; then
  ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/ssh_host_ed25519_key
fi

if [ "$#" -gt 0 ]; then
  /usr/sbin/sshd -e
  exec "$@"
fi
exec /usr/sbin/sshd -D -e
