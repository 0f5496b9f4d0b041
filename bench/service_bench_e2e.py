#!/usr/bin/env python3
"""End to end: `coalesce-bench service` against a real coalesce-server on
port 0, every op and transport, a few requests each; checks that the JSON
has every field and no errors (not the speed)."""
import json
import os
import re
import subprocess
import sys
import tempfile


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
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "out.json")
            run = subprocess.run(
                [bench_bin, "service", "--server=127.0.0.1:" + match.group(1),
                 "--shm_server=unix:" + sock,
                 "--op=transpose,gelu-ln", "--transport=inline,handle,shm",
                 "--bytes=16384", "--concurrency=2", "--count=20",
                 "--warmup_s=0", "--json=" + path],
                capture_output=True, text=True, timeout=120)
            print(run.stdout)
            print(run.stderr[-2000:])
            if run.returncode != 0:
                print("bench exit %d" % run.returncode)
                return 1
            with open(path) as f:
                doc = json.load(f)
        results = doc["results"]
        phases = {(r["op"], r["transport"]) for r in results}
        want = {("echo", "inline")} | {
            (op, t) for op in ("transpose", "gelu-ln")
            for t in ("inline", "handle", "shm")}
        if phases != want:
            print("phases %s, want %s" % (sorted(phases), sorted(want)))
            return 1
        if results[0]["op"] != "echo":
            print("echo must run first")
            return 1
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
        return 0
    finally:
        server.terminate()
        server.wait(timeout=30)
        sockets.cleanup()


if __name__ == "__main__":
    sys.exit(main())
