# Sourced by the multinode tests: two hosts on this machine, network namespaces joined by a veth
# pair. Host a is 10.77.0.1 (namespace $ns_a, host name zoe-host-a), host b is 10.77.0.2 ($ns_b,
# zoe-host-b); $link_b is host b's end of the link (ip -n "$ns_b" link set "$link_b" down cuts
# it). Set test_name before sourcing. Gives:
#   needs WHAT      fail the test saying what this machine lacks (the label multinode leaves
#                   the test out with ctest -LE multinode);
#   on_host a|b CMD run CMD on a host: in its network namespace (nsenter, which keeps this
#                   machine's /sys: slurmd needs its cgroup file systems), under its own host name
#                   (a UTS namespace);
#   $dir            a temporary directory;
#   a trap on exit, even on failure, that calls cluster_teardown (a test may define it: its own
#   daemons), kills whatever still runs in the namespaces, deletes them and $dir.
needs() {
  echo "FAIL: $test_name needs $1; run it as root on a machine that allows network" \
       "namespaces, or leave it out with ctest -LE multinode"
  exit 1
}
[ "$(id -u)" -eq 0 ] || needs "root (it makes network namespaces)"
command -v ip >/dev/null || needs "iproute2's ip (scripts/install-deps installs it)"
command -v unshare >/dev/null || needs "util-linux's unshare"
tag="zmn$$" # names of this run's namespaces and links (links: at most 15 characters)
ns_a="$tag-a" ns_b="$tag-b" link_a="${tag}a" link_b="${tag}b"
dir="$(mktemp -d)"
netns_cluster_down() {
  declare -F cluster_teardown >/dev/null && cluster_teardown
  for ns in "$ns_a" "$ns_b"; do
    pids="$(ip netns pids "$ns" 2>/dev/null)"
    [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done
  rm -rf "$dir"
}
trap netns_cluster_down EXIT
trap 'exit 1' INT TERM # the EXIT trap runs on these too
ip netns add "$ns_a" 2>"$dir/netns.err" || needs "network namespaces (ip netns add: $(cat "$dir/netns.err"))"
ip netns add "$ns_b" && ip link add "$link_a" type veth peer name "$link_b" &&
  ip link set "$link_a" netns "$ns_a" && ip link set "$link_b" netns "$ns_b" &&
  ip -n "$ns_a" addr add 10.77.0.1/24 dev "$link_a" &&
  ip -n "$ns_b" addr add 10.77.0.2/24 dev "$link_b" &&
  ip -n "$ns_a" link set lo up && ip -n "$ns_b" link set lo up &&
  ip -n "$ns_a" link set "$link_a" up && ip -n "$ns_b" link set "$link_b" up ||
  needs "a veth pair between two network namespaces"
on_host() {
  local ns="$ns_a" name=zoe-host-a
  [ "$1" = b ] && ns="$ns_b" name=zoe-host-b
  shift
  nsenter --net="/run/netns/$ns" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$name" "$@"
}
