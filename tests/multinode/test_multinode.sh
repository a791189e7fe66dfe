#!/usr/bin/env bash
# Two hosts on this machine: network namespaces joined by a veth pair, Open MPI across them over
# TCP through an rsh agent (netns-rsh) that runs each host's daemon in its namespace under its
# own host name. zoe-train runs TP inside a host and DP across, with the mpirun line of
# docs/multi-node.md ("A network that splits"). Checks:
#   - the host map on rank 0's log; the losses equal a one-host run's;
#   - cutting one host's link (ip link set down) ends the whole job in bounded time, the ranks of
#     the host that kept mpirun naming where they wait, and the cut-off host's ranks end too;
#   - the resume from the last checkpoint, on both hosts again, continues bit for bit: its
#     checkpoint equals a one-host run's at the same step.
# Needs root and network namespaces: without them it fails saying so (ctest -LE multinode leaves
# it out). Usage: test_multinode.sh ZOE_TRAIN MPIEXEC CORPUS SOURCE_DIR
set -u
train="$1" mpiexec="$2" corpus="$3" src="$4"
needs() {
  echo "FAIL: test_multinode needs $1; run it as root on a machine that allows network" \
       "namespaces, or leave it out with ctest -LE multinode"
  exit 1
}
[ "$(id -u)" -eq 0 ] || needs "root (it makes network namespaces)"
command -v ip >/dev/null || needs "iproute2's ip (scripts/install-deps installs it)"
command -v unshare >/dev/null || needs "util-linux's unshare"
stall=4 # --stall-timeout: under the 6 s that mpirun's keepalive takes at the least
bound=$((3 * (stall + 15))) # the promise is --stall-timeout + 15 s; 3x for a loaded machine
tag="zmn$$" # names of this run's namespaces and links (links: at most 15 characters)
ns_a="$tag-a" ns_b="$tag-b" link_a="${tag}a" link_b="${tag}b"
dir="$(mktemp -d)"
cleanup() {
  for ns in "$ns_a" "$ns_b"; do
    pids="$(ip netns pids "$ns" 2>/dev/null)"
    [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done
  rm -rf "$dir"
}
trap cleanup EXIT
ip netns add "$ns_a" 2>"$dir/netns.err" || needs "network namespaces (ip netns add: $(cat "$dir/netns.err"))"
ip netns add "$ns_b" && ip link add "$link_a" type veth peer name "$link_b" &&
  ip link set "$link_a" netns "$ns_a" && ip link set "$link_b" netns "$ns_b" &&
  ip -n "$ns_a" addr add 10.77.0.1/24 dev "$link_a" &&
  ip -n "$ns_b" addr add 10.77.0.2/24 dev "$link_b" &&
  ip -n "$ns_a" link set lo up && ip -n "$ns_b" link set lo up &&
  ip -n "$ns_a" link set "$link_a" up && ip -n "$ns_b" link set "$link_b" up ||
  needs "a veth pair between two network namespaces"
printf '10.77.0.1 slots=2\n10.77.0.2 slots=2\n' >"$dir/hosts"
export ZOE_NETNS_HOSTS="10.77.0.1=$ns_a:zoe-host-a 10.77.0.2=$ns_b:zoe-host-b"
export OMPI_MCA_plm_rsh_agent="$src/tests/multinode/netns-rsh"
export OMPI_MCA_hwloc_base_binding_policy=none # 4 ranks on this machine's cores
cd "$dir"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# run_cluster ARGS...: docs/multi-node.md's mpirun line, from host a (mpirun's host); with
# params="", without its MCA parameter file; with map=node, ranks dealt round-robin.
params="$src/launch/openmpi-mca-params.conf" map=slot
run_cluster() {
  ip netns exec "$ns_a" unshare --uts sh -c 'hostname zoe-host-a && exec "$@"' sh \
    "$mpiexec" ${params:+--mca mca_base_param_files "$params"} \
    -np 4 --hostfile hosts --map-by "$map" --output-filename ranks \
    "$train" --model demo --tp 2 --data "$corpus" --stall-timeout "$stall" "$@"
}
common=(--micro-batch 2 --lr-decay-style constant --warmup 0 --progress lines --log-every 1000)
losses() { sed -n 's/.*"step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/p' "$1"; }

# 0. Without the parameter file, rank 0 warns that a split would hang; with the ranks dealt
# round-robin, each TP group spans the hosts: the map says so, and each group warns.
warning="mpirun notices a host that the network cut off only after 480 s"
ZOE_LOG=info params="" map=node run_cluster "${common[@]}" --steps 1 >plain.out 2>plain.err ||
  fail "a run on two hosts failed: $(tail -3 plain.err)"
grep -q "$warning" plain.err || fail "no warning without launch/openmpi-mca-params.conf"
grep -q "zoe-host-b: 2 ranks 1,3; TP groups (dp) none; part of 0-1 (spanning hosts)$" plain.err ||
  fail "the host map does not show the TP groups spanning hosts: $(grep -A2 'host map' plain.err)"
[ "$(grep -c "TP group of dp=[01] spans nodes" plain.err)" -eq 2 ] ||
  fail "not one warning per TP group spanning hosts: $(grep spans plain.err)"

# 1. Training across the two hosts; the link of host b is cut once a few steps are saved.
ZOE_LOG=info run_cluster "${common[@]}" --steps 100000 --save ckpt --save-every 2 --keep-last 2 \
  --metrics cut.jsonl >cut.out 2>cut.err &
job=$!
for _ in $(seq 600); do # under way: steps logged, a checkpoint complete
  [ -s cut.jsonl ] && [ "$(wc -l <cut.jsonl)" -ge 3 ] && [ -f ckpt/latest ] && break
  kill -0 "$job" 2>/dev/null || break
  sleep 0.2
done
kill -0 "$job" 2>/dev/null || fail "the job ended before the cut: $(tail -5 cut.err)"
grep -q "host map: 4 ranks on 2 hosts" cut.err && grep -q "zoe-host-a: 2 ranks 0-1; TP groups (dp) 0$" cut.err &&
  grep -q "zoe-host-b: 2 ranks 2-3; TP groups (dp) 1$" cut.err ||
  fail "no host map with a TP group on each host: $(grep 'host map' -A2 cut.err)"
grep -q "mpirun notices a host" cut.err && fail "a warning with the parameter file: $(grep mpirun cut.err)"
echo "cutting host b after $(wc -l <cut.jsonl) steps, $(cat ckpt/latest) saved"
before=$(wc -l <cut.err) # a report before the cut (a save slow under load) does not count
ip -n "$ns_b" link set "$link_b" down
start=$SECONDS
while kill -0 "$job" 2>/dev/null && ((SECONDS - start < bound)); do sleep 0.2; done
took=$((SECONDS - start))
if kill -0 "$job" 2>/dev/null; then
  fail "the job still runs $bound s after the cut"
  kill -KILL "$job"
fi
wait "$job"
rc=$?
echo "the job ended ${took} s after the cut (exit $rc; --stall-timeout $stall)"
tail -n +$((before + 1)) cut.err >after.err
grep -E "^zoe: rank|lost communication|Remote daemon" after.err
[ "$rc" -ne 0 ] || fail "the job exited 0 after the cut"
for r in 0 1; do
  grep -qE "^zoe: rank $r \(tp $r, dp 0\): no step completed in [0-9]+ s \(--stall-timeout $stall\): [0-9]+ steps done, now at step [0-9]+, micro-batch [0-9]+, [a-z]" after.err ||
    fail "rank $r (host a) did not say where it waits"
done
# The cut-off host's ranks end too (their watchdogs abort them) and their lines reach the files
# that their host writes (--output-filename). Its Open MPI daemon may stay: it cannot deliver
# those lines to mpirun, and TCP retries a send for many minutes (docs/multi-node.md).
b_ranks() { ip netns pids "$ns_b" | xargs -r ps -o pid=,comm= -p | grep zoe-train; }
while [ -n "$(b_ranks)" ] && ((SECONDS - start < bound)); do sleep 0.2; done
[ -z "$(b_ranks)" ] || fail "ranks on the cut-off host $bound s after the cut: $(b_ranks)"
echo "the cut-off host's ranks ended $((SECONDS - start)) s after the cut"
for r in 2 3; do
  grep -qE "^zoe: rank $r \(tp $((r - 2)), dp 1\): no step completed in" ranks/1/rank.$r/stderr ||
    fail "rank $r (host b) left no report in ranks/1/rank.$r/stderr: $(tail -2 ranks/1/rank.$r/stderr)"
done

# 2. The resume, on both hosts again, from the newest complete checkpoint.
ip -n "$ns_b" link set "$link_b" up
saved="$(sed -n 's/^step-0*//p' ckpt/latest)"
[ -n "$saved" ] || fail "no checkpoint from the run that was cut: $(ls ckpt)"
end=$((${saved:-0} + 3))
run_cluster "${common[@]}" --steps "$end" --save ckpt --resume ckpt --metrics resumed.jsonl \
  >resumed.out 2>resumed.err || fail "the resume on two hosts failed: $(tail -3 resumed.err)"

# 3. The same steps on one host.
"$mpiexec" -np 4 --oversubscribe --bind-to none "$train" --model demo --tp 2 --data "$corpus" \
  "${common[@]}" --steps "$end" --save one --metrics one.jsonl >one.out 2>one.err ||
  fail "the one-host run failed: $(tail -3 one.err)"
cut_steps=$(wc -l <cut.jsonl)
losses cut.jsonl >cut.losses
losses one.jsonl | head -n "$cut_steps" >one.losses
[ "$cut_steps" -ge 3 ] && cmp -s cut.losses one.losses ||
  fail "two hosts' losses differ from one host's: $(diff cut.losses one.losses | head -4)"
losses resumed.jsonl >resumed.losses
losses one.jsonl | tail -n 3 >one.tail
[ "$(wc -l <resumed.losses)" -eq 3 ] && cmp -s resumed.losses one.tail ||
  fail "the resumed steps' losses differ from one host's: $(diff resumed.losses one.tail | head -4)"
step="$(printf 'step-%08d' "$end")"
for f in model.safetensors optimizer.safetensors; do
  cmp -s "ckpt/$step/$f" "one/$step/$f" || fail "the resumed run's $step/$f differs from one host's"
done
echo "losses of steps 1-$cut_steps equal one host's; resumed at step $saved, steps $((saved + 1))-$end and their checkpoint equal one host's"
echo "test_multinode: $((fails == 0)) passed, $fails failed"
[ "$fails" -eq 0 ]
