#!/usr/bin/env bash
# Bounded smoke runs of the `switchyard` command: each must succeed, print what a
# user reads, and fail cleanly (exit 2, no panic) on bad input.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q -p switchyard-cli --bin switchyard
cargo build -q -p switchyard --examples
sy=target/debug/switchyard
out=$(mktemp -d)
# The shared-memory objects of other jobs on this machine (another checkout's
# tests) are theirs: only objects that appear during this run count as left
# behind.
shm_before=$(ls /dev/shm | grep '^switchyard-' || true)
trap 'rm -rf "$out"' EXIT

run() { echo "+ switchyard $*" >&2; timeout 60 "$sy" "$@"; }

run topo | tee "$out/topo.txt"
grep -q 'NEAR' "$out/topo.txt"
run topo --as 0 | tee "$out/as0.txt"
run topo --as 0 --down verbs >/dev/null
run topo docs/examples/topology.conf --pes-per-node 2 >/dev/null
run topo docs/examples/cluster.toml --json > "$out/topo.json"
python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$out/topo.json"

# topo --svg: the class matrix as a heat map (PE 3's routes on its row),
# well-formed XML with every PE and the route legend.
run topo docs/examples/topology.conf --pes-per-node 2 --as 3 --svg "$out/topo.svg" >/dev/null
python3 - "$out/topo.svg" <<'PY'
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
assert root.tag == "{http://www.w3.org/2000/svg}svg", root.tag
texts = ["".join(t.itertext()).strip() for t in root.iter("{http://www.w3.org/2000/svg}text")]
assert "PE0" in texts and any(t.startswith("PE3's routes") for t in texts), texts
PY
printf 'SwitchName=s0 Nodez=n[1-2]\n' > "$out/bad.conf"
set +e
timeout 60 "$sy" topo "$out/bad.conf" 2> "$out/err.txt"
rc=$?
set -e
cat "$out/err.txt"
[ "$rc" -eq 2 ] || { echo "expected exit 2 on a bad topology file, got $rc"; exit 1; }
grep -q ':1' "$out/err.txt" || { echo "the error does not name the line"; exit 1; }
if grep -q panicked "$out/err.txt"; then echo "panic on bad input"; exit 1; fi
# info: every transport, verbs unavailable here with a reason; JSON parses.
run info | tee "$out/info.txt"
grep -q 'verbs' "$out/info.txt"
run info --json > "$out/info.json"
python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$out/info.json"

# run: a real job (the counter example) and a failing one.
run run -n 4 --timeout 60 -- target/debug/examples/counter 2000 | tee "$out/counter.txt"
grep -q 'counter = 8000 (expected 8000)' "$out/counter.txt"
set +e
timeout 60 "$sy" run -n 2 --timeout 30 -- sh -c 'exit 3' 2> "$out/run-err.txt"
rc=$?
set -e
cat "$out/run-err.txt"
[ "$rc" -eq 3 ] || { echo "expected exit 3 from a failing rank, got $rc"; exit 1; }
grep -q 'exited with status 3' "$out/run-err.txt"

# perf: a short bounded run of every test, table and JSON.
run perf --iters 2000 | tee "$out/perf.txt"
grep -q 'put-lat' "$out/perf.txt" && grep -q 'cacheline' "$out/perf.txt"
# perf --plot: each latency test's percentile curve beside its baseline's.
run perf put-lat --iters 2000 --plot "$out/perf.svg" >/dev/null
python3 - "$out/perf.svg" <<'PY'
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
assert root.tag == "{http://www.w3.org/2000/svg}svg", root.tag
texts = ["".join(t.itertext()).strip() for t in root.iter("{http://www.w3.org/2000/svg}text")]
assert "put-lat beside its baseline cacheline" in texts, texts
assert any(t.startswith("put-lat 8 B (p50") for t in texts), texts
assert any(t.startswith("cacheline 8 B (p50") for t in texts), texts
PY
run perf put-bw --sizes 8..64K --iters 256 --json > "$out/perf.json"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["results"]' "$out/perf.json"
# perf over TCP on loopback (PEs forced onto TCP), with its raw-socket baselines.
run perf put-lat --transport tcp --iters 2000 | tee "$out/perf-tcp.txt"
grep -q 'tcp-pingpong' "$out/perf-tcp.txt" && grep -q 'put-lat' "$out/perf-tcp.txt"
run perf put-bw --transport tcp --sizes 4K..64K --iters 128 --json > "$out/perf-tcp.json"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["results"]' "$out/perf-tcp.json"
# perf rate tests over shm and TCP, each beside its same-run baseline; the
# workers and the baselines check the target saw every operation (exit 1 if not).
for t in put-rate get-rate atomic-rate; do
    for tr in shm tcp; do
        run perf "$t" --transport "$tr" --iters 2000 --json > "$out/$t-$tr.json"
        python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))["results"]
assert r, r
for x in r:
    m, b = x["result"]["bandwidth"]["msgs_per_s"], x["baseline"]["bandwidth"]["msgs_per_s"]
    assert m > 0 and b > 0 and abs(x["ratio"] - m / b) <= 1e-9 * x["ratio"], x
' "$out/$t-$tr.json"
    done
done
run perf put-rate --iters 2000 | tee "$out/perf-rate.txt"
grep -q 'raw-store' "$out/perf-rate.txt"
# perf channel tests (switchyard::channel) over shm and TCP, each beside its
# same-run baseline (raw-ring on shm; tcp-pingpong, tcp-stream over TCP); the
# workers check every message's stamp (exit 1 if one is wrong).
run perf channel-lat --iters 2000 | tee "$out/chan-lat.txt"
grep -q 'raw-ring' "$out/chan-lat.txt" && grep -q 'channel-lat' "$out/chan-lat.txt"
run perf channel-lat --transport tcp --iters 500 | tee "$out/chan-lat-tcp.txt"
grep -q 'tcp-pingpong' "$out/chan-lat-tcp.txt" && grep -q 'channel-lat' "$out/chan-lat-tcp.txt"
for tr in shm tcp; do
    run perf channel-bw --transport "$tr" --iters 2000 --json > "$out/chan-bw-$tr.json"
    python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))["results"]
assert r and r[0]["result"]["test"] == "channel-bw", r
assert r[0]["result"]["bandwidth"]["msgs_per_s"] > 0 and r[0]["baseline"]["bandwidth"]["msgs_per_s"] > 0, r
' "$out/chan-bw-$tr.json"
done
# perf broadcast-bw: PE 0 to 2 subscribers (3 PEs), under backpressure and
# drop, beside channel-bw in the same launch (and that beside the raw ring);
# the subscribers check every stamp (exit 1 if one is wrong).
run perf broadcast-bw --subscribers 2 --iters 2000 --json > "$out/bcast-bw.json"
python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["pes"] == 3, d
r = [(x["result"]["test"], x["baseline"]["test"]) for x in d["results"]]
assert r == [("channel-bw", "raw-ring"), ("broadcast-bw", "channel-bw"), ("broadcast-bw-drop", "channel-bw")], r
assert all(x["result"]["bandwidth"]["msgs_per_s"] > 0 and x["ratio"] > 0 for x in d["results"]), d
' "$out/bcast-bw.json"
# put-rate from 2 threads of PE 0, each on its own context, beside 1 thread
# in the same run (the workers check every thread's stream at the target).
run perf put-rate --threads 2 --size 8 --iters 2000 | tee "$out/perf-threads.txt"
grep -q '2 threads: .*x 1 thread' "$out/perf-threads.txt"
run perf atomic-rate --threads 2 --iters 2000 --json > "$out/perf-threads.json"
python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["threads"] == 2, d
one, two = (x["result"] for x in d["results"])
assert (one["threads"], two["threads"]) == (1, 2) and two["thread_ratio"] > 0, d
' "$out/perf-threads.json"
# A rate test's sizes are 1 to 64 bytes: exit 2 with the reason, no panic.
set +e
timeout 60 "$sy" perf get-rate --size 4K 2> "$out/rate-err.txt"
rc=$?
set -e
cat "$out/rate-err.txt"
[ "$rc" -eq 2 ] || { echo "expected exit 2 on a rate size out of range, got $rc"; exit 1; }
grep -q '1 to 64 bytes' "$out/rate-err.txt"
if grep -q panicked "$out/rate-err.txt"; then echo "panic on bad input"; exit 1; fi
# perf over verbs: without a usable RDMA port, exit 1 with the probe's reason
# (never a panic); with one, a short run of every test.
if "$sy" info --json | python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(0 if d["transports"][2]["available"] else 1)'; then
    run perf put-lat --transport verbs --iters 2000 >/dev/null
else
    set +e
    timeout 60 "$sy" perf put-lat --transport verbs >/dev/null 2>"$out/verbs.err"; rc=$?
    set -e
    cat "$out/verbs.err"
    [ "$rc" -eq 1 ] && grep -q 'transport verbs is not available: ' "$out/verbs.err" \
        && ! grep -q panicked "$out/verbs.err" || { echo "perf --transport verbs: rc $rc"; exit 1; }
fi
# stat: one snapshot of a running 2-PE job (stats_hold holds still between
# its phases), its JSON (with its channel's counts) and Prometheus text;
# then nothing once it ended.
SY_GO="$out/go" SY_END="$out/end" timeout 60 "$sy" run -n 2 --timeout 50 -- \
    target/debug/examples/stats_hold 500 5 40 > "$out/hold.txt" &
hold=$!
for _ in $(seq 1 600); do [ "$(grep -c 'phase1 job' "$out/hold.txt")" -eq 2 ] && break; sleep 0.1; done
job=$(grep -m1 -o 'phase1 job [0-9a-f]*' "$out/hold.txt" | awk '{print $3}')
touch "$out/go"
for _ in $(seq 1 600); do [ "$(grep -c 'phase2' "$out/hold.txt")" -eq 2 ] && break; sleep 0.1; done
run stat "$job" --once | tee "$out/stat.txt"
grep -q "job $job: 2 of 2 PEs" "$out/stat.txt"
run stat "$job" --json > "$out/stat.json"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert len(d["jobs"][0]["pes"]) == 2, d' "$out/stat.json"
python3 -c '
import json, sys
pes = json.load(open(sys.argv[1]))["jobs"][0]["pes"]
got = sorted((p["header"]["rank"], c["role"], c["sent"], c["received"]) for p in pes for c in p["channels"])
assert got == [(0, "producer", 40, 0), (1, "consumer", 0, 40)], got
' "$out/stat.json"
run stat --prometheus > "$out/stat.prom"
python3 -c '
import sys
want = "switchyard_peer_ops_total{job_id=\"%s\",pe=\"0\",peer=\"1\",transport=\"shm\"} " % sys.argv[2]
v = [float(l.split()[-1]) for l in open(sys.argv[1]) if l.startswith(want)]
assert v and v[0] >= 505, v
' "$out/stat.prom" "$job"
touch "$out/end"
wait "$hold"
set +e
timeout 60 "$sy" stat "$job" --once >/dev/null 2>&1; rc=$?
set -e
[ "$rc" -eq 1 ] || { echo "stat: job $job still shown after its end (rc $rc)"; exit 1; }

# trace: a known put sequence over TCP (sy_pe trace-puts), decoded from the
# dumps at both ends; a killed rank leaves dumps the launcher names.
cargo build -q -p switchyard-tests --bin sy_pe
mkdir -p "$out/job" "$out/kill"
SWITCHYARD_TRANSPORTS=tcp SWITCHYARD_TRACE=all SWITCHYARD_JOB_DIR="$out/job" \
    run run -n 2 --timeout 60 -- target/debug/sy_pe trace-puts 8 >/dev/null
run trace --join "$out/job" | tee "$out/trace.txt"
grep -q ' put .* 0->1 .* 1008 ' "$out/trace.txt"
run trace --join --json "$out/job" > "$out/trace.json"
python3 -c '
import json, sys
ops = [json.loads(l) for l in open(sys.argv[1])]
puts = [o for o in ops if o["op"] == "put" and o["len"] > 1000]
assert [o["len"] for o in puts] == list(range(1001, 1009)), puts
assert all(o["initiator"] and len(o["target"]) == 1 for o in puts), puts
' "$out/trace.json"
set +e
SWITCHYARD_TRANSPORTS=tcp SWITCHYARD_TRACE=all SWITCHYARD_JOB_DIR="$out/kill" \
    timeout 60 "$sy" run -n 2 --timeout 60 -- target/debug/sy_pe fail 1 kill 2> "$out/kill.err"
rc=$?
set -e
cat "$out/kill.err"
[ "$rc" -ne 0 ] && grep -q "route traces of job .*: $out/kill" "$out/kill.err" \
    || { echo "a killed rank: rc $rc, no route trace named"; exit 1; }
run trace "$out/kill" --last 16 >/dev/null
set +e
timeout 60 "$sy" trace not-a-job-zz 2> "$out/trace-err.txt"; rc=$?
set -e
[ "$rc" -eq 1 ] && ! grep -q panicked "$out/trace-err.txt" || { echo "trace of a bad source: rc $rc"; exit 1; }
left=$(comm -13 <(printf '%s\n' "$shm_before" | sort) <(ls /dev/shm | grep '^switchyard-' | sort) | grep . || true)
if [ -n "$left" ]; then echo "shared-memory objects left behind:"; echo "$left"; exit 1; fi
# sim: a simulated cluster in network namespaces (root and `ip netns` only).
if [ "$(id -u)" -eq 0 ] && ip netns list >/dev/null 2>&1; then
    simns() { ip netns list | awk '{print $1}' | grep -E '^smk-(fab|rt|n[0-9]+)$' || true; }
    timeout 60 "$sy" sim down --name smk >/dev/null
    trap 'timeout 60 "$sy" sim down --name smk >/dev/null 2>&1; rm -rf "$out"' EXIT
    run sim up --name smk --rails 2 | tee "$out/sim-up.txt"
    [ "$(simns | wc -l)" -eq 6 ] || { echo "expected 6 namespaces of sim smk"; simns; exit 1; }
    run sim status --name smk | grep -q '10.101.1.2 up'
    run sim link down 3 1 --name smk
    run sim status --name smk | grep -q '10.101.1.2 cut'
    run sim status --name smk --json > "$out/sim.json"
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert len(d["nodes"]) == 4' "$out/sim.json"
    run sim link up 3 --name smk
    run sim status --name smk | grep -q '10.101.1.2 up'
    # A rate test between two nodes, its baseline between their namespaces.
    run perf put-rate --sim smk --iters 2000 --json > "$out/sim-rate.json"
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"]; assert r and r[0]["baseline"]["test"] == "tcp-records" and r[0]["ratio"], r' "$out/sim-rate.json"
    run run --sim smk -n 4 --timeout 60 -- sh -c 'echo $SWITCHYARD_NODE_ID $SWITCHYARD_TCP_ADDRS' \
        | tee "$out/sim-run.txt"
    grep -q '^\[3\] 1 10.100.0.2,10.101.0.2$' "$out/sim-run.txt"
    run sim down --name smk
    [ -z "$(simns)" ] || { echo "namespaces left behind by sim down:"; simns; exit 1; }
    [ ! -e /run/switchyard/sim/smk.json ] || { echo "state file left behind"; exit 1; }
    run sim down --name smk | grep -q 'nothing to remove'
    trap 'rm -rf "$out"' EXIT
else
    echo "sim smoke: skipped (needs root and ip netns)"
fi

# The C client of the OSHMEM comparison (benches/oshmem), compiled with
# `switchyard cc` and run once with tiny counts; it checks what the target
# received. The comparison itself is optional (it needs Open MPI).
cargo build -q -p switchyard-shmem
SWITCHYARD="$PWD/$sy" timeout 180 benches/oshmem/run.sh --smoke > "$out/oshmem.txt"
grep -q '@ put_rate.8 ' "$out/oshmem.txt" || { cat "$out/oshmem.txt"; echo "the C client printed no put rate"; exit 1; }
echo "tool smoke: ok"
