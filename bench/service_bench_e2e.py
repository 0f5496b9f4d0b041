#!/usr/bin/env python3
"""End to end: `coalesce-bench service` against a real coalesce-server on
port 0, every op and transport, a few requests each, scraping the server's
metrics; checks that the JSON has every field and no errors (not the
speed)."""
import json
import os
import re
import subprocess
import sys
import tempfile


def run_bench(bench_bin, path, flags):
    """coalesce-bench service with flags, 2 workers, 20 timed requests per
    phase and no warm-up; its JSON, or None (said why) when it failed."""
    run = subprocess.run(
        [bench_bin, "service", *flags, "--concurrency=2", "--count=20",
         "--warmup_s=0", "--json=" + path],
        capture_output=True, text=True, timeout=120)
    print(run.stdout)
    print(run.stderr[-2000:])
    if run.returncode != 0:
        print("bench %s exit %d" % (" ".join(flags), run.returncode))
        return None
    with open(path) as f:
        return json.load(f)


def main():
    server_bin, bench_bin = sys.argv[1], sys.argv[2]
    sockets = tempfile.TemporaryDirectory()
    sock = os.path.join(sockets.name, "coalesce.sock")
    server = subprocess.Popen(
        [server_bin, "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
         "--device=cpu", "--allow_client_shm", "--unix_socket=" + sock],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = server.stdout.readline()
        match = re.search(r"listening on [^:]+:(\d+)", line)
        if not match:
            print("no listening line: %r" % line)
            return 1
        metrics_line = server.stdout.readline()
        metrics = re.search(r"metrics on [^:]+:(\d+)", metrics_line)
        if not metrics:
            print("no metrics line: %r" % metrics_line)
            return 1
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "out.json")
            target = "--server=127.0.0.1:" + match.group(1)
            doc = run_bench(bench_bin, path, [
                target, "--shm_server=unix:" + sock,
                "--metrics=127.0.0.1:" + metrics.group(1),
                "--op=transpose,gelu-ln",
                "--transport=inline,handle,pipeline,shm", "--bytes=16384"])
            # The other ops with every operand a KServe v2 client sends,
            # over both protocols.
            more = run_bench(bench_bin, path, [
                target, "--op=gemm,convert-layout,gelu-ln", "--all_operands",
                "--transport=inline", "--bytes=65536",
                "--protocol=native,kserve"])
            # Rounds: Echo, a 1 KiB Echo (the second floor) and the op
            # twice, in turn.
            rounds = run_bench(bench_bin, path, [
                target, "--op=transpose", "--transport=pipeline",
                "--bytes=4096", "--rounds=2", "--floor_bytes=1024"])
            if doc is None or more is None or rounds is None:
                return 1
            more_results = more["results"]
        # Each row sums its two rounds' requests and takes the median (the
        # mean of two) of the rounds' ratios to their own Echo, and of those
        # to the 1 KiB Echo of the same rounds.
        for r in rounds["results"]:
            ratios = r.get("vs_echo_rounds", [])
            floors = r.get("vs_floor_rounds", [])
            own_echo = r["op"] == "echo" and r["tensor_bytes"] == 4096
            floor_echo = r["op"] == "echo" and r["tensor_bytes"] == 1024
            if r.get("rounds") != 2 or len(ratios) != 2 or \
                    r["requests"] != 40 or r["errors"] or \
                    abs(r["vs_echo"]["requests_per_second"] -
                        sum(ratios) / 2) > 1e-3 or \
                    (own_echo and ratios != [1.0, 1.0]) or \
                    r.get("floor_bytes") != 1024 or len(floors) != 2 or \
                    abs(r["vs_floor"] - sum(floors) / 2) > 1e-3 or \
                    (floor_echo and floors != [1.0, 1.0]) or \
                    not r["floor_rps"] > 0 or not r["floor_p50_ms"] > 0:
                print("bad rounds: %s" % r)
                return 1
        if [(r["op"], r["tensor_bytes"]) for r in rounds["results"]] != [
                ("echo", 4096), ("echo", 1024), ("transpose", 4096)]:
            print("rounds rows: %s" % rounds["results"])
            return 1
        if {(r["op"], r["protocol"]) for r in more_results} != {
                (op, protocol)
                for op in ("echo", "gemm", "convert-layout", "gelu-ln")
                for protocol in ("native", "kserve")} or any(
                    r["errors"] or r["requests"] < 20 or
                    (r["op"] != "echo" and not r["kernel_seconds"])
                    for r in more_results):
            print("bad gemm/convert-layout phases: %s" % more_results)
            return 1
        # Native Echo is every phase's floor, the identity model's too.
        if (more_results[0]["op"], more_results[0]["protocol"]) != (
                "echo", "native") or any(
                    abs(r["echo_rps"] - more_results[0]["requests_per_second"])
                    > 1e-3 * more_results[0]["requests_per_second"]
                    for r in more_results):
            print("the floor is not native Echo: %s" % more_results)
            return 1
        results = doc["results"]
        phases = {(r["op"], r["transport"]) for r in results}
        want = {("echo", "inline")} | {
            (op, t) for op in ("transpose", "gelu-ln")
            for t in ("inline", "handle", "pipeline", "shm")}
        if phases != want:
            print("phases %s, want %s" % (sorted(phases), sorted(want)))
            return 1
        if results[0]["op"] != "echo":
            print("echo must run first")
            return 1
        client_cpu = 0.0
        for r in results:
            for key in ("tensor_bytes", "concurrency", "requests", "errors",
                        "seconds", "requests_per_second", "GBps",
                        "latency_ms", "vs_echo"):
                if key not in r:
                    print("missing %s in %s" % (key, r))
                    return 1
            for q in ("p50", "p90", "p99", "max"):
                if q not in r["latency_ms"]:
                    print("missing latency_ms.%s" % q)
                    return 1
            if r["errors"] != 0 or r["requests"] < 20:
                print("bad counts: %s" % r)
                return 1
            if not r["vs_echo"]["requests_per_second"] > 0:
                print("no ratio to echo: %s" % r)
                return 1
            for key in ("kernel_seconds", "bound_rps", "busy", "echo_rps",
                        "echo_p50_ms", "server_busy", "mean_batch"):
                if key not in r:
                    print("missing %s in %s" % (key, r))
                    return 1
            if not (r["echo_rps"] > 0 and r["echo_p50_ms"] > 0):
                print("no echo floor: %s" % r)
                return 1
            # The server's kernel-time counter, scraped around the phase.
            if r["server_busy"] is None or r["server_busy"] < 0:
                print("no server busy: %s" % r)
                return 1
            # CPU per request: the server's counter moves in clock ticks, so
            # a short phase may read 0; the client's own is never empty.
            if r.get("server_cpu_us") is None or r["server_cpu_us"] < 0 or \
                    r.get("client_cpu_us") is None or r["client_cpu_us"] < 0:
                print("no CPU per request: %s" % r)
                return 1
            client_cpu += r["client_cpu_us"]
            if r["op"] == "echo":
                if r["kernel_seconds"] is not None:
                    print("echo has a kernel time: %s" % r)
                    return 1
                continue
            k = r["kernel_seconds"]
            if k is None or not k > 0:
                print("no kernel time: %s" % r)
                return 1
            if abs(r["bound_rps"] * k - 1) > 1e-3 or abs(
                    r["busy"] - r["requests_per_second"] * k) > 1e-3 * max(
                        r["busy"], 1e-9):
                print("bound or busy inconsistent: %s" % r)
                return 1
        if not client_cpu > 0:
            print("the client's CPU time never moved: %s" % results)
            return 1
        return 0
    finally:
        server.terminate()
        server.wait(timeout=30)
        sockets.cleanup()


if __name__ == "__main__":
    sys.exit(main())
