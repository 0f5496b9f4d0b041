#!/usr/bin/env python3
"""Tests of request_targets.py on requests-*.json files written here, with
figures chosen to fall on each side of every target."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                      "request_targets.py")


def row(op, transport, concurrency, rps, p50_ms, echo_rps, echo_p50_ms,
        **extra):
    r = {"op": op, "transport": transport, "concurrency": concurrency,
         "protocol": "native", "requests_per_second": rps,
         "latency_ms": {"p50": p50_ms}, "echo_rps": echo_rps,
         "echo_p50_ms": echo_p50_ms,
         "vs_echo": {"requests_per_second": rps / echo_rps}}
    r.update(extra)
    return r


def write(directory, case, rows):
    with open(os.path.join(directory, f"requests-{case}.json"), "w") as f:
        json.dump({"mode": "service", "results": rows}, f)


def table(stdout):
    """(the target's first 12 characters, the case) -> (figure, verdict)"""
    cells = {}
    for line in stdout.splitlines():
        c = [x.strip() for x in line.strip().strip("|").split("|")]
        if len(c) == 4 and c[0] not in ("target", "---"):
            cells[(c[0][:12], c[1])] = (c[2], c[3])
    return cells


class RequestTargetsTest(unittest.TestCase):
    def run_script(self, directory):
        return subprocess.run([sys.executable, SCRIPT, directory],
                              capture_output=True, text=True)

    def test_each_side_of_each_target(self):
        with tempfile.TemporaryDirectory() as d:
            write(d, "t64k", [
                row("echo", "inline", 1, 4000, 0.200, 4000, 0.200),
                # 30 us over Echo at 0.90x: both parts hold.
                row("transpose", "inline", 1, 3600, 0.230, 4000, 0.200),
                # 0.90x, but 50 us over Echo.
                row("transpose", "handle", 1, 3600, 0.250, 4000, 0.200),
                row("transpose", "pipeline", 1, 3900, 0.215, 4000, 0.200),
                row("transpose", "inline", 64, 24000, 2.0, 25000, 2.0,
                    mean_batch=2.5, rounds=3,
                    vs_echo_rounds=[0.96, 0.91, 0.97]),
                row("transpose", "handle", 64, 30300, 2.0, 25000, 2.0),
                row("transpose", "pipeline", 64, 29000, 2.0, 25000, 2.0),
            ])
            write(d, "t1k", [
                row("echo", "inline", 1, 6000, 0.180, 6000, 0.180),
                row("echo", "inline", 64, 30000, 2.0, 30000, 2.0,
                    server_cpu_us=150, client_cpu_us=250),
                row("transpose", "handle", 1, 5000, 0.219, 6000, 0.180),
                row("transpose", "pipeline", 1, 5000, 0.221, 6000, 0.180),
                row("transpose", "handle", 64, 27000, 2.0, 30000, 2.0,
                    server_cpu_us=190.4, client_cpu_us=260),
                row("transpose", "pipeline", 64, 30000, 2.0, 30000, 2.0),
            ])
            write(d, "t16m", [
                row("transpose", "handle", 64, 25000, 2.0, 1, 1,
                    kernel_seconds=30e-6, busy=0.75),
                row("transpose", "pipeline", 64, 25000, 2.0, 1, 1,
                    kernel_seconds=11e-6, busy=0.275),
            ])
            write(d, "ln16", [
                row("gelu-ln", "handle", 256, 50000, 5.0, 30000, 5.0,
                    mean_batch=9.0),
                row("gelu-ln", "pipeline", 256, 50000, 5.0, 30000, 5.0,
                    mean_batch=2.0),
            ])
            result = self.run_script(d)
            self.assertEqual(result.returncode, 0, result.stderr)
            lines = table(result.stdout)
            want = {
                ("p50 <= Echo ", "64 KiB inline, conc. 1"): "PASS",
                ("p50 <= Echo ", "64 KiB handle, conc. 1"): "MISS",
                (">= 0.95x Ech", "64 KiB inline, conc. 64"): "PASS",
                (">= 1.0x the ", "64 KiB handle, conc. 64"): "PASS",
                (">= 1.0x the ", "64 KiB pipeline, conc. 64"): "MISS",
                (">= 1.0x the ", "1 KiB handle, conc. 64"): "MISS",
                (">= 1.0x the ", "1 KiB pipeline, conc. 64"): "PASS",
                ("p50 <= 1 KiB", "64 KiB pipeline, conc. 1"): "PASS",
                ("p50 <= 1 KiB", "1 KiB handle, conc. 1"): "PASS",
                ("p50 <= 1 KiB", "1 KiB pipeline, conc. 1"): "MISS",
                ("GPU >= 70% b", "16 MiB handle, conc. 64"): "PASS",
                ("GPU >= 70% b", "16 MiB pipeline, conc. 64"): "MISS",
                (">= 3x 13-16k", "GELU-LN [16,1024] handle, conc. 256"):
                    "PASS",
                (">= 3x 13-16k", "GELU-LN [16,1024] pipeline, conc. 256"):
                    "MISS",
                (">= 3x 13-16k", "transpose 128x128 handle, conc. 256"): "-",
            }
            for key, state in want.items():
                self.assertIn(key, lines, result.stdout)
                self.assertEqual(lines[key][1], state, (key, lines[key]))
            self.assertEqual(
                lines[("p50 <= Echo ", "64 KiB handle, conc. 1")][0],
                "p50 250 us (Echo 200, +50); 0.900x")
            self.assertEqual(
                lines[(">= 1.0x the ", "64 KiB handle, conc. 64")][0],
                "30300 req/s, 1.010x")
            # Rounds: the median's range beside it.
            self.assertEqual(
                lines[(">= 0.95x Ech", "64 KiB inline, conc. 64")][0],
                "0.960x (rounds 0.910-0.970) (2.50 per launch)")
            self.assertEqual(
                lines[(">= 1.0x the ", "1 KiB handle, conc. 64")][0],
                "27000 req/s, 0.900x; server CPU 190 us a request (Echo 150)")
            self.assertIn(
                "1 KiB Echo at concurrency 64: 30000 req/s, p50 2000 us; CPU "
                "a request: server 150 us, client 250 us (12.0 cores at this "
                "rate).", result.stdout)
            self.assertIn("1 KiB Echo at concurrency 1: 6000 req/s, p50 180 "
                          "us.", result.stdout)

    def test_rows_paired_with_a_1k_echo_of_their_rounds(self):
        with tempfile.TemporaryDirectory() as d:
            # The 1 KiB case's Echo (30000 req/s, p50 180 us) would fail
            # the handle row and pass the pipeline one; the 1 KiB Echo of
            # their own rounds decides instead.
            paired = {"floor_bytes": 1024, "rounds": 3}
            write(d, "t64k", [
                row("echo", "inline", 64, 25000, 2.0, 25000, 2.0,
                    tensor_bytes=65536, **paired, vs_floor=0.8,
                    floor_rps=31250, floor_p50_ms=1.9),
                row("echo", "inline", 64, 31250, 1.9, 25000, 2.0,
                    tensor_bytes=1024, **paired, vs_floor=1.0,
                    floor_rps=31250, floor_p50_ms=1.9),
                row("transpose", "handle", 64, 29000, 2.0, 25000, 2.0,
                    **paired, vs_floor=1.02, floor_rps=28400,
                    vs_floor_rounds=[0.98, 1.02, 1.05]),
                row("transpose", "pipeline", 64, 31000, 2.0, 25000, 2.0,
                    **paired, vs_floor=0.97, floor_rps=31950,
                    vs_floor_rounds=[0.97, 0.96, 0.99]),
                row("transpose", "handle", 1, 4000, 0.235, 4000, 0.200,
                    **paired, vs_floor=0.8, floor_p50_ms=0.190),
                row("transpose", "pipeline", 1, 4000, 0.235, 4000, 0.200,
                    **paired, vs_floor=0.8, floor_p50_ms=0.200),
            ])
            write(d, "t1k", [
                row("echo", "inline", 1, 6000, 0.180, 6000, 0.180),
                row("echo", "inline", 64, 30000, 2.0, 30000, 2.0),
            ])
            result = self.run_script(d)
            self.assertEqual(result.returncode, 0, result.stderr)
            cells = table(result.stdout)
            self.assertEqual(
                cells[(">= 1.0x the ", "64 KiB handle, conc. 64")],
                ("29000 req/s, 1.020x (rounds 0.980-1.050)", "PASS"))
            self.assertEqual(
                cells[(">= 1.0x the ", "64 KiB pipeline, conc. 64")],
                ("31000 req/s, 0.970x (rounds 0.960-0.990)", "MISS"))
            # p50 235 us: 45 over a 190 us floor, 35 over a 200 us one.
            self.assertEqual(
                cells[("p50 <= 1 KiB", "64 KiB handle, conc. 1")],
                ("p50 235 us (Echo 190, +45)", "MISS"))
            self.assertEqual(
                cells[("p50 <= 1 KiB", "64 KiB pipeline, conc. 1")],
                ("p50 235 us (Echo 200, +35)", "PASS"))

    def test_a_directory_without_the_cases_is_an_error(self):
        with tempfile.TemporaryDirectory() as d:
            result = self.run_script(d)
            self.assertNotEqual(result.returncode, 0)
            self.assertIn("no requests-*.json", result.stderr)


if __name__ == "__main__":
    unittest.main()
