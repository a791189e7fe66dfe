#!/usr/bin/env bash
# Slurm on the two hosts of netns-cluster.sh: slurmctld on host a, one slurmd on each host (Slurm
# from Debian, auth/none: no munge key to share). zoe-train runs with the srun line of
# docs/multi-node.md ("Across nodes"), TP inside a host and DP across. Checks:
#   - the host map; the losses equal a one-host run's;
#   - cutting host b's link ends every rank on both hosts within --stall-timeout + 15 s (3x for
#     a loaded machine), each rank's report in its --error file (written by its own host), and
#     srun returns;
# slurmctld, the slurmds and their steps, the namespaces and the files go on exit, even on
# failure. Usage: test_multinode_srun.sh ZOE_TRAIN MPIEXEC CORPUS SOURCE_DIR
set -u
train="$1" mpiexec="$2" corpus="$3" src="$4"
test_name=test_multinode_srun
source "$src/tests/multinode/netns-cluster.sh"
for d in slurmctld slurmd srun sinfo; do
  command -v $d >/dev/null || needs "Slurm's $d (scripts/install-deps installs slurmctld, slurmd, slurm-client)"
done
stall=4
bound=$((3 * (stall + 15))) # the promise is --stall-timeout + 15 s; 3x for a loaded machine
# KillWait: how long srun waits, after a task's bad exit, for the tasks of a node it cannot reach
# (docs/multi-node.md); 30 s by default, 5 s here to keep the test short.
kill_wait=5
# Each host gets its own spool and TmpFS (the PMIx plugin's directories are named by job and
# step only: two slurmds on one machine would collide in /tmp).
mkdir -p "$dir"/{state,spool-zoe-host-a,spool-zoe-host-b,tmp-zoe-host-a,tmp-zoe-host-b}
cat >"$dir/slurm.conf" <<EOF
ClusterName=zoe
SlurmctldHost=zoe-host-a(10.77.0.1)
AuthType=auth/none
CredType=cred/none
SlurmUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool-%n
TmpFS=$dir/tmp-%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd-%n.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=$kill_wait
NodeName=zoe-host-a NodeAddr=10.77.0.1 CPUs=2
NodeName=zoe-host-b NodeAddr=10.77.0.2 CPUs=2
PartitionName=zoe Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF="$dir/slurm.conf"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
cluster_teardown() { # before the namespaces' processes are killed: the logs of a failure
  ((fails == 0)) || for f in "$dir"/slurm*.log; do echo "== $f" && tail -n 8 "$f"; done
}
on_host a slurmctld -D -i >"$dir/slurmctld.out" 2>&1 &
on_host a slurmd -D -N zoe-host-a >"$dir/slurmd-a.out" 2>&1 &
on_host b slurmd -D -N zoe-host-b >"$dir/slurmd-b.out" 2>&1 &
for _ in $(seq 300); do
  [ "$(on_host a sinfo -h -o %T 2>/dev/null)" = idle ] && break
  sleep 0.2
done
[ "$(on_host a sinfo -h -o %T 2>/dev/null)" = idle ] || {
  fail "the two slurmds did not come up: $(on_host a sinfo -N 2>&1) $(tail -n 3 "$dir"/slurm*.out)"
  exit 1
}
cd "$dir"
common=(--micro-batch 2 --lr-decay-style constant --warmup 0 --progress lines --log-every 1000)
losses() { sed -n 's/.*"step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/p' "$1"; }

# 1. docs/multi-node.md's srun line (less --gpus-per-node, the demo model), from host a; host b's
# link is cut once a few steps are done.
ZOE_LOG=info on_host a srun --nodes 2 --ntasks-per-node 2 --distribution block --mpi=pmix \
  --kill-on-bad-exit=1 --error=zoe-%t.err \
  "$train" --model demo --tp 2 --data "$corpus" --stall-timeout "$stall" \
  "${common[@]}" --steps 100000 --metrics cut.jsonl >cut.out 2>cut.err &
job=$!
for _ in $(seq 600); do
  [ -s cut.jsonl ] && [ "$(wc -l <cut.jsonl)" -ge 3 ] && break
  kill -0 "$job" 2>/dev/null || break
  sleep 0.2
done
kill -0 "$job" 2>/dev/null || {
  fail "the job ended before the cut: $(tail -n 5 cut.err zoe-*.err)"
  exit 1
}
grep -q "host map: 4 ranks on 2 hosts" zoe-0.err && grep -q "zoe-host-a: 2 ranks 0-1; TP groups (dp) 0$" zoe-0.err &&
  grep -q "zoe-host-b: 2 ranks 2-3; TP groups (dp) 1$" zoe-0.err ||
  fail "no host map with a TP group on each host: $(grep 'host map' -A2 zoe-0.err)"
echo "cutting host b after $(wc -l <cut.jsonl) steps"
ip -n "$ns_b" link set "$link_b" down
start=$SECONDS
ranks_on() { ip netns pids "$1" | xargs -r ps -o pid=,comm= -p | grep zoe-train; }
ended_a="" ended_b="" ended_srun=""
while ((SECONDS - start < bound)); do
  [ -z "$ended_a" ] && [ -z "$(ranks_on "$ns_a")" ] && ended_a=$((SECONDS - start))
  [ -z "$ended_b" ] && [ -z "$(ranks_on "$ns_b")" ] && ended_b=$((SECONDS - start))
  [ -z "$ended_srun" ] && ! kill -0 "$job" 2>/dev/null && ended_srun=$((SECONDS - start))
  [ -n "$ended_a" ] && [ -n "$ended_b" ] && [ -n "$ended_srun" ] && break
  sleep 0.2
done
echo "after the cut (--stall-timeout $stall, KillWait $kill_wait): host a's ranks ended in" \
  "${ended_a:-more than $bound} s, host b's in ${ended_b:-more than $bound} s, srun in ${ended_srun:-more than $bound} s"
[ -n "$ended_a" ] || fail "ranks on host a $bound s after the cut: $(ranks_on "$ns_a")"
[ -n "$ended_b" ] || fail "ranks on the cut-off host b $bound s after the cut: $(ranks_on "$ns_b")"
if [ -z "$ended_srun" ]; then
  fail "srun still runs $bound s after the cut"
  kill -KILL "$job"
fi
wait "$job"
rc=$?
[ "$rc" -ne 0 ] || fail "srun exited 0 after the cut"
for r in 0 1 2 3; do
  grep -qE "^zoe: rank $r \(tp $((r % 2)), dp $((r / 2))\): no step completed in [0-9]+ s \(--stall-timeout $stall\): [0-9]+ steps done, now at step [0-9]+, micro-batch [0-9]+, [a-z]" zoe-$r.err ||
    fail "rank $r left no report in zoe-$r.err: $(tail -n 2 zoe-$r.err)"
done
grep -h "^zoe: rank" zoe-*.err | cut -c1-160

# 2. The same steps on one host.
steps=$(wc -l <cut.jsonl)
"$mpiexec" -np 4 --oversubscribe --bind-to none "$train" --model demo --tp 2 --data "$corpus" \
  "${common[@]}" --steps "$steps" --metrics one.jsonl >one.out 2>one.err ||
  fail "the one-host run failed: $(tail -3 one.err)"
if [ "$steps" -ge 3 ] && cmp -s <(losses cut.jsonl) <(losses one.jsonl); then
  echo "losses of steps 1-$steps equal one host's"
else
  fail "two hosts' losses differ from one host's: $(diff <(losses cut.jsonl) <(losses one.jsonl) | head -4)"
fi
echo "test_multinode_srun: $((fails == 0)) passed, $fails failed"
[ "$fails" -eq 0 ]
