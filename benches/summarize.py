#!/usr/bin/env python3
"""Prints the medians of the last `cargo bench -p switchyard-benches` run, per
element (ns per select / per message / per frame) and as throughput, with each
result's ratio to its same-run baseline. Reads target/criterion/*/new/."""
import json, pathlib, sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "target/criterion")
rows = {}
for est in root.glob("**/new/estimates.json"):
    bench = json.loads((est.parent / "benchmark.json").read_text())
    median = json.loads(est.read_text())["median"]["point_estimate"]  # ns per iteration
    tp = bench.get("throughput") or {}
    rows[bench["full_id"]] = (median, tp)

BASELINE = {  # target -> baseline measured in the same run
    "select/bitmap/4096": "select/hashmap/4096",
    "select/bitmap/1M": "select/hashmap/1M",
    "select/matrix/4096": "select/hashmap/4096",
    "ring/switchyard/spsc": "ring/crossbeam_arrayqueue/spsc",
    "ring/switchyard/spsc_batch32": "ring/crossbeam_arrayqueue/spsc",
}
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
    ratio = ""
    base = BASELINE.get(name)
    if base in rows:
        ratio = f"{rows[base][0] / median:.1f}x faster"
    print(f"{name:44} {per:9.2f} {unit:7} {thr:>13} {ratio:>14}")
