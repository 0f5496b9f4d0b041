#!/usr/bin/env python3
"""Tests of ab_report.py on coalesce-bench JSON files written here: the best
of each build's rounds, the ratios to the first build, FAIL and the exit
status where a build's check failed, and the same-size copy table."""
import contextlib
import io
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ab_report  # noqa: E402


def row(us, b2b, check="ok", copy_b2b=None):
    r = {"op": "transpose", "case": "transpose", "dtype": "bfloat16",
         "shape": [1, 4096, 4096], "variant": "transpose.cuda.tma",
         "median_us": us, "b2b_us": b2b, "frac_copy_peak": 0.5,
         "b2b_frac_copy_peak": 0.6, "check": check}
    if copy_b2b is not None:
        # 64 MiB moved: b2b_GBps over a 4000 GB/s peak.
        r.update(copy_us=copy_b2b + 2, copy_b2b_us=copy_b2b,
                 copy_b2b_GBps=2 * 33554432 / copy_b2b / 1e3)
    return r


class AbReportTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def write(self, name, rows):
        path = os.path.join(self.dir.name, name)
        with open(path, "w") as f:
            json.dump({"copy_peak_GBps": 4000.0, "rows": rows}, f)
        return path

    def report(self, *args):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), \
                contextlib.redirect_stderr(io.StringIO()):
            rc = ab_report.main(["ab_report.py", *args])
        return rc, out.getvalue()

    def cells(self, text, first):
        for line in text.splitlines():
            if line.startswith(f"| {first} |"):
                return [c.strip() for c in line.strip("|").split("|")]
        self.fail(f"no row starting {first!r} in:\n{text}")

    def test_best_rounds_and_ratios_to_the_first_build(self):
        base = [self.write("b1.json", [row(21.0, 18.6, copy_b2b=17.8)]),
                self.write("b2.json", [row(20.8, 18.9, copy_b2b=17.6)])]
        new = self.write("n1.json", [row(20.6, 17.1, copy_b2b=17.2)])
        rc, text = self.report(f"base={base[0]}", f"new={new}",
                               f"base={base[1]}")
        self.assertEqual(rc, 0)
        c = self.cells(text, "transpose")
        # op dtype shape variant | base us, b2b, peak | new us, b2b, peak,
        # ratio, ratio b2b
        self.assertEqual(c[3], "tma")
        self.assertEqual(c[4:6], ["20.8", "18.6"])
        self.assertEqual(c[7:9], ["20.6", "17.1"])
        self.assertEqual(c[10:12], [f"{20.6 / 20.8:.3f}", f"{17.1 / 18.6:.3f}"])
        copies = text.split("Same-size copy")[1]
        c = self.cells(copies, "transpose")
        self.assertEqual(c[3:5], ["19.6", "17.6"])
        self.assertEqual(c[5], f"{2 * 33554432 / 17.6 / 1e3 / 4000:.3f}")
        self.assertEqual(c[6:8], ["19.2", "17.2"])
        self.assertEqual(c[9], f"{17.2 / 17.6:.3f}")

    def test_a_failed_check_marks_the_build_and_fails(self):
        base = self.write("b.json", [row(21.0, 18.6)])
        bad = self.write("x.json", [row(10.0, 9.0, check="FAIL: mismatch")])
        rc, text = self.report(f"base={base}", f"bad={bad}")
        self.assertEqual(rc, 1)
        self.assertIn("FAIL", self.cells(text, "transpose")[9])
        # Files without same-size copies print no copy table.
        self.assertNotIn("Same-size copy", text)


if __name__ == "__main__":
    unittest.main()
