#!/usr/bin/env python3
"""Tests of kserve_compare.py on files written here: the op row (Echo's for
identity) against perf_analyzer's last CSV row, the ratio, the cases below
the target, and exit 1 when a case lacks its perf_analyzer file."""
import contextlib
import io
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kserve_compare  # noqa: E402

CSV_HEAD = "Concurrency,Inferences/Second,Client Send,p50 latency,p90 latency\n"


def write_case(d, model, size, conc, native_rps, v2_rps, v2=True, round=""):
    base = os.path.join(d, f"kserve-{model}-{size}-{conc}")
    rows = [{"op": "echo", "requests_per_second": 9000.0, "latency_ms": {"p50": 0.1},
             "errors": 0},
            {"op": "transpose", "requests_per_second": native_rps,
             "latency_ms": {"p50": 0.2}, "errors": 0}]
    with open(base + f"-native{round}.json", "w") as f:
        json.dump({"results": rows}, f)
    if v2:
        with open(base + f"-v2{round}.csv", "w") as f:
            f.write(CSV_HEAD + f"{conc},{v2_rps},10,250,300\n")


def run(d):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = kserve_compare.main(d)
    return code, buf.getvalue()


class KserveCompareTest(unittest.TestCase):
    def test_ratios_and_targets(self):
        with tempfile.TemporaryDirectory() as d:
            write_case(d, "transpose", 65536, 1, 4000.0, 3900.0)
            write_case(d, "transpose", 16777216, 64, 1000.0, 800.0)
            # identity is compared with the Echo row (9000).
            write_case(d, "identity", 65536, 1, 4000.0, 9450.0)
            code, text = run(d)
        self.assertEqual(code, 0)
        lines = [l for l in text.splitlines() if l.startswith("| ")]
        self.assertIn("| identity | 64 KiB | 1 | 9000 (100) | 9450 (250) | "
                      "1.050x | - |", lines)
        self.assertIn("| transpose | 64 KiB | 1 | 4000 (200) | 3900 (250) | "
                      "0.975x | - |", lines)
        self.assertIn("0.800x", text)
        self.assertIn("below 0.95x: transpose 16 MiB x64", text)
        # identity first, then transpose by size.
        self.assertLess(text.index("| identity"), text.index("| transpose"))

    def test_best_round_of_each_side(self):
        with tempfile.TemporaryDirectory() as d:
            write_case(d, "gemm", 65536, 1, 4000.0, 3000.0)
            write_case(d, "gemm", 65536, 1, 3500.0, 3900.0, round="-2")
            code, text = run(d)
        self.assertEqual(code, 0)
        self.assertIn("| gemm | 64 KiB | 1 | 4000 (200) | 3900 (250) | "
                      "0.975x | - |", text)

    def test_same_client_kserve_rows(self):
        # coalesce-bench's own v2 run (--protocol=kserve: native Echo, the
        # identity model, the op): its best round over the native side's.
        with tempfile.TemporaryDirectory() as d:
            base = os.path.join(d, "kserve-gemm-65536-1")
            for rnd, nat, same in (("", 4000.0, 3600.0), ("-2", 3000.0, 3800.0)):
                write_case(d, "gemm", 65536, 1, nat, 3900.0, round=rnd)
                rows = [
                    {"op": "echo", "protocol": "native",
                     "requests_per_second": 9000.0,
                     "latency_ms": {"p50": 0.1}, "errors": 0},
                    {"op": "echo", "protocol": "kserve",
                     "requests_per_second": 8000.0,
                     "latency_ms": {"p50": 0.1}, "errors": 0},
                    {"op": "gemm", "protocol": "kserve",
                     "requests_per_second": same,
                     "latency_ms": {"p50": 0.3}, "errors": 0}]
                with open(base + f"-benchv2{rnd}.json", "w") as f:
                    json.dump({"results": rows}, f)
            code, text = run(d)
        self.assertEqual(code, 0)
        self.assertIn("| gemm | 64 KiB | 1 | 4000 (200) | 3900 (250) | "
                      "0.975x | 0.950x (3800) |", text)

    def test_missing_perf_analyzer_file_fails(self):
        with tempfile.TemporaryDirectory() as d:
            write_case(d, "gemm", 65536, 64, 4000.0, 0, v2=False)
            code, text = run(d)
        self.assertEqual(code, 1)
        self.assertIn("| gemm | 64 KiB | 64 | 4000 (200) | - | - | - |", text)


if __name__ == "__main__":
    unittest.main()
