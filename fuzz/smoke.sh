#!/usr/bin/env bash
# Builds every fuzz target and runs each for ${FUZZ_SECONDS:-30} seconds.
# Exits non-zero when a target crashes (panic, sanitizer report, timeout, OOM);
# the input is left in artifacts/<target>/.
#
# Uses `cargo +nightly fuzz` when a nightly toolchain is installed, else
# `RUSTC_BOOTSTRAP=1 cargo fuzz` on the default toolchain.
set -euo pipefail
cd "$(dirname "$0")"

secs=${FUZZ_SECONDS:-30}

if ! command -v cargo-fuzz >/dev/null 2>&1; then
    echo "smoke.sh: cargo-fuzz is not installed (cargo install cargo-fuzz --locked)" >&2
    exit 2
fi
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    fuzz=(cargo +nightly fuzz)
else
    echo "smoke.sh: no nightly toolchain, using RUSTC_BOOTSTRAP=1 on $(rustc --version)"
    export RUSTC_BOOTSTRAP=1
    fuzz=(cargo fuzz)
fi

"${fuzz[@]}" build
mapfile -t targets < <("${fuzz[@]}" list)

failed=()
for t in "${targets[@]}"; do
    corpus=("corpus/$t")
    mkdir -p "corpus/$t"
    # Committed seeds are read too; new inputs go to corpus/<t> (the first dir).
    if [ -d "seeds/$t" ]; then
        corpus+=("seeds/$t")
    fi
    echo "== $t: ${secs}s"
    if ! "${fuzz[@]}" run "$t" "${corpus[@]}" -- -max_total_time="$secs"; then
        echo "!! $t crashed: input in artifacts/$t/, decode it with:" >&2
        echo "   ${fuzz[*]} fmt $t artifacts/$t/<file>" >&2
        failed+=("$t")
    fi
done

if [ ${#failed[@]} -ne 0 ]; then
    echo "smoke.sh: crashes in: ${failed[*]}" >&2
    exit 1
fi
echo "smoke.sh: ${#targets[@]} targets, ${secs}s each, no crash"
