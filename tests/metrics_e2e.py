#!/usr/bin/env python3
"""End-to-end checks of coalesce-server's Prometheus metrics (standard library
only). Both start the real coalesce-server (CPU backend, gRPC and metrics on
port 0 of 127.0.0.1) and drive every RPC with the real `coalesce` CLI:

  promtool    `promtool check metrics` on the live /metrics output.
  prometheus  the Grafana dashboard is checked first: every datasource is
              its `datasource` variable, every coalesce_* and process_*
              selector filters by $instance, every device series also by
              $gpu. Then a real Prometheus server on loopback scrapes the
              server every second; every PromQL expression of the dashboard
              (and every template-variable query) is sent to Prometheus'
              HTTP API and must return data (but see the lists below).

Exit status 0 on success, 1 on failure, 77 (CTest's SKIP_RETURN_CODE) when
promtool or prometheus is not installed (`apt-get install prometheus`, which
scripts/install-deps.sh does). Bounded in time (--deadline); both processes
are killed at the end, and with this script if it dies.
"""

import argparse
import ctypes
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

SKIP = 77

# Metrics a backend does not export, and why: an expression that reads only
# these may come back empty on that backend (it must still be valid PromQL).
ABSENT_ON_BACKEND = {
    "cpu": {
        "coalesce_kernel_theoretical_occupancy_ratio":
            "CPU variants launch nothing",
        "coalesce_kernel_waves": "CPU variants launch nothing",
        "coalesce_kernel_achieved_occupancy_ratio":
            "the CPU backend has no device counters to sample",
        "coalesce_device_pool_reserved_bytes":
            "the CPU backend has no stream-ordered pool",
        "coalesce_device_block_cache_bytes":
            "the CPU backend keeps no device blocks",
        "coalesce_variant_plans": "no CPU variant keeps plans",
        "coalesce_variant_plan_capacity": "no CPU variant keeps plans",
        "coalesce_variant_plan_evictions_total":
            "no CPU variant keeps plans",
    },
    "cuda": {
        "coalesce_kernel_achieved_occupancy_ratio":
            "sampled only with --profile_sampling=sampled",
        "coalesce_device_memory_used_bytes":
            "the CUDA backend does not report memory use yet",
        "coalesce_device_pinned_staging_bytes":
            "the CUDA backend does not report its staging buffers yet",
    },
}

# Series of other exporters, by metric-name prefix, and why: nothing here
# scrapes them, so an expression that reads any of them may come back empty
# (it must still be valid PromQL).
ABSENT_BY_PREFIX = {
    "DCGM_": "NVIDIA DCGM-exporter is not scraped here",
}

# Labels that only a server with --metrics_detail=full exports (the server
# here runs the default, basic), and why. An expression that selects on one
# being set (label!="") may come back empty; the same expression without
# that matcher must return data.
FULL_DETAIL_LABELS = {
    "size_bucket": "kernel series carry size_bucket only with "
                   "--metrics_detail=full",
    "dtype": "kernel series carry dtype only with --metrics_detail=full",
}

# The dashboard's datasource, on every panel, target and variable.
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}

# Grafana's interval variables, as a dashboard at a 1 s scrape would see them.
GRAFANA_INTERVALS = {
    "__rate_interval": "1m",
    "__interval": "15s",
    "__range": "5m",
}


def log(message):
    print(f"[metrics_e2e] {message}", flush=True)


def die_with_parent():
    """preexec_fn: the child gets SIGKILL when this script dies."""
    pr_set_pdeathsig = 1
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(pr_set_pdeathsig, signal.SIGKILL)


def free_port():
    """A TCP port free on 127.0.0.1 now (for Prometheus, which has no port
    0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.status, response.read().decode("utf-8")


class Deadline:
    def __init__(self, seconds):
        self.end = time.monotonic() + seconds

    def left(self):
        return self.end - time.monotonic()

    def check(self, what):
        if self.left() <= 0:
            raise RuntimeError(f"deadline passed while {what}")


class Server:
    """coalesce-server on port 0; reads both ports from its stdout."""

    def __init__(self, binary, workdir, deadline, flags=()):
        self.log_path = os.path.join(workdir, "coalesce-server.log")
        self.log_file = open(self.log_path, "w")
        env = dict(os.environ, OMP_WAIT_POLICY="passive")
        self.process = subprocess.Popen(
            [binary, "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
             "--device=cpu", "--threads=2", *flags],
            stdout=subprocess.PIPE, stderr=self.log_file, text=True, env=env,
            preexec_fn=die_with_parent)
        self.grpc_port = None
        self.metrics_port = None
        self.backend = None
        lines = []
        found = threading.Event()

        def read():
            for line in self.process.stdout:
                lines.append(line.rstrip("\n"))
                m = re.search(r"listening on \S*:(\d+) \(backend (\w+)\)", line)
                if m:
                    self.grpc_port, self.backend = int(m.group(1)), m.group(2)
                m = re.search(r"metrics on \S*:(\d+)", line)
                if m:
                    self.metrics_port = int(m.group(1))
                if self.grpc_port and self.metrics_port:
                    found.set()
            found.set()  # EOF: the server exited

        threading.Thread(target=read, daemon=True).start()
        found.wait(max(1, deadline.left()))
        if not (self.grpc_port and self.metrics_port):
            self.stop()
            raise RuntimeError(
                "coalesce-server did not print both ports; stdout:\n" +
                "\n".join(lines) + "\nstderr:\n" + self.log())
        log(f"coalesce-server: gRPC {self.grpc_port}, metrics "
            f"{self.metrics_port}, backend {self.backend}")

    def log(self):
        with open(self.log_path) as f:
            return f.read()

    def metrics(self):
        status, body = http_get(
            f"http://127.0.0.1:{self.metrics_port}/metrics")
        if status != 200:
            raise RuntimeError(f"/metrics answered {status}")
        return body

    def stop(self):
        stop_process(self.process, "coalesce-server")
        self.log_file.close()


def stop_process(process, name, grace=10):
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            log(f"{name} ignored SIGTERM for {grace} s: SIGKILL")
            process.kill()
            process.wait()


def drive_traffic(cli, port, seconds, deadline):
    """Every RPC, a forced variant and two kinds of errors, in rounds for
    `seconds` (so that rates span several scrapes). Returns the rounds run."""
    server = f"--server=127.0.0.1:{port}"
    ok_commands = [
        ["transpose", "--shape=256,384"],
        ["transpose", "--shape=64,64", "--variant=transpose.cpu.naive"],
        ["transpose", "--shape=16,512,512"],  # 32 MiB moved: le_64MiB
        ["gemm", "--m=64", "--n=48", "--k=32"],
        ["gemm", "--m=32", "--n=32", "--k=32", "--dtype=float16"],
        ["layout", "--shape=2,8,16,16", "--from=NCHW", "--to=NHWC"],
        ["gelu-ln", "--shape=64,256"],
        ["info"],
    ]
    error_commands = [
        # INVALID_ARGUMENT from selection: no such variant.
        ["transpose", "--shape=8,8", "--variant=transpose.cpu.no_such_variant"],
        # INVALID_ARGUMENT: the forced variant is of another op.
        ["gemm", "--m=4", "--n=4", "--k=4", "--variant=transpose.cpu.naive"],
    ]
    end = time.monotonic() + seconds
    rounds = 0
    while time.monotonic() < end or rounds == 0:
        deadline.check("driving traffic")
        for args in ok_commands:
            r = subprocess.run([cli, server] + args, capture_output=True,
                               text=True, timeout=max(1, deadline.left()))
            if r.returncode != 0:
                raise RuntimeError(f"coalesce {' '.join(args)} failed "
                                   f"({r.returncode}):\n{r.stdout}{r.stderr}")
        for args in error_commands:
            r = subprocess.run([cli, server] + args, capture_output=True,
                               text=True, timeout=max(1, deadline.left()))
            if r.returncode == 0 or "INVALID_ARGUMENT" not in r.stdout + r.stderr:
                raise RuntimeError(f"coalesce {' '.join(args)} should fail "
                                   f"with INVALID_ARGUMENT:\n{r.stdout}{r.stderr}")
        rounds += 1
    return rounds


# ---- promtool check metrics.

def check_promtool(args, deadline, workdir):
    promtool = shutil.which("promtool")
    if promtool is None:
        log("SKIP: promtool not found (apt-get install prometheus)")
        return SKIP
    server = Server(args.server, workdir, deadline)
    try:
        outputs = {"before any request": server.metrics()}
        drive_traffic(args.cli, server.grpc_port, 0, deadline)
        outputs["after every RPC"] = server.metrics()
    except Exception:
        log("coalesce-server stderr:\n" + server.log())
        raise
    finally:
        server.stop()
    failed = False
    for when, text in outputs.items():
        r = subprocess.run([promtool, "check", "metrics"], input=text,
                           capture_output=True, text=True, timeout=30)
        problems = (r.stdout + r.stderr).strip()
        if r.returncode != 0 or problems:
            failed = True
            log(f"promtool check metrics {when}: exit {r.returncode}\n"
                f"{problems}")
        else:
            samples = sum(1 for line in text.splitlines()
                          if line and not line.startswith("#"))
            log(f"promtool check metrics {when}: clean ({samples} samples)")
    return 1 if failed else 0


# ---- The dashboard's expressions against a real Prometheus.

def dashboard_queries(dashboard):
    """(title, expression) of every panel target and template variable."""
    queries = []

    def walk(panels):
        for panel in panels:
            for target in panel.get("targets", []):
                if target.get("expr"):
                    queries.append((f"panel '{panel['title']}' "
                                    f"{target.get('refId', '')}",
                                    target["expr"]))
            walk(panel.get("panels", []))

    walk(dashboard.get("panels", []))
    for var in dashboard.get("templating", {}).get("list", []):
        query = var.get("query")
        if isinstance(query, dict):
            query = query.get("query")
        if var.get("type") != "query" or not query:
            continue
        # label_values(metric, label) is Grafana's, not PromQL.
        m = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\s*\)\s*", query)
        if m:
            query = f"count by ({m.group(2)}) ({m.group(1)})"
        queries.append((f"variable '{var['name']}'", query))
    return queries


def template_values(dashboard):
    """What each template variable stands for when "All" is selected: a
    query or custom variable (used as an =~ regex) its allValue, or ".*"
    (multi-value without one); a datasource variable its plugin type."""
    values = {}
    for var in dashboard.get("templating", {}).get("list", []):
        if var.get("type") == "datasource":
            values[var["name"]] = var.get("query", "prometheus")
        elif var.get("includeAll"):
            values[var["name"]] = var.get("allValue") or ".*"
        else:
            values[var["name"]] = ".*"
    return values


def substitute(expr, template_values):
    """Grafana variables: intervals become durations, template variables
    their "All" values (template_values). $1, $2... are label_replace's
    references, which Grafana leaves alone too."""
    def replace(m):
        name = m.group(1) or m.group(2)
        if name.isdigit():
            return m.group(0)
        if name in GRAFANA_INTERVALS:
            return GRAFANA_INTERVALS[name]
        if name in template_values:
            return template_values[name]
        raise ValueError(f"unknown Grafana variable ${name} in {expr}")
    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)", replace, expr)


def metric_names(expr):
    return set(re.findall(r"\b(coalesce_[a-z0-9_]+?)(?:_bucket|_sum|_count)?\b",
                          expr))


def absent_prefixes(expr):
    """The ABSENT_BY_PREFIX prefixes of the series expr reads."""
    return {prefix for prefix in ABSENT_BY_PREFIX
            if re.search(r"\b" + re.escape(prefix) + r"\w", expr)}


def set_matcher(label):
    """A regex for the matcher label!="" (spaces allowed)."""
    return r"\b" + re.escape(label) + r'\s*!=\s*""'


def full_detail_labels(expr):
    """The FULL_DETAIL_LABELS that expr requires to be set."""
    return {label for label in FULL_DETAIL_LABELS
            if re.search(set_matcher(label), expr)}


def without_set_matchers(expr, labels):
    """expr without the matchers label!="" of labels."""
    for label in labels:
        expr = re.sub(r",\s*" + set_matcher(label) + "|" + set_matcher(label)
                      + r"\s*,?", "", expr)
    return expr


def lint_dashboard(dashboard):
    """Problems with the dashboard's datasources and filters (a list)."""
    problems = []
    variables = {v.get("name"): v for v in
                 dashboard.get("templating", {}).get("list", [])}
    ds = variables.get("datasource")
    if not ds or ds.get("type") != "datasource" or \
            ds.get("query") != "prometheus":
        problems.append("no datasource variable (type datasource, query "
                        "prometheus)")

    def walk(node, where):
        if isinstance(node, dict):
            if "datasource" in node and node["datasource"] != DATASOURCE:
                problems.append(f"{where}: datasource "
                                f"{json.dumps(node['datasource'])}, not "
                                f"{json.dumps(DATASOURCE)}")
            title = node.get("title") or node.get("name")
            for key, value in node.items():
                if key != "datasource":
                    walk(value, f"{where} / {title}" if title else where)
        elif isinstance(node, list):
            for value in node:
                walk(value, where)

    walk(dashboard.get("panels", []), "panels")
    walk(dashboard.get("templating", {}), "variables")
    for title, expr in dashboard_queries(dashboard):
        for m in re.finditer(r"\b((?:coalesce|process)_\w+)\s*(\{[^}]*\})?",
                             expr):
            name, selector = m.group(1), m.group(2) or ""
            wanted = {"instance": 'instance=~"$instance"'}
            if name.startswith("coalesce_device_"):
                wanted["gpu"] = 'gpu_uuid=~"$gpu"'
            for variable, matcher in wanted.items():
                if title == f"variable '{variable}'":
                    continue  # lists the values: not filtered by itself
                if matcher not in selector.replace(" ", ""):
                    problems.append(f"{title}: {name}{selector} lacks "
                                    f"{matcher}")
    return problems


class Prometheus:
    def __init__(self, binary, workdir, target_port, deadline):
        self.port = free_port()
        config = os.path.join(workdir, "prometheus.yml")
        with open(config, "w") as f:
            f.write(
                "global:\n"
                "  scrape_interval: 1s\n"
                "  evaluation_interval: 1s\n"
                "scrape_configs:\n"
                "  - job_name: coalesce\n"
                "    static_configs:\n"
                f"      - targets: ['127.0.0.1:{target_port}']\n")
        self.log_path = os.path.join(workdir, "prometheus.log")
        self.log_file = open(self.log_path, "w")
        self.process = subprocess.Popen(
            [binary, f"--config.file={config}",
             f"--storage.tsdb.path={os.path.join(workdir, 'tsdb')}",
             f"--web.listen-address=127.0.0.1:{self.port}",
             "--log.level=warn"],
            stdout=self.log_file, stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent)
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"prometheus exited ({self.process.returncode}):\n"
                    + self.log())
            try:
                if http_get(self.url("/-/ready"), timeout=1)[0] == 200:
                    break
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            deadline.check("waiting for Prometheus to be ready")
            time.sleep(0.2)
        log(f"prometheus ready on 127.0.0.1:{self.port}")

    def url(self, path):
        return f"http://127.0.0.1:{self.port}{path}"

    def log(self):
        with open(self.log_path) as f:
            return f.read()

    def query(self, expr):
        """The API's answer (status, data) for an instant query now."""
        url = self.url("/api/v1/query?" + urllib.parse.urlencode(
            {"query": expr}))
        try:
            _, body = http_get(url, timeout=10)
        except urllib.error.HTTPError as e:
            body = e.read().decode("utf-8")
        return json.loads(body)

    def stop(self):
        stop_process(self.process, "prometheus")
        self.log_file.close()


def wait_until(prom, expr, what, deadline):
    """Until the instant query expr returns a series."""
    while not prom.query(expr).get("data", {}).get("result"):
        deadline.check(f"waiting for {what}")
        time.sleep(0.25)


def wait_for_scrapes(prom, server, deadline):
    """Until Prometheus holds what the server counts now (a scrape came after
    the traffic) and every kernel series has samples enough for rate()."""
    want = sum(float(line.rsplit(" ", 1)[1])
               for line in server.metrics().splitlines()
               if line.startswith("coalesce_requests_total{"))
    wait_until(prom, f"sum(coalesce_requests_total) >= {want}",
               f"a scrape with {want} requests", deadline)
    wait_until(prom,
               "min(count_over_time(coalesce_kernel_seconds_count[1m])) >= 3",
               "three samples of every kernel series", deadline)


def check_prometheus(args, deadline, workdir):
    binary = shutil.which("prometheus")
    if binary is None:
        log("SKIP: prometheus not found (apt-get install prometheus)")
        return SKIP
    with open(args.dashboard) as f:
        dashboard = json.load(f)
    problems = lint_dashboard(dashboard)
    for problem in problems:
        log(f"FAIL {problem}")
    if problems:
        return 1
    values = template_values(dashboard)
    queries = dashboard_queries(dashboard)
    log(f"{len(queries)} queries from {args.dashboard}")
    server = Server(args.server, workdir, deadline)
    prom = None
    try:
        prom = Prometheus(binary, workdir, server.metrics_port, deadline)
        # A scrape before any traffic: the series created up front start at
        # zero, so that their rates cover all of it.
        wait_until(prom, 'up{job="coalesce"} == 1', "the first scrape",
                   deadline)
        rounds = drive_traffic(args.cli, server.grpc_port, args.traffic_seconds,
                               deadline)
        log(f"drove {rounds} rounds of traffic")
        wait_for_scrapes(prom, server, deadline)
        up = prom.query('up{job="coalesce"}')["data"]["result"]
        if not up or up[0]["value"][1] != "1":
            raise RuntimeError(f"target not up: {up}")
        absent = ABSENT_ON_BACKEND.get(server.backend, {})
        failures = []

        def data(expr):
            """(error, series, finite series) of the instant query."""
            answer = prom.query(expr)
            if answer.get("status") != "success":
                return answer.get("error"), [], []
            result = answer["data"]["result"]
            return None, result, [r for r in result
                                  if not math.isnan(float(r["value"][1]))]

        for title, raw in queries:
            expr = substitute(raw, values)
            error, result, finite = data(expr)
            if error is not None:
                failures.append(f"{title}: {error}\n  {expr}")
                continue
            names = metric_names(expr)
            prefixes = absent_prefixes(expr)
            labels = full_detail_labels(expr)
            if finite:
                log(f"ok   {title}: {len(result)} series")
            elif prefixes:
                reasons = "; ".join(sorted(ABSENT_BY_PREFIX[p]
                                           for p in prefixes))
                log(f"none {title}: valid, no data ({reasons})")
            elif names and names <= absent.keys():
                reasons = "; ".join(sorted({absent[n] for n in names}))
                log(f"none {title}: valid, no data on the {server.backend} "
                    f"backend ({reasons})")
            elif labels:
                reasons = "; ".join(FULL_DETAIL_LABELS[label]
                                    for label in sorted(labels))
                relaxed = without_set_matchers(expr, labels)
                error, result, finite = data(relaxed)
                unset = ", ".join(f'{label}!=""' for label in sorted(labels))
                if finite:
                    log(f"none {title}: valid, no data with basic detail "
                        f"({reasons}); without {unset}: {len(result)} series")
                else:
                    failures.append(
                        f"{title}: no data without {unset} either "
                        f"({error or f'{len(result)} series, all NaN'})"
                        f"\n  {relaxed}")
            else:
                failures.append(
                    f"{title}: no data ({len(result)} series, all NaN)"
                    f"\n  {expr}")
        for failure in failures:
            log(f"FAIL {failure}")
        if failures:
            log("server /metrics at the end:\n" + server.metrics())
        return 1 if failures else 0
    except Exception:
        log("coalesce-server stderr:\n" + server.log())
        if prom is not None:
            log("prometheus log:\n" + prom.log())
        raise
    finally:
        if prom is not None:
            prom.stop()
        server.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["promtool", "prometheus"])
    parser.add_argument("--server", required=True, help="coalesce-server")
    parser.add_argument("--cli", required=True, help="the coalesce CLI")
    parser.add_argument("--dashboard", help="Grafana dashboard JSON")
    parser.add_argument("--traffic_seconds", type=float, default=5)
    parser.add_argument("--deadline", type=float, default=60,
                        help="seconds the whole check may take")
    args = parser.parse_args()
    if args.mode == "prometheus" and not args.dashboard:
        parser.error("prometheus needs --dashboard")
    deadline = Deadline(args.deadline)
    workdir = tempfile.mkdtemp(prefix="coalesce-metrics-e2e-")
    try:
        if args.mode == "promtool":
            return check_promtool(args, deadline, workdir)
        return check_prometheus(args, deadline, workdir)
    except Exception as e:  # report, then fail the test
        log(f"FAIL {type(e).__name__}: {e}")
        return 1
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
