#!/bin/sh
# Run inside a lab node (docker exec -i NODE sh -s -- USER PUBKEY): make USER an
# administrator reached over SSH with PUBKEY and given passwordless sudo, as on a real
# host prepared for Ansible. Prints "changed=0|1" and the node's ed25519 host key.
set -eu
user=$1
key=$2
changed=0
if ! id -u "$user" >/dev/null 2>&1; then
  useradd --create-home --shell /bin/bash --comment "bai-lab administrator" "$user"
  changed=1
fi
# "*": no password to log in with, but not a locked account (sshd refuses those).
if [ "$(getent shadow "$user" | cut -d: -f2)" != "*" ]; then
  usermod --password '*' "$user"
  changed=1
fi
home=$(getent passwd "$user" | cut -d: -f6)
if [ "$(cat "$home/.ssh/authorized_keys" 2>/dev/null)" != "$key" ]; then
  install -d -m 0700 -o "$user" -g "$user" "$home/.ssh"
  printf '%s\n' "$key" > "$home/.ssh/authorized_keys"
  chown "$user:$user" "$home/.ssh/authorized_keys"
  chmod 0600 "$home/.ssh/authorized_keys"
  changed=1
fi
rule="$user ALL=(ALL:ALL) NOPASSWD: ALL"
sudoers=/etc/sudoers.d/bai-lab-admin
if [ "$(cat "$sudoers" 2>/dev/null)" != "$rule" ]; then
  tmp=$(mktemp)
  printf '%s\n' "$rule" > "$tmp"
  visudo -c -q -f "$tmp"
  install -m 0440 -o root -g root "$tmp" "$sudoers"
  rm -f "$tmp"
  changed=1
fi
# The entry point makes the host keys before it starts sshd: wait for them.
i=0
while [ ! -s /etc/ssh/ssh_host_ed25519_key.pub ] && [ "$i" -lt 50 ]; do
  sleep 0.2
  i=$((i + 1))
done
echo "changed=$changed"
echo "hostkey=$(cut -d' ' -f1,2 /etc/ssh/ssh_host_ed25519_key.pub)"
