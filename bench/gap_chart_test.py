#!/usr/bin/env python3
"""Tests of gap_chart.py's series (the chart itself needs matplotlib): per
size, the bytes moved, the best copy, the bytes at the peak and the faster
empty kernel, sorted by size."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gap_chart  # noqa: E402


class GapChartTest(unittest.TestCase):
    def test_series_per_size(self):
        data = {
            "peak_GBps": 4000.0,
            "empty": [{"early_start": False, "us": 0.9},
                      {"early_start": True, "us": 0.8}],
            "copy": [{"bytes_each_way": 4000000, "us": 3.0},
                     {"bytes_each_way": 1000000, "us": 1.4}],
        }
        got = gap_chart.series(data)
        self.assertEqual([r[0] for r in got], [2000000, 8000000])
        moved, us, at_peak, empty = got[1]
        self.assertEqual(us, 3.0)
        self.assertAlmostEqual(at_peak, 2.0)  # 8 MB at 4 TB/s
        self.assertEqual(empty, 0.8)


if __name__ == "__main__":
    unittest.main()
