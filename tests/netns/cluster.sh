#!/usr/bin/env bash
# Emulated cluster for the multi-host launcher tests: N "hosts" h1..hN, each a network
# namespace with one interface named eth0 (10.89.0.<i>/24) on a bridge that lives in its own
# namespace, each running its own sshd (Debian's openssh-server) on <ip>:2222, started with
# -f its own config: no PAM, keys only, host and user keys generated here. Needs root.
#
#   cluster.sh up   PREFIX N DIR   build it; DIR (empty or missing) receives the keys, configs,
#                                  known_hosts, logs and sshd pids. Fails (and tears down
#                                  what it made) if any step fails.
#   cluster.sh down PREFIX [DIR]   kill every process in the namespaces, delete them, their
#                                  veths and DIR. Idempotent; safe on a half-built cluster.
#
# Files in DIR: id_user (authorized on every host), id_refused (authorized nowhere),
# known_hosts ("[10.89.0.<i>]:2222 <host key>" for every host), h<i>/{sshd_config,host_key,log},
# home/ (HOME of ssh sessions, via sshd's SetEnv: a fresh host's empty login, instead of this
# machine's root dotfiles, whose ~/.bashrc costs 0.3 s per ssh session).
# Namespaces: PREFIX + h1..hN and PREFIX + br. PREFIX: 1-8 lowercase letters/digits.
# Nothing touches the root namespace's network except veth pairs created there and moved
# away at once, and no name resolution is needed: hosts are reached by address.
set -euo pipefail
op=${1:-}; P=${2:-}
[[ $P =~ ^[a-z][a-z0-9]{0,7}$ ]] || { echo "cluster.sh: PREFIX must be 1-8 lowercase letters/digits" >&2; exit 2; }
SSHD=${SSHD:-/usr/sbin/sshd}
PORT=2222

# shellcheck source=../../scripts/netns_lib.sh
source "$(dirname "$0")/../../scripts/netns_lib.sh"

down() {
  local dir=${1:-}
  netns_down "$P" "h[0-9]+"
  if [[ -n "$dir" && -d "$dir" ]]; then rm -rf -- "$dir"; fi
}

up() {
  local n=$1 dir=$2 i ns ip
  [[ $n =~ ^[0-9]+$ ]] && (( n >= 1 && n <= 50 )) || { echo "cluster.sh: N must be 1..50" >&2; exit 2; }
  command -v "$SSHD" >/dev/null || [[ -x $SSHD ]] || { echo "cluster.sh: $SSHD not found (apt-get install openssh-server)" >&2; exit 3; }
  down
  trap 'echo "cluster.sh: setup failed, tearing down" >&2; down' ERR
  mkdir -p "$dir"
  mkdir -p /run/sshd && chmod 0755 /run/sshd   # sshd's privilege-separation directory
  ssh-keygen -q -t ed25519 -N '' -C ringfold-test-user -f "$dir/id_user"
  ssh-keygen -q -t ed25519 -N '' -C ringfold-test-refused -f "$dir/id_refused"
  cp "$dir/id_user.pub" "$dir/authorized_keys"
  mkdir -p "$dir/home"
  : > "$dir/known_hosts"
  netns_bridge "$P"
  for ((i = 1; i <= n; i++)); do
    ns="${P}h$i"; ip="10.89.0.$i"
    netns_host "$P" "h$i" "$i" "$ip/24" eth0
    mkdir -p "$dir/h$i"
    ssh-keygen -q -t ed25519 -N '' -C "h$i" -f "$dir/h$i/host_key"
    echo "[$ip]:$PORT $(cut -d' ' -f1,2 "$dir/h$i/host_key.pub")" >> "$dir/known_hosts"
    cat > "$dir/h$i/sshd_config" <<CFG
ListenAddress $ip:$PORT
HostKey $dir/h$i/host_key
PidFile $dir/h$i/sshd.pid
AuthorizedKeysFile $dir/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
PrintMotd no
MaxStartups 200
MaxSessions 50
ClientAliveInterval 1
ClientAliveCountMax 3
SetEnv HOME=$dir/home
LogLevel ERROR
CFG
    ip netns exec "$ns" "$SSHD" -f "$dir/h$i/sshd_config" -E "$dir/h$i/log"
  done
  # Ready when every sshd listens (sshd writes its pid file once it has bound its socket).
  local tries
  for ((i = 1; i <= n; i++)); do
    for ((tries = 0; tries < 100; tries++)); do
      [[ -s "$dir/h$i/sshd.pid" ]] && ip netns exec "${P}h$i" ss -ltnH "sport = :$PORT" | grep -q . && break
      sleep 0.05
    done
    (( tries < 100 )) || { echo "cluster.sh: sshd on h$i did not start:" >&2; cat "$dir/h$i/log" >&2; false; }
  done
  trap - ERR
}

case "$op" in
  up) [[ $# -eq 4 ]] || { echo "usage: cluster.sh up PREFIX N DIR" >&2; exit 2; }; up "$3" "$4" ;;
  down) down "${3:-}" ;;
  *) echo "usage: cluster.sh up PREFIX N DIR | down PREFIX [DIR]" >&2; exit 2 ;;
esac
