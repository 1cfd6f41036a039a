#!/usr/bin/env bash
# switchyard's test command: installs what is missing (.ci/setup.sh), then runs
# every check CI runs, each bounded in time, and ends with one summary line.
#
#   FUZZ_SECONDS   seconds per fuzz target in the smoke run (default 20)
#   SKIP_SETUP=1   do not run .ci/setup.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
[ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"

if [ "${SKIP_SETUP:-0}" != 1 ]; then
  bash .ci/setup.sh || { echo "setup failed"; exit 1; }
fi

passed=0; failed=0; skipped=0; failures=()
# Each step's output also goes to a log; the summary repeats what a failed
# step said about its failures (failed tests, panics, errors), since only the
# end of a CI run's output may be kept.
logs=$(mktemp -d "${TMPDIR:-/tmp}/switchyard-ci.XXXXXX")
step() {
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS log
  log="$logs/$((passed + failed + 1)).log"
  printf '\n=== %s\n' "$name"
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  if [ "$rc" -eq 0 ]; then
    passed=$((passed + 1)); printf -- '--- ok: %s (%ds)\n' "$name" $((SECONDS - t0))
  else
    failed=$((failed + 1)); failures+=("$name (exit $rc, $((SECONDS - t0))s)")
    [ "$rc" -eq 124 ] && echo "(timed out after ${limit}s)" >>"$log"
    failures+=("$(grep -E '^test .* \.\.\. FAILED$|panicked at|^error(\[|:)|has been running for over|ending the test process|FAILED|timed out after' "$log" \
      | grep -v '^FAILED: ' | head -n 20 | sed 's/^/    /')")
    printf -- '--- FAILED: %s (exit %d, %ds)\n' "$name" "$rc" $((SECONDS - t0))
  fi
}
skip() { skipped=$((skipped + 1)); printf '\n=== %s\n--- skipped: %s\n' "$1" "$2"; }

has_nightly() { rustup toolchain list 2>/dev/null | grep -q '^nightly'; }
has_miri() { has_nightly && cargo +nightly miri --version >/dev/null 2>&1 && rustup +nightly component list --installed 2>/dev/null | grep -q '^rust-src'; }

# Stable rustfmt warns once per file that it ignores the nightly-only import
# options of rustfmt.toml; the nightly check below applies them.
step "cargo fmt --check" 300 bash -c \
  'cargo fmt --all -- --check 2>&1 | grep -v "unstable features are only available"; exit "${PIPESTATUS[0]}"'
if has_nightly; then
  step "nightly rustfmt --check (import grouping, rustfmt.toml)" 300 cargo +nightly fmt --all -- --check
else
  skip "nightly rustfmt --check" "no nightly toolchain (stable rustfmt ignores the import options)"
fi
step "atomics only through the loom shim" 60 bash .ci/check-atomics.sh
step "cargo clippy (workspace, all targets, all features)" 1500 \
  cargo clippy --workspace --all-targets --all-features -- -D warnings
step "cargo test --workspace" 1500 cargo test --workspace --no-fail-fast
# RDMA verbs is a default feature: without it (shm + TCP) nothing of
# rdma-core is built or linked, and the library, the command and the C API
# still build, pass clippy and (the library) its unit tests.
step "verbs off: no RDMA dependencies" 300 bash -c '
  set -e
  for p in switchyard switchyard-cli switchyard-shmem; do
    if cargo tree -q -p "$p" --no-default-features -e normal,build --prefix none \
        | grep -E "^(ibverbs|ibverbs-sys|bindgen|cmake|switchyard-verbs) "; then
      echo "$p --no-default-features depends on the above"; exit 1
    fi
  done'
step "verbs off: build (switchyard, cli, C API)" 1200 \
  cargo build -p switchyard -p switchyard-cli -p switchyard-shmem --no-default-features
step "verbs off: clippy (all targets)" 1200 \
  cargo clippy -p switchyard -p switchyard-cli -p switchyard-shmem --no-default-features --all-targets -- -D warnings
step "verbs off: unit tests (switchyard, cli)" 900 cargo test -p switchyard -p switchyard-cli --no-default-features --lib
step "verbs off: rustdoc (-D warnings)" 600 env RUSTDOCFLAGS="-D warnings" \
  cargo doc -q -p switchyard -p switchyard-cli -p switchyard-shmem --no-deps --no-default-features
step "core unit tests without default features" 600 cargo test -p switchyard-core --no-default-features --lib
step "core feature combinations (none, alloc, std)" 600 bash -c '
  set -e
  cargo check -q -p switchyard-core --no-default-features
  cargo check -q -p switchyard-core --no-default-features --features alloc
  cargo check -q -p switchyard-core --no-default-features --features std'
if rustup target list --installed 2>/dev/null | grep -q thumbv7em-none-eabihf; then
  step "core on bare metal (thumbv7em-none-eabihf, no_std, no alloc)" 600 \
    cargo build -q -p switchyard-core --no-default-features --target thumbv7em-none-eabihf
  step "core on bare metal with alloc" 600 \
    cargo build -q -p switchyard-core --no-default-features --features alloc --target thumbv7em-none-eabihf
else
  skip "core on bare metal" "thumbv7em-none-eabihf target not installed (no_std still built on the host above)"
fi
msrv=$(grep -m1 '^rust-version' Cargo.toml | cut -d'"' -f2)
if rustup toolchain list 2>/dev/null | grep -q "^$msrv"; then
  step "MSRV: cargo +$msrv check (workspace, all targets)" 900 \
    cargo "+$msrv" check -q --workspace --all-targets --target-dir target/msrv
else
  skip "MSRV check" "toolchain $msrv not installed"
fi
step "rustdoc, private items too (-D warnings)" 900 env RUSTDOCFLAGS="-D warnings" cargo doc -q --workspace --no-deps --document-private-items
step "loom models (LOOM_MAX_PREEMPTIONS=3)" 900 env RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 \
  cargo test -q -p switchyard-core --features std --test loom --release --target-dir target/loom
if has_miri; then
  step "miri (core lib + no-alloc test, strict provenance)" 1500 env MIRIFLAGS="-Zmiri-strict-provenance" \
    cargo +nightly miri test -q -p switchyard-core --features std --lib --test no_alloc --target-dir target/miri
  step "miri (core lib, tree borrows)" 1500 env MIRIFLAGS="-Zmiri-tree-borrows" \
    cargo +nightly miri test -q -p switchyard-core --features std --lib --target-dir target/miri
  # ThreadSanitizer over the threaded tests (ring, trace ring, versioned
  # topology stress); halt_on_error turns the first race into a failure.
  host=$(rustc -vV | sed -n 's/^host: //p')
  step "TSAN (core lib + versioned-topology stress)" 1500 env RUSTFLAGS="-Zsanitizer=thread" \
    TSAN_OPTIONS="halt_on_error=1" cargo +nightly test -q -Zbuild-std --target "$host" \
    -p switchyard-core --features std --lib --test topology_stress --target-dir target/tsan
else
  skip "miri and TSAN" "no nightly toolchain with miri and rust-src"
fi
step "benches compile and run once" 1200 cargo test -q --benches -p switchyard-benches
if cargo fuzz --version >/dev/null 2>&1; then
  step "fuzz smoke (${FUZZ_SECONDS:-20}s per target)" 1500 env FUZZ_SECONDS="${FUZZ_SECONDS:-20}" bash fuzz/smoke.sh
else
  skip "fuzz smoke" "cargo-fuzz not installed"
fi
step "tool smoke (topo, info, run, perf, stat, trace, sim)" 600 bash .ci/smoke-tools.sh
# The PMIx bootstrap and C tests under Open MPI's mpirun (no SWITCHYARD_ROOT).
step "launchers: PMIx bootstrap and C tests under mpirun" 900 bash .ci/launchers.sh
step "launchers: C tests under a single-node Slurm (srun --mpi=pmix)" 600 bash .ci/slurm.sh

printf '\n=== summary\n'
for f in "${failures[@]+"${failures[@]}"}"; do
  case $f in "    "*) printf '%s\n' "$f" ;; "") ;; *) printf 'FAILED: %s\n' "$f" ;; esac
done
rm -rf "$logs"
[ "$skipped" -gt 0 ] && printf '%d check(s) skipped (see above)\n' "$skipped"
printf 'ci: %d passed, %d failed\n' "$passed" "$failed"
[ "$failed" -eq 0 ]
