#!/usr/bin/env python3
"""Prints the medians of the last `cargo bench -p switchyard-benches` run, per
element (ns per select / per message / per frame) and as throughput, with each
result's ratio to its same-run baselines (above 1: faster than the baseline). Reads target/criterion/*/new/."""
import json, pathlib, sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "target/criterion")
rows = {}
for est in root.glob("**/new/estimates.json"):
    bench = json.loads((est.parent / "benchmark.json").read_text())
    median = json.loads(est.read_text())["median"]["point_estimate"]  # ns per iteration
    tp = bench.get("throughput") or {}
    rows[bench["full_id"]] = (median, tp)

BASELINE = {  # target -> baselines measured in the same run
    "select/bitmap/4096": ["select/hashmap/4096"],
    "select/bitmap/1M": ["select/hashmap/1M"],
    "select/matrix/4096": ["select/hashmap/4096"],
    "select/bitvec/4096": ["select/shift_twin/4096"],
    "select/bitvec_bits/4096": ["select/shift_twin/4096"],
    "select/bitvec_atomic/4096": ["select/shift_twin/4096"],
    "topology/health_flip/bitvec": ["topology/health_flip/atomic_rmw"],
}
for w in ("push_pop", "spsc", "spsc_batch32", "round_trip"):
    BASELINE[f"ring/switchyard/{w}"] = [f"ring/rtrb/{w}", f"ring/crossbeam_arrayqueue/{w}"]
for label in ("in_order", "reordered", "duplicates"):
    BASELINE[f"dedup/{label}/bitvec"] = [f"dedup/{label}/hand"]
for w in ("steady", "scan"):
    BASELINE[f"replay_table/{w}/heapless_deque"] = [f"replay_table/{w}/hand"]
BASELINE["rails/index/heapless_vec"] = ["rails/index/std_vec"]
BASELINE["verbs_batch/heapless_vec"] = ["verbs_batch/boxed_slice"]

print(f"{'benchmark':44} {'median':>14} {'throughput':>16} {'vs baseline':>12}")
for name in sorted(rows):
    median, tp = rows[name]
    if "Elements" in tp:
        per, unit = median / tp["Elements"], "ns/elem"
        thr = f"{tp['Elements'] / median * 1e3:.1f} M/s"
    elif "Bytes" in tp or "BytesDecimal" in tp:
        n = tp.get("Bytes", tp.get("BytesDecimal"))
        per, unit = median, "ns"
        thr = f"{n / median:.2f} GB/s"
    else:
        per, unit, thr = median, "ns", ""
    ratios = [
        f"{rows[b][0] / median:.2f}x vs {b.rsplit('/', 2)[-2]}"
        for b in BASELINE.get(name, [])
        if b in rows
    ]
    print(f"{name:44} {per:9.2f} {unit:7} {thr:>13}  {'; '.join(ratios)}")
