#!/usr/bin/env bash
# Bounded smoke runs of the `switchyard` command: each must succeed, print what a
# user reads, and fail cleanly (exit 2, no panic) on bad input.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q -p switchyard --bin switchyard
sy=target/debug/switchyard
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

run() { echo "+ switchyard $*" >&2; timeout 60 "$sy" "$@"; }

run topo | tee "$out/topo.txt"
grep -q 'NEAR' "$out/topo.txt"
run topo --as 0 | tee "$out/as0.txt"
run topo --as 0 --down verbs >/dev/null
run topo docs/examples/topology.conf --pes-per-node 2 >/dev/null
run topo docs/examples/cluster.toml --json > "$out/topo.json"
python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$out/topo.json"

printf 'SwitchName=s0 Nodez=n[1-2]\n' > "$out/bad.conf"
set +e
timeout 60 "$sy" topo "$out/bad.conf" 2> "$out/err.txt"
rc=$?
set -e
cat "$out/err.txt"
[ "$rc" -eq 2 ] || { echo "expected exit 2 on a bad topology file, got $rc"; exit 1; }
grep -q ':1' "$out/err.txt" || { echo "the error does not name the line"; exit 1; }
if grep -q panicked "$out/err.txt"; then echo "panic on bad input"; exit 1; fi
echo "tool smoke: ok"
