#!/usr/bin/env bash
# switchyard under a real single-node Slurm: starts munged (unless one
# answers), slurmctld and slurmd from Debian's slurm-wlm with a generated
# slurm.conf (its own ports and directories, under a temporary directory),
# then runs C API tests (tests/c, built with `switchyard cc` with the `pmix`
# feature) with `srun -n 2` and `-n 4 --mpi=pmix`: rank, size, root and
# secret through Slurm's PMIx server, no SWITCHYARD_ROOT; with
# `SWITCHYARD_CARDS=all` and `=lazy`, the peers' cards through its store
# (every PE of a run expected to succeed logs Context::init's debug event
# `cards from pmix`, none `cards from root`). Stops what it started on exit. Needs root (slurmd); nothing here skips: without Slurm,
# munge or root the step fails (CI installs slurmd, slurmctld, slurm-client
# and munge in .ci/setup.sh).
#
#   SLURM_TESTS   the C tests (names in tests/c); default a short set
#   SLURM_PES     PE counts (default "2 4")
#   SLURM_CARDS   `cards` modes (default "all lazy")
set -uo pipefail
cd "$(dirname "$0")/.."
. .ci/shm-left.sh
export CARGO_TERM_COLOR=never
[ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"

fail() { echo "slurm: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || fail "needs root (slurmd runs as root)"
for c in slurmctld slurmd srun sinfo munged munge unmunge; do
  command -v "$c" >/dev/null 2>&1 || [ -x "/usr/sbin/$c" ] || fail "no $c (install slurmd slurmctld slurm-client munge)"
done
pkg-config --exists pmix 2>/dev/null || fail "no PMIx development files (install libpmix-dev)"
for v in $(env | sed -n 's/^\(SWITCHYARD_[A-Z0-9_]*\)=.*/\1/p'); do unset "$v"; done

dir=$(mktemp -d /tmp/switchyard-slurm.XXXXXX)
chmod 755 "$dir"
cleanup() {
  local started=()
  for f in "$dir"/slurmd.pid "$dir"/slurmctld.pid "$dir"/munge/munged.pid; do
    [ -s "$f" ] && started+=("$(cat "$f")")
  done
  for p in "${started[@]+"${started[@]}"}"; do kill "$p" 2>/dev/null; done
  # They write their state as they go: wait (bounded) before removing it.
  local alive=""
  for _ in $(seq 1 100); do
    alive=""
    for p in "${started[@]+"${started[@]}"}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ -z "$alive" ] && break
    sleep 0.1
  done
  [ -n "$alive" ] && for p in "${started[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$dir"
}
trap cleanup EXIT

# munge: the one running, else our own.
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  [ -s /etc/munge/munge.key ] || {
    mkdir -p /etc/munge
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 2>/dev/null
    chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
  }
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge
  mkdir -p "$dir/munge" && chown munge:munge "$dir/munge"
  runuser -u munge -- /usr/sbin/munged --pid-file="$dir/munge/munged.pid" || fail "munged did not start"
  munge -n | unmunge >/dev/null 2>&1 || fail "munge does not answer"
fi

host=$(hostname -s)
conf=$dir/slurm.conf
mkdir -p "$dir/ctld" "$dir/d"
# CPUs above the machine's (config_overrides): 4 tasks fit on a 2-core runner.
cat >"$conf" <<EOF
ClusterName=switchyard
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=16817
SlurmdPort=16818
AuthType=auth/munge
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
StateSaveLocation=$dir/ctld
SlurmdSpoolDir=$dir/d
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=$host NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN
PartitionName=ci Nodes=ALL Default=YES MaxTime=10 State=UP OverSubscribe=FORCE
EOF
export SLURM_CONF=$conf
/usr/sbin/slurmctld -f "$conf" || fail "slurmctld did not start"
/usr/sbin/slurmd -f "$conf" || fail "slurmd did not start"
ready=""
for _ in $(seq 1 60); do
  if sinfo -h -o %t 2>/dev/null | grep -qx idle; then ready=1; break; fi
  sleep 0.5
done
[ -n "$ready" ] || { tail -n 20 "$dir"/slurmctld.log "$dir"/slurmd.log; fail "the node did not come up"; }
srun --mpi=list 2>&1 | grep -q pmix || fail "Slurm has no pmix MPI plugin"
echo "slurm: $(srun --version), PMIx $(pkg-config --modversion pmix), node $host"

cargo build -q -p switchyard-cli -p switchyard-shmem \
  --features switchyard-cli/pmix,switchyard-shmem/pmix || fail "build with the pmix feature failed"
bin=target/debug
tests=${SLURM_TESTS:-"basics rma amo coll_data coll_reduce team_split ctx global_exit"}
passed=0; failures=()
for t in $tests; do
  src=tests/c/$t.c
  [ -f "$src" ] || fail "no test $src"
  "$bin/switchyard" cc -std=c11 -Wall -Wextra -Werror -O1 -g "$src" -o "$dir/$t" || { failures+=("$t (compile)"); continue; }
  want=$(sed -n 's#^// expect-status: *##p' "$src" | head -n1); want=${want:-0}
  for n in ${SLURM_PES:-2 4}; do
    for cards in ${SLURM_CARDS:-all lazy}; do
      log=$dir/$t.$n.$cards
      shm_before=$(ls /dev/shm | grep '^switchyard-' || true)
      t0=$SECONDS
      SWITCHYARD_HEAP_SIZE=8M SWITCHYARD_OP_TIMEOUT=20s SWITCHYARD_CARDS=$cards \
        SWITCHYARD_LOG=warn,switchyard::context::init=debug timeout --kill-after=5 90 \
        srun -n "$n" --mpi=pmix --time=2 "$dir/$t" >"$log.out" 2>"$log.err"
      rc=$?
      echo "slurm: $t -n $n cards=$cards: exit $rc ($((SECONDS - t0))s)"
      bad=""
      [ "$rc" = "$want" ] || bad="exit $rc, expected $want"
      # No launcher of ours removes the job's shared-memory objects here:
      # the PEs must (finalize, or shmem_global_exit before the abort).
      left=$(shm_left "$shm_before")
      [ -n "$left" ] && bad="${bad:+$bad; }$(printf '%s\n' "$left" | wc -l) shared-memory object(s) left behind ($(printf '%s\n' "$left" | head -n 3 | tr '\n' ' '))"
      grep -q "cards from root" "$log.err" && bad="${bad:+$bad; }cards from the root under PMIx"
      if [ "$want" = 0 ]; then
        from_pmix=$(grep -cE "cards from pmix.*cards=\"?$cards" "$log.err")
        [ "$from_pmix" = "$n" ] \
          || bad="${bad:+$bad; }$from_pmix of $n PEs logged cards from pmix"
      fi
      if [ -z "$bad" ]; then
        passed=$((passed + 1))
      else
        failures+=("$t -n $n cards=$cards: $bad")
        tail -n 20 "$log.out" "$log.err"
      fi
    done
  done
done
for f in "${failures[@]+"${failures[@]}"}"; do echo "FAILED: $f"; done
echo "slurm: srun --mpi=pmix: $passed C test run(s) passed, ${#failures[@]} failed"
[ ${#failures[@]} -eq 0 ]
