#!/usr/bin/env python3
"""Tests of size_chart.py's case table (the chart itself needs matplotlib):
each case's fastest variant back to back and its same-size copy, as
fractions of the file's copy peak, across files."""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import size_chart  # noqa: E402


def row(variant, shape, b2b_frac, copy_gbps=None):
    r = {"case": "nchw_to_nhwc", "dtype": "float16", "shape": shape,
         "variant": variant, "bytes": 12845056, "b2b_frac_copy_peak": b2b_frac}
    if copy_gbps is not None:
        r["copy_b2b_GBps"] = copy_gbps
    return r


class SizeChartTest(unittest.TestCase):
    def test_fastest_variant_and_copy_per_case(self):
        with tempfile.TemporaryDirectory() as d:
            paths = []
            for name, rows in (
                    ("a.json", [row("vec16", [8, 512, 28, 28], 0.59, 2900.0),
                                row("tiled", [8, 512, 28, 28], 0.31, 2900.0)]),
                    ("b.json", [row("naive", [8, 512, 28, 28], 0.12, 2900.0),
                                row("vec16", [1, 2, 3, 4], 0.5)])):
                paths.append(os.path.join(d, name))
                with open(paths[-1], "w") as f:
                    json.dump({"copy_peak_GBps": 4000.0, "rows": rows}, f)
            got = size_chart.cases(paths)
        # The case without a same-size copy is left out.
        self.assertEqual(len(got), 1)
        op, dtype, shape, nbytes, best, copy = got[0]
        self.assertEqual((op, dtype, shape), ("nchw_to_nhwc", "float16",
                                              (8, 512, 28, 28)))
        self.assertEqual(nbytes, 12845056)
        self.assertAlmostEqual(best, 0.59)
        self.assertAlmostEqual(copy, 2900.0 / 4000.0)


if __name__ == "__main__":
    unittest.main()
