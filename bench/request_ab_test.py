#!/usr/bin/env python3
"""Tests of request_ab.py on requests-*.json folders written here."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                      "request_ab.py")


def row(op, transport, nbytes, concurrency, rps, p50_ms, kernel_s=None):
    return {"op": op, "transport": transport, "protocol": "native",
            "tensor_bytes": nbytes, "concurrency": concurrency,
            "requests_per_second": rps, "latency_ms": {"p50": p50_ms},
            "kernel_seconds": kernel_s}


def folder(root, name, rows_by_case):
    d = os.path.join(root, name)
    os.makedirs(d)
    for case, rows in rows_by_case.items():
        with open(os.path.join(d, f"requests-{case}.json"), "w") as f:
            json.dump({"mode": "service", "results": rows}, f)
    return d


class RequestAbTest(unittest.TestCase):
    def run_script(self, *args):
        return subprocess.run([sys.executable, SCRIPT, *args],
                              capture_output=True, text=True)

    def test_ratios_per_round_mean_and_p50(self):
        with tempfile.TemporaryDirectory() as t:
            # Round 1: b at 1.25x a; round 2 (order reversed): 0.8x. A case
            # only b's second round has is left out; so is a KServe row.
            a1 = folder(t, "a1", {"t1k": [
                row("echo", "inline", 1024, 1, 1000, 0.100),
                row("transpose", "inline", 1024, 1, 400, 0.300)]})
            b1 = folder(t, "b1", {"t1k": [
                row("echo", "inline", 1024, 1, 1000, 0.100),
                row("transpose", "inline", 1024, 1, 500, 0.200)]})
            extra = dict(row("transpose", "inline", 1024, 1, 1, 9.0),
                         protocol="kserve")
            b2 = folder(t, "b2", {"t1k": [
                row("echo", "inline", 1024, 1, 1100, 0.090),
                row("transpose", "inline", 1024, 1, 400, 0.220),
                row("transpose", "pipeline", 1024, 1, 900, 0.100), extra]})
            a2 = folder(t, "a2", {"t1k": [
                row("echo", "inline", 1024, 1, 1000, 0.110),
                row("transpose", "inline", 1024, 1, 500, 0.340)]})
            r = self.run_script(f"a={a1}", f"b={b1}", f"b={b2}", f"a={a2}")
            self.assertEqual(r.returncode, 0, r.stderr)
            lines = r.stdout.splitlines()
            self.assertIn("b / a, rounds 1-2", lines[0])
            self.assertEqual(len(lines), 4, r.stdout)  # head, rule, 2 cases
            self.assertIn("echo inline 1 KiB, conc. 1 (t1k)", lines[2])
            self.assertIn("| 1.000, 1.100 |", lines[2])
            op = lines[3]
            self.assertIn("transpose inline 1 KiB, conc. 1 (t1k)", op)
            self.assertIn("| 1.250, 0.800 | 1.000 (1 of 2) |", op)
            # Medians over rounds: a 300 and 340, b 200 and 220.
            self.assertTrue(op.endswith("| 320 / 210 |"), op)

    def test_kernel_times_when_the_rows_carry_them(self):
        with tempfile.TemporaryDirectory() as t:
            # b's kernel: 8 and 10 us over its rounds; a's: 4 (one round
            # has none). Echo has no kernel.
            runs = []
            for name, k in (("a1", 4e-6), ("b1", 8e-6), ("b2", 10e-6),
                            ("a2", None)):
                runs.append(f"{name[0]}=" + folder(t, name, {"t1k": [
                    row("echo", "inline", 1024, 1, 1000, 0.100),
                    row("transpose", "pipeline", 1024, 1, 500, 0.200, k)]}))
            r = self.run_script(*runs)
            self.assertEqual(r.returncode, 0, r.stderr)
            lines = r.stdout.splitlines()
            self.assertTrue(lines[0].endswith("| kernel us, a / b |"),
                            lines[0])
            self.assertTrue(lines[2].endswith("| 100 / 100 | - / - |"),
                            lines[2])
            self.assertTrue(lines[3].endswith("| 200 / 200 | 4.0 / 9.0 |"),
                            lines[3])

    def test_unequal_rounds_and_missing_files_are_refused(self):
        with tempfile.TemporaryDirectory() as t:
            rows = {"t1k": [row("echo", "inline", 1024, 1, 1000, 0.1)]}
            a1, b1, b2 = (folder(t, n, rows) for n in ("a1", "b1", "b2"))
            r = self.run_script(f"a={a1}", f"b={b1}", f"b={b2}")
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("b has 2 rounds, a has 1", r.stderr)
            r = self.run_script(f"a={a1}", f"b={t}")
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("no requests-*.json results", r.stderr)
            r = self.run_script(f"a={a1}")
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("two labels at least", r.stderr)


if __name__ == "__main__":
    unittest.main()
