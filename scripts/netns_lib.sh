# Emulated hosts on one machine, for the netns tests (tests/netns/cluster.sh) and the shaped-link
# benchmark (bench/compare/netns_cluster.sh). Source it; needs root.
#
# A cluster is network namespaces named PREFIX + <host name>, each with one veth whose other end
# sits on bridge br0 in namespace PREFIX + "br". Veths are named PREFIX + v<i> (host end) and
# PREFIX + p<i> (bridge end); they are created in the root namespace and moved away at once, so
# nothing else in the root namespace's network changes.
#
#   netns_bridge PREFIX                     create PREFIX"br" with br0 up
#   netns_host PREFIX NAME I CIDR [IFNAME]  create host PREFIX+NAME on the bridge, its veth
#                                           PREFIX"v"I (renamed IFNAME if given) at CIDR
#   netns_down PREFIX HOST_RE               kill every process in PREFIX+HOST_RE and PREFIX"br",
#                                           delete them and stray veths (idempotent)
#   netns_list PREFIX HOST_RE               the cluster's namespaces, one per line

netns_list() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$1($2|br)\$" || true
}

netns_down() {
  local p=$1 re=$2 ns pid link
  for ns in $(netns_list "$p" "$re"); do
    for pid in $(ip netns pids "$ns" 2>/dev/null || true); do kill -KILL "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
  # Veth ends still in the root namespace (a failed setup between create and move).
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E "^${p}[vp][0-9]+\$" || true); do
    ip link del "$link" 2>/dev/null || true
  done
}

netns_bridge() {
  local p=$1
  ip netns add "${p}br"
  ip -n "${p}br" link add br0 type bridge
  ip -n "${p}br" link set br0 up
  ip -n "${p}br" link set lo up
}

netns_host() {
  local p=$1 ns=$1$2 i=$3 cidr=$4 dev=${5:-$1v$3}
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip link add "${p}v$i" type veth peer name "${p}p$i"
  ip link set "${p}v$i" netns "$ns"
  ip link set "${p}p$i" netns "${p}br"
  [[ $dev == "${p}v$i" ]] || ip -n "$ns" link set "${p}v$i" name "$dev"
  ip -n "${p}br" link set "${p}p$i" master br0
  ip -n "${p}br" link set "${p}p$i" up
  ip -n "$ns" addr add "$cidr" dev "$dev"
  ip -n "$ns" link set "$dev" up
}
