#!/usr/bin/env bash
# switchyard under real launchers: Open MPI's `mpirun` (which runs a PMIx
# server), with the PMIx bootstrap (the `pmix` feature) and no
# SWITCHYARD_ROOT, no secret in the environment.
#
#   1. the bootstrap's own test: it starts itself under `mpirun -n 2`,
#      `-n 4` and `-n 16` (rank, size, root and secret through PMIx; cards
#      and localities through PMIx, the root's bytes a fixed bound per PE;
#      mixed `cards` modes and rank 0 failing to bind reach every PE);
#   2. C API tests (tests/c, built with `switchyard cc`) under `mpirun -n 2`
#      and `-n 4`, with `SWITCHYARD_CARDS=all` and `=lazy`, each checked
#      against its `// expect-status:` (default 0) and `// expect-stdout:`
#      lines, with its `// env:` lines set; and that the peers' cards came
#      from the PMIx store, not the root: every PE of a run expected to
#      succeed logs Context::init's debug event `cards from pmix` (with its
#      `cards` mode), and no PE of any run `cards from root`;
#   3. a program that returns without shmem_finalize exits 0 and leaves no
#      shared-memory object, with either `cards` mode (PMIx is finalized
#      and the PE's objects removed at exit).
#
# Nothing here skips: without mpirun or libpmix the step fails (CI installs
# openmpi-bin and libpmix-dev in .ci/setup.sh).
#
#   LAUNCHER_TESTS   the C tests to run (names in tests/c, or `all`); default
#                    a set covering RMA, atomics, collectives, teams,
#                    contexts, threads, locks, signals and global exit
#   LAUNCHER_PES     PE counts (default "2 4")
#   LAUNCHER_CARDS   `cards` modes (default "all lazy")
set -uo pipefail
cd "$(dirname "$0")/.."
. .ci/shm-left.sh
export CARGO_TERM_COLOR=never
[ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
# Open MPI refuses to start as root without these (CI runs as root).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

fail() { echo "launchers: $*" >&2; exit 1; }
command -v mpirun >/dev/null 2>&1 || fail "no mpirun (install openmpi-bin)"
pkg-config --exists pmix 2>/dev/null || fail "no PMIx development files (install libpmix-dev)"
command -v cc >/dev/null 2>&1 || fail "no C compiler"
echo "launchers: $(mpirun --version 2>/dev/null | head -n1), PMIx $(pkg-config --modversion pmix)"

# No setting of the caller's may leak into the jobs: the point is that none
# is needed.
for v in $(env | sed -n 's/^\(SWITCHYARD_[A-Z0-9_]*\)=.*/\1/p'); do unset "$v"; done

cargo build -q -p switchyard-cli -p switchyard-shmem \
  --features switchyard-cli/pmix,switchyard-shmem/pmix || fail "build with the pmix feature failed"
timeout --kill-after=10 300 cargo test -q -p switchyard-bootstrap --features pmix --test pmix_mpirun \
  || fail "the bootstrap's mpirun test failed"

bin=target/debug
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
default_tests="basics rma p2p amo lock signal coll_data coll_reduce team_split ctx globals
  threads_multiple wait_fair zero_length global_exit global_exit_zero err_bad_pe"
tests=${LAUNCHER_TESTS:-$default_tests}
[ "$tests" = all ] && tests=$(cd tests/c && ls -- *.c | sed 's/\.c$//')
pes=${LAUNCHER_PES:-"2 4"}
cards_modes=${LAUNCHER_CARDS:-"all lazy"}
# Context::init says where the cards came from (a debug event); nothing
# else is logged below warnings.
log_filter=warn,switchyard::context::init=debug

passed=0; failures=()
for t in $tests; do
  src=tests/c/$t.c
  [ -f "$src" ] || fail "no test $src"
  if ! "$bin/switchyard" cc -std=c11 -Wall -Wextra -Werror -O1 -g "$src" -o "$out/$t" 2>"$out/$t.cc"; then
    cat "$out/$t.cc" >&2; failures+=("$t (compile)"); continue
  fi
  want=$(sed -n 's#^// expect-status: *##p' "$src" | head -n1); want=${want:-0}
  envs=(SWITCHYARD_HEAP_SIZE=8M SWITCHYARD_OP_TIMEOUT=20s)
  while IFS= read -r kv; do envs+=("$kv"); done < <(sed -n 's#^// env: *##p' "$src")
  test_pes=$(sed -n 's#^// pes: *##p' "$src" | head -n1)
  for n in ${test_pes:-$pes}; do
    for cards in $cards_modes; do
      log=$out/$t.$n.$cards
      shm_before=$(ls /dev/shm | grep '^switchyard-' || true)
      env SWITCHYARD_CARDS="$cards" SWITCHYARD_LOG="$log_filter" "${envs[@]}" \
        timeout --kill-after=5 60 \
        mpirun -n "$n" --oversubscribe "$out/$t" >"$log.out" 2>"$log.err"
      rc=$?
      bad=""
      [ "$rc" = "$want" ] || bad="exit $rc, expected $want"
      # No launcher of ours removes the job's shared-memory objects here:
      # the PEs must (finalize, or shmem_global_exit before the abort).
      left=$(shm_left "$shm_before")
      [ -n "$left" ] && bad="${bad:+$bad; }$(printf '%s\n' "$left" | wc -l) shared-memory object(s) left behind ($(printf '%s\n' "$left" | head -n 3 | tr '\n' ' '))"
      while IFS= read -r line; do
        [ -n "$line" ] && ! grep -qF -- "$line" "$log.out" && bad="${bad:+$bad; }no '$line' on stdout"
      done < <(sed -n 's#^// expect-stdout: *##p' "$src")
      grep -q "cards from root" "$log.err" && bad="${bad:+$bad; }cards from the root under PMIx"
      if [ "$want" = 0 ]; then
        from_pmix=$(grep -cE "cards from pmix.*cards=\"?$cards" "$log.err")
        [ "$from_pmix" = "$n" ] \
          || bad="${bad:+$bad; }$from_pmix of $n PEs logged cards from pmix (cards=$cards)"
      fi
      if [ -z "$bad" ]; then
        passed=$((passed + 1))
      else
        failures+=("$t -n $n cards=$cards: $bad")
        echo "--- $t -n $n cards=$cards: $bad"; tail -n 20 "$log.out" "$log.err"
      fi
    done
  done
done

# 3. A program that returns from main without shmem_finalize: with lazy
#    cards its PMIx session outlives the bootstrap (cards are fetched as
#    long as the job runs) and must still be finalized at exit, or mpirun
#    fails the job ("exiting improperly"); and each PE removes its own
#    shared-memory objects at exit, which no launcher of ours does there.
cat >"$out/no_finalize.c" <<'EOF'
#include <shmem.h>
#include <stdio.h>
int main(void) {
    shmem_init();
    shmem_barrier_all();
    printf("PE %d: no shmem_finalize\n", shmem_my_pe());
    return 0;
}
EOF
if "$bin/switchyard" cc -std=c11 -Wall -Wextra -Werror -O1 "$out/no_finalize.c" -o "$out/no_finalize"; then
  for cards in $cards_modes; do
    log=$out/no_finalize.$cards
    shm_before=$(ls /dev/shm | grep '^switchyard-' || true)
    SWITCHYARD_CARDS=$cards SWITCHYARD_HEAP_SIZE=8M timeout --kill-after=5 60 \
      mpirun -n 4 --oversubscribe "$out/no_finalize" >"$log.out" 2>"$log.err"
    rc=$?
    lines=$(grep -c "no shmem_finalize" "$log.out")
    # Each PE removes its own objects at exit (no launcher of ours does).
    left=$(shm_left "$shm_before" | grep -c . || true)
    if [ "$rc" = 0 ] && [ "$lines" = 4 ] && [ "$left" = 0 ]; then
      passed=$((passed + 1))
    else
      failures+=("no_finalize -n 4 cards=$cards: exit $rc, $lines of 4 PEs printed, $left shared-memory object(s) left behind")
      echo "--- no_finalize cards=$cards"; tail -n 20 "$log.out" "$log.err"
    fi
  done
else
  failures+=("no_finalize (compile)")
fi

for f in "${failures[@]+"${failures[@]}"}"; do echo "FAILED: $f"; done
echo "launchers: mpirun: $passed C test run(s) passed, ${#failures[@]} failed"
[ ${#failures[@]} -eq 0 ]
