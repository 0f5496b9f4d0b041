#!/usr/bin/env python3
"""Tests of request_profile.py timeline on an Nsight Systems SQLite export
written here: three requests, each received on gRPC's thread, handed to a
scheduler thread that launches, waits and answers, with and without the
CUDA trace. The times are chosen so that every median is known."""
import os
import sqlite3
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                      "request_profile.py")
GRPC, WORKER = 1, 2
STRINGS = {1: "futex", 2: "recvmsg", 3: "sendmsg",
           4: "coalesce::Scheduler::WorkerLoop()", 5: "gpr_cv_wait",
           6: "cudaLaunchKernel_v7000", 7: "cudaEventSynchronize_v3020",
           8: "cuKernelGetName"}
WORKER_WAIT, GRPC_WAIT, NO_CHAIN = 10, 11, 0


def request_cuda_calls(t, tid, gate_us, launch_us):
    """One request's CUDA calls from t: the gate's launch, a kernel name
    lookup (left out of the timeline), the op's launch, the 10 us wait."""
    a = t + gate_us * 1_000
    b = a + 1_000 + launch_us * 1_000
    return [(t, a, tid, 6), (a + 500, a + 600, tid, 8), (a + 1_000, b, tid, 6),
            (b + 1_000, b + 11_000, tid, 7)]


def write_db(path, os_calls, cuda_calls, chains=()):
    """A trace's tables as nsys exports them; cuda_calls None: no CUDA
    trace."""
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE StringIds (id INTEGER, value TEXT)")
    db.executemany("INSERT INTO StringIds VALUES (?, ?)", STRINGS.items())
    db.execute("CREATE TABLE OSRT_CALLCHAINS (id INTEGER, symbol INTEGER, "
               "stackDepth INTEGER)")
    db.executemany("INSERT INTO OSRT_CALLCHAINS VALUES (?, ?, ?)", chains)
    db.execute("CREATE TABLE OSRT_API (start INTEGER, end INTEGER, "
               "globalTid INTEGER, nameId INTEGER, callchainId INTEGER)")
    db.executemany("INSERT INTO OSRT_API VALUES (?, ?, ?, ?, ?)", os_calls)
    if cuda_calls is not None:
        db.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, "
                   "end INTEGER, globalTid INTEGER, nameId INTEGER)")
        db.executemany(
            "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?)",
            cuda_calls)
    db.commit()
    db.close()


def write_direct_trace(path):
    """Two Echo requests, then three transposes run directly on gRPC's
    thread: received, launched, waited for and answered there."""
    os_calls, cuda_calls = [], []
    for r in range(2):
        t = (r + 1) * 1_000_000
        os_calls += [(t, t + 5_000, GRPC, 2, NO_CHAIN),
                     (t + 25_000, t + 31_000, GRPC, 3, NO_CHAIN)]
    for r in range(3):
        t = (r + 3) * 1_000_000
        # A second, empty recvmsg: the request is the last one read.
        os_calls += [(t, t + 5_000, GRPC, 2, NO_CHAIN),
                     (t + 6_000, t + 7_000, GRPC, 2, NO_CHAIN),
                     (t + 90_000, t + 90_000 + 5_000 * (r + 1), GRPC, 3,
                      NO_CHAIN)]
        cuda_calls += request_cuda_calls(t + 37_000, GRPC, 9, 5)
    write_db(path, os_calls, cuda_calls)


def write_trace(path, cuda):
    os_calls, cuda_calls = [], []
    for r in range(3):
        t = (r + 1) * 1_000_000
        # gRPC's thread: the request arrives, a short futex wakes the
        # worker, then it sleeps.
        os_calls += [(t, t + 5_000, GRPC, 2, NO_CHAIN),
                     (t + 30_000, t + 31_000, GRPC, 1, NO_CHAIN),
                     (t + 32_000, t + 900_000, GRPC, 1, GRPC_WAIT)]
        # The worker: asleep until the wake, then CUDA calls, the answer.
        os_calls += [(t - 900_000, t + 40_000, WORKER, 1, WORKER_WAIT),
                     (t + 100_000, t + 100_000 + 10_000 * (r + 1), WORKER, 3,
                      NO_CHAIN)]
        cuda_calls += request_cuda_calls(t + 50_000, WORKER, 10, 4)
    write_db(path, os_calls, cuda_calls if cuda else None,
             [(WORKER_WAIT, 4, 1), (GRPC_WAIT, 5, 1)])


class TimelineTest(unittest.TestCase):
    def run_timeline(self, cuda, direct=False):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "trace.sqlite")
            if direct:
                write_direct_trace(path)
            else:
                write_trace(path, cuda)
            out = subprocess.run([sys.executable, SCRIPT, "timeline", path],
                                 capture_output=True, text=True, check=True)
        return out.stdout

    def test_medians_of_each_step(self):
        out = self.run_timeline(cuda=True)
        self.assertIn("3 responses sent by scheduler threads", out)
        self.assertRegex(out, r"recvmsg end -> scheduler thread awake +35\.0 "
                         r"us \(the wake: 10\.0 us\)")
        self.assertRegex(out, r"awake -> sendmsg +60\.0 us")
        self.assertRegex(out, r"\n  sendmsg +20\.0 us")  # of 10, 20, 30
        self.assertIn("CUDA calls, 3 of 3 requests in this order:", out)
        lines = [l.split() for l in out.splitlines() if l.startswith("    ")]
        self.assertEqual([l[0] for l in lines[:3]],
                         ["cudaLaunchKernel", "cudaLaunchKernel",
                          "cudaEventSynchronize"])
        self.assertEqual([l[1] for l in lines[:3]], ["10.0", "4.0", "10.0"])
        self.assertRegex(out, r"first call to the last one's end +26\.0 us")
        self.assertRegex(out, r"last CUDA call's end -> sendmsg +24\.0 us")

    def test_without_the_cuda_trace(self):
        out = self.run_timeline(cuda=False)
        self.assertRegex(out, r"awake -> sendmsg +60\.0 us")
        self.assertIn("no CUDA trace", out)

    def test_direct_runs_and_echo(self):
        out = self.run_timeline(cuda=True, direct=True)
        self.assertNotIn("scheduler threads", out)
        self.assertIn("5 responses sent by the thread that received the "
                      "request", out)
        self.assertIn("without CUDA calls (Echo), 2:", out)
        self.assertIn("with CUDA calls (direct runs), 3:", out)
        medians = [l.split() for l in out.splitlines()
                   if "recvmsg end -> sendmsg" in l]
        # Echo: 20 us; direct runs: from the second recvmsg, 83 us.
        self.assertEqual([m[-2] for m in medians], ["20.0", "83.0"])
        self.assertRegex(out, r"recvmsg end -> first CUDA call +30\.0 us")
        self.assertIn("CUDA calls, 3 of 3 requests in this order:", out)
        self.assertRegex(out, r"cudaLaunchKernel +9\.0 us")
        self.assertRegex(out, r"first call to the last one's end +26\.0 us")
        self.assertRegex(out, r"last CUDA call's end -> sendmsg +27\.0 us")
        sends = [l.split() for l in out.splitlines()
                 if l.strip().startswith("sendmsg")]
        self.assertEqual([m[-2] for m in sends], ["6.0", "10.0"])


class BusyTest(unittest.TestCase):
    """request_profile.py busy on a cuda_gpu_trace CSV written here: four
    2 us kernels, 4 us apart, each behind a launch gate, in a 16 us window;
    the server reports five launches, one of which the trace lost."""

    def run_busy(self, *flags):
        rows = ["Start (ns),Duration (ns),Strm,Name"]
        for start in (0, 4_000, 8_000, 12_000):
            rows.append(f"{start - 500},300,13,GateKernel(unsigned int)")
            rows.append(f"{start},2000,13,void Transpose<float>()")
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "trace.csv")
            with open(path, "w") as f:
                f.write("\n".join(rows) + "\n")
            return subprocess.run(
                [sys.executable, SCRIPT, "busy", path, "--window=16e-6",
                 *flags], capture_output=True, text=True, check=True).stdout

    def test_union_and_gate_gap(self):
        out = self.run_busy("--server_busy=0.75")
        self.assertIn("4 kernels; sum/wall 0.500, union/wall 0.500", out)
        self.assertIn("gate end to kernel start on a stream: median 0.20 us",
                      out)
        self.assertIn("rate 0.750: +25.0 points against the union", out)
        self.assertNotIn("nsys kept", out)

    def test_launches_the_trace_lost(self):
        out = self.run_busy("--server_busy=0.75", "--launches=5")
        self.assertIn("nsys kept 4 kernels in the window of the 5 the server "
                      "launched in the phase (80%)", out)
        # 5 launches in 16 us; 0.75 of it is 2.40 us each, against 2.00.
        self.assertIn("per launch: server 2.40 us, nsys union 2.00 us; at the "
                      "server's 312500 launches/s, +12.5 points", out)


if __name__ == "__main__":
    unittest.main()
