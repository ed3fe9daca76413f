#!/usr/bin/env bash
# `tide bench --emit-slurm` on a real Slurm: a one-node cluster on localhost
# (munged, slurmctld and slurmd from Debian's slurm-wlm and munge, installed
# when missing; a generated slurm.conf: one node, 2 CPUs, no GPU, no cgroups,
# state and spool in a temporary folder, free ports). It queues the emitted
# job array of 4 shards of a tiny-model sweep and its merge job, waits for
# them (bounded), and checks that the merged results.csv equals the one of a
# single unsharded run: same rows in the same order, same counters, tokens
# and 'same' column (the timing columns are left out), and that every shard
# checked its tokens against the same reference. Every daemon it started is
# stopped by pid on exit, on failure too.
#
# Usage: slurm_test.sh PATH_TO_TIDE
# Exit: 0 passed, 1 failed, 77 skipped (Slurm or munge missing and not
# installable: not root, no apt-get, no network; or TIDE_CLUSTER_NO_INSTALL=1).
set -uo pipefail

tide="$1"
t0=$SECONDS
deadline_jobs=${TIDE_CLUSTER_WAIT:-240} # seconds for the jobs to end

skip() {
    echo "SKIP: $*"
    exit 77
}

# ---- Slurm and munge ---------------------------------------------------------
tools=(munged slurmctld slurmd sbatch squeue scontrol scancel sinfo)
missing() {
    local t
    for t in "${tools[@]}"; do
        PATH="$PATH:/usr/sbin:/sbin" command -v "$t" >/dev/null 2>&1 || return 0
    done
    return 1
}
if missing; then
    [ "${TIDE_CLUSTER_NO_INSTALL:-0}" = 1 ] &&
        skip "Slurm or munge is not installed (TIDE_CLUSTER_NO_INSTALL=1: not installing)"
    command -v apt-get >/dev/null 2>&1 || skip "Slurm or munge is not installed, and there is no apt-get"
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        sudo -n true 2>/dev/null || skip "Slurm or munge is not installed, and installing needs root"
        sudo="sudo -n"
    fi
    echo "installing slurm-wlm and munge (apt-get)"
    ti=$SECONDS
    if ! { $sudo apt-get -o DPkg::Lock::Timeout=300 update -qq &&
        DEBIAN_FRONTEND=noninteractive $sudo apt-get -o DPkg::Lock::Timeout=300 install -y -qq \
            slurm-wlm munge; } >/dev/null 2>&1; then
        skip "Slurm or munge is not installed and apt-get could not install slurm-wlm and munge"
    fi
    missing && skip "slurm-wlm and munge were installed, but some of ${tools[*]} are missing"
    echo "installed in $((SECONDS - ti)) s"
fi
export PATH="$PATH:/usr/sbin:/sbin"
[ "$(id -u)" -eq 0 ] || skip "the daemons run as root here (SlurmUser=root); run the test as root"

# ---- The cluster ---------------------------------------------------------------
work="$(mktemp -d "${TMPDIR:-/tmp}/tide-slurm.XXXXXX")" || exit 1
chmod 711 "$work" # munged wants every folder above its socket searchable
pids=()           # daemons started here (their timeout(1) wrappers), stopped by pid
export SLURM_CONF="$work/slurm.conf"

cleanup() {
    local rc=$? p
    trap - EXIT INT TERM
    if [ ${#pids[@]} -gt 0 ]; then
        # Jobs still queued or running (a failure): cancel them on this
        # controller only, before their slurmd goes.
        timeout 10 scancel --user="$(id -un)" >/dev/null 2>&1
        for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
            p=${pids[i]}
            kill "$p" 2>/dev/null || continue
            for _ in $(seq 1 50); do
                kill -0 "$p" 2>/dev/null || break
                sleep 0.2
            done
            kill -9 "$p" 2>/dev/null
            wait "$p" 2>/dev/null
        done
        echo "stopped the daemons (pids ${pids[*]})"
    fi
    if [ "${TIDE_KEEP_TMP:-0}" = 1 ]; then
        echo "kept $work"
    else
        rm -rf "$work"
    fi
    exit $rc
}
trap cleanup EXIT
trap 'exit 1' INT TERM

fail() {
    echo "FAIL: $*"
    for f in "$work"/log/*.log "$work"/log/munged.out "$work"/run/cluster/*/logs/*.out; do
        [ -f "$f" ] || continue
        echo "---- $f (last lines)"
        tail -n 25 "$f"
    done
    exit 1
}

wait_for() { # SECONDS DESCRIPTION COMMAND...: poll until COMMAND succeeds
    local limit=$1 what=$2 end=$((SECONDS + $1))
    shift 2
    until "$@" >/dev/null 2>&1; do
        [ $SECONDS -lt $end ] || fail "$what: not within $limit s"
        sleep 0.5
    done
}

read -r port_ctld port_slurmd < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s:
    x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
[ -n "${port_slurmd:-}" ] || fail "no free TCP ports"
node="$(hostname -s)"
mkdir -p "$work/state" "$work/spool" "$work/log" "$work/run"
mkdir -m 755 "$work/munge"

head -c 1024 /dev/urandom >"$work/munge.key"
chmod 600 "$work/munge.key"
# Each daemon runs under timeout(1): should this script be killed before its
# trap runs, the daemons still end within 15 minutes.
life=(timeout -k 10 900)
"${life[@]}" munged -F --socket="$work/munge/munge.socket" --key-file="$work/munge.key" \
    --pid-file="$work/munge/munged.pid" --seed-file="$work/munge.seed" \
    --log-file="$work/log/munged.log" >"$work/log/munged.out" 2>&1 &
pids+=($!)
wait_for 15 "munged did not create its socket" test -S "$work/munge/munge.socket"

cat >"$SLURM_CONF" <<EOF
# One node on localhost, for tests/cluster/slurm_test.sh.
ClusterName=tidetest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$port_ctld
SlurmdPort=$port_slurmd
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$work/munge/munge.socket
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/log/slurmctld.log
SlurmdLogFile=$work/log/slurmd.log
# No systemd, no cgroups here: track processes by parent pid.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
MailProg=/bin/true
NodeName=$node NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=tidetest Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF

"${life[@]}" slurmctld -D -f "$SLURM_CONF" >"$work/log/slurmctld.out" 2>&1 &
pids+=($!)
wait_for 30 "slurmctld did not answer" scontrol ping
"${life[@]}" slurmd -D -f "$SLURM_CONF" >"$work/log/slurmd.out" 2>&1 &
pids+=($!)
node_idle() { [ "$(sinfo -h -n "$node" -o %t 2>/dev/null)" = idle ]; }
wait_for 60 "the node did not become idle" node_idle
echo "cluster up in $((SECONDS - t0)) s: slurmctld :$port_ctld, slurmd :$port_slurmd, node $node" \
    "(2 CPUs), pids ${pids[*]}"

# ---- The sweep -----------------------------------------------------------------
cd "$work/run" || fail "no $work/run"
"$tide" --quiet mkmodel tiny --preset tiny --seed 5 >/dev/null || fail "tide mkmodel"
cat >t.ini <<EOF
[model]
path = $work/run/tiny
[generation]
gen_length = 64
[output]
progress = false
stream = false
[backend-cpu-onednn]
threads = 1
EOF
printf 'Write a haiku about the tide.\nWhat is 12 times 7?\nfn main() {\n' >prompts.txt
sweep=(-c t.ini --prompts prompts.txt --policies tide,lru,static --budgets 4,8 --intervals 1,2)

"$tide" --quiet bench "${sweep[@]}" --emit-slurm 4 --partition tidetest --time 10 --out cluster \
    >emit.txt || fail "tide bench --emit-slurm"
run="$(ls -d cluster/*-slurm)"
[ -x "$run/submit.sh" ] || fail "no submit.sh in $run"
ts=$SECONDS
sh "$run/submit.sh" >submit.txt 2>&1 || {
    cat submit.txt
    fail "submit.sh"
}
cat submit.txt
array=$(sed -n 's/.*job array \([0-9]*\).*/\1/p' submit.txt)
merge=$(sed -n 's/.*merge as job \([0-9]*\).*/\1/p' submit.txt)
[ -n "$array" ] && [ -n "$merge" ] || fail "no job ids in the output of submit.sh"

queue_empty() { [ -z "$(squeue -h -o %i 2>/dev/null)" ] && squeue >/dev/null 2>&1; }
wait_for "$deadline_jobs" "the jobs did not end" queue_empty
echo "shards and merge ended in $((SECONDS - ts)) s"
state() { scontrol -o show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]* .*ExitCode=[0-9:]*' |
    sed 's/JobState=\([A-Z_]*\).*ExitCode=\([0-9:]*\)/\1 \2/'; }
for k in 0 1 2 3; do
    s=$(state "${array}_$k")
    echo "  shard $k (job ${array}_$k): $s"
    [ "$s" = "COMPLETED 0:0" ] || fail "shard $k did not complete"
done
s=$(state "$merge")
echo "  merge (job $merge, after the array): $s"
[ "$s" = "COMPLETED 0:0" ] || fail "the merge job did not complete"
[ -f "$run/merged/results.csv" ] || fail "no $run/merged/results.csv"

# ---- The same sweep in one process, and the comparison ----------------------------
"$tide" --quiet bench "${sweep[@]}" --out single >/dev/null || fail "the unsharded tide bench"
python3 - "$run/merged" single/*/ <<'EOF' || fail "the merged result differs from the single run's"
import csv, json, sys
merged, single = sys.argv[1], sys.argv[2]
TIMING = {"seconds", "host_seconds", "device_seconds", "tokens_per_second"}

def rows(d):
    with open(d + "/results.csv") as f:
        r = list(csv.reader(f))
    keep = [i for i, c in enumerate(r[0]) if c not in TIMING]
    return [r[0][i] for i in keep], [[row[i] for i in keep] for row in r[1:]]

(ha, a), (hb, b) = rows(merged), rows(single)
same = ha.index("same_tokens")
ok = ha == hb and a == b
if not ok:
    print("columns", ha, hb)
    for x, y in zip(a, b):
        print(("   " if x == y else "!= ") + ",".join(x) + "  |  " + ",".join(y))
    print("rows: merged %d, single %d" % (len(a), len(b)))
ma = json.load(open(merged + "/manifest.json"))
mb = json.load(open(single + "/manifest.json"))
ref_ok = ma["reference_tokens"]["fnv1a64"] == mb["reference_tokens"]["fnv1a64"]
print("merged: %d shards on %s; %d rows (baseline + %d configurations) x %d compared columns"
      % (len(ma["shards"]), ",".join(ma["hosts"]), len(a), ma["grid"]["configurations"], len(ha)))
print("rows equal to the single run's: %s; tokens (reference hashes of %d prompts) equal: %s; "
      "'same' column all yes: %s" % (ok, len(ma["reference_tokens"]["fnv1a64"]), ref_ok,
                                     all(r[same] == "yes" for r in a)))
sys.exit(0 if ok and ref_ok and all(r[same] == "yes" for r in a) else 1)
EOF
echo "PASS in $((SECONDS - t0)) s"
