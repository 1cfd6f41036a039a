#!/usr/bin/env bash
# The C client (client.c) through switchyard's C API and through Open MPI's
# OSHMEM, in the same run: compiled with `switchyard cc` and with `oshcc`,
# run alternately (switchyard, OSHMEM, switchyard, OSHMEM, ...), then a table
# of the medians and their ratio. Optional, not part of CI; installs nothing.
#
# Usage: benches/oshmem/run.sh [-r RUNS] [-n PES] [-o DIR] [--smoke] [-- CLIENT ARGS]
#   -r RUNS  runs of each library (default 3)
#   -n PES   PEs per job (default 2; PE 0 works on PE 1)
#   -o DIR   where the programs and each run's output go (default: a new
#            temporary directory, printed)
#   --smoke  switchyard only, without Open MPI: compile the client with
#            `switchyard cc` and run it once with tiny counts (bounded: 60 s
#            per step), for CI; exits non-zero when either step fails
#   CLIENT ARGS go to the client (see client.c: -n, -r, -l, -s).
#
# Needs Open MPI with OSHMEM (Debian: apt-get install openmpi-bin
# libopenmpi-dev) and a release build of switchyard (cargo build --release
# -p switchyard-cli -p switchyard-shmem); $SWITCHYARD overrides the path of
# the `switchyard` binary. Both launchers pin one PE per core when there are
# enough cores (`switchyard run`'s default, `--bind-to core` for oshrun).
# oshrun also gets `--mca osc ^rdma` (Open MPI 4.1's MPI one-sided component
# crashes in finalize on a machine without RDMA; OSHMEM does not use it),
# `--oversubscribe` and, as root, `--allow-run-as-root`; $OSHRUN_ARGS adds
# more (e.g. `-x UCX_TLS=sm,self`).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
runs=3
pes=2
dir=
smoke=

die() {
    echo "run.sh: $*" >&2
    exit 2
}

while [ $# -gt 0 ]; do
    case "$1" in
    -r) runs=${2:?-r needs a count}; shift 2 ;;
    -n) pes=${2:?-n needs a count}; shift 2 ;;
    -o) dir=${2:?-o needs a directory}; shift 2 ;;
    --smoke) smoke=1; shift ;;
    --) shift; break ;;
    -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
    esac
done
case "$runs$pes" in *[!0-9]*) die "-r and -n take positive numbers" ;; esac
[ "$runs" -ge 1 ] && [ "$pes" -ge 2 ] || die "-r must be at least 1 and -n at least 2"

sy=${SWITCHYARD:-$repo/target/release/switchyard}
[ -x "$sy" ] ||
    die "$sy not found: build it with 'cargo build --release -p switchyard-cli -p switchyard-shmem' (or set SWITCHYARD)"
if [ -z "$smoke" ]; then
    for tool in oshcc oshrun; do
        command -v "$tool" >/dev/null ||
            die "$tool not found: install Open MPI with OSHMEM (Debian: apt-get install openmpi-bin libopenmpi-dev)"
    done
fi

if [ -z "$dir" ]; then
    dir=$(mktemp -d "${TMPDIR:-/tmp}/switchyard-oshmem.XXXXXX")
fi
mkdir -p "$dir"
echo "# programs and outputs in $dir"

cflags=(-O2 -Wall -Wextra)
if [ -n "$smoke" ]; then
    echo "+ $sy cc ${cflags[*]} -Werror -o $dir/client_sy client.c"
    timeout 60 "$sy" cc "${cflags[@]}" -Werror -o "$dir/client_sy" "$here/client.c" ||
        die "switchyard cc failed"
    echo "+ $sy run -n $pes -- $dir/client_sy -n 1000 -r 1 -l 1000 -s 8"
    timeout 60 "$sy" run -n "$pes" --timeout 50 -- "$dir/client_sy" -n 1000 -r 1 -l 1000 -s 8 ||
        die "the client failed under switchyard run"
    exit 0
fi

osh_args=(-np "$pes" --oversubscribe --mca osc '^rdma')
if [ "$pes" -le "$(nproc)" ]; then osh_args+=(--bind-to core); else osh_args+=(--bind-to none); fi
[ "$(id -u)" -eq 0 ] && osh_args+=(--allow-run-as-root)
# shellcheck disable=SC2206 # word splitting of the user's extra arguments is wanted
osh_args+=(${OSHRUN_ARGS:-})

echo "+ $sy cc ${cflags[*]} -o $dir/client_sy client.c"
"$sy" cc "${cflags[@]}" -o "$dir/client_sy" "$here/client.c"
echo "+ oshcc ${cflags[*]} -o $dir/client_osh client.c"
oshcc "${cflags[@]}" -o "$dir/client_osh" "$here/client.c"

# One job; its figures go to $dir/NAME.RUN and, on one line, to the terminal.
job() {
    local name=$1 run=$2 out="$dir/$1.$2"
    shift 2
    echo "+ $*" >&2
    if ! timeout 600 "$@" >"$out" 2>"$out.err"; then
        cat "$out.err" >&2
        die "$name run $run failed (output in $out)"
    fi
    printf '%-11s run %s:' "$name" "$run"
    awk '{ sub(/^\[[0-9]+\] /, "") } $1 == "@" && $2 != "timer" { printf " %s=%s", $2, $3 }' "$out"
    echo
}

for run in $(seq 1 "$runs"); do
    job switchyard "$run" "$sy" run -n "$pes" --timeout 600 --no-tag-output -- "$dir/client_sy" "$@"
    job oshmem "$run" oshrun "${osh_args[@]}" "$dir/client_osh" "$@"
done

# The table: per figure, the median over the runs of each library and the
# ratio switchyard / OSHMEM (a rate: higher is better; a latency: lower is).
awk -v runs="$runs" '
function med(impl, k,    n, i, j, t, a) {
    n = cnt[impl, k]
    for (i = 1; i <= n; i++) a[i] = val[impl, k, i]
    for (i = 2; i <= n; i++)
        for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
FNR == 1 { impl = FILENAME ~ /\/switchyard\.[0-9]+$/ ? "sy" : "osh" }
{ sub(/^\[[0-9]+\] /, "") }
$1 == "@" && $2 != "timer" {
    if (!($2 in unit)) { order[++n] = $2; unit[$2] = $4 }
    val[impl, $2, ++cnt[impl, $2]] = $3
}
END {
    printf "\nmedians of %d runs each (ratio = switchyard / OSHMEM)\n", runs
    printf "%-16s %-7s %12s %12s %8s  %s\n", "figure", "unit", "switchyard", "OSHMEM", "ratio", "better"
    for (i = 1; i <= n; i++) {
        k = order[i]
        s = med("sy", k); o = med("osh", k)
        rate = unit[k] ~ /\/s$/
        r = o > 0 ? s / o : 0
        better = s == o ? "=" : ((s > o) == rate ? "switchyard" : "OSHMEM")
        printf "%-16s %-7s %12.2f %12.2f %8.2f  %s\n", k, unit[k], s, o, r, better
    }
}' $(for r in $(seq 1 "$runs"); do echo "$dir/switchyard.$r" "$dir/oshmem.$r"; done)
