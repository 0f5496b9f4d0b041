#!/usr/bin/env python3
"""Runs select_benchmark and fails if a cache-hit selection costs 2 us or
more (the selection cost bound), printing what it measured.

    check_select_benchmark.py PATH_TO_select_benchmark
"""
import json
import subprocess
import sys

BOUND_NS = 2000.0

out = subprocess.run([sys.argv[1], "--benchmark_format=json",
                      "--benchmark_min_time=0.2",
                      "--benchmark_repetitions=3",
                      "--benchmark_report_aggregates_only=true"],
                     check=True, capture_output=True, text=True).stdout
rows = json.loads(out)["benchmarks"]
ok = True
for r in rows:
    if r.get("aggregate_name") != "median":
        continue
    ns = r["real_time"] if r["time_unit"] == "ns" else r["real_time"] * {
        "us": 1e3, "ms": 1e6}[r["time_unit"]]
    print(f"{r['run_name']}: {ns:.0f} ns per selection (median of 3)")
    if r["run_name"] == "BM_SelectCacheHit" and ns >= BOUND_NS:
        ok = False
print("cache-hit selection", "under" if ok else "NOT under", "2 us")
sys.exit(0 if ok else 1)
