#!/usr/bin/env python3
"""Times PyTorch on the same cases a coalesce-bench JSON lists, in the same
run, so every row gets a `vs torch` ratio measured side by side.

    python3 bench/torch_bench.py COALESCE_JSON OUT_JSON [--reps 30]

Inputs are random (never zeros); several input sets are rotated so the
footprint exceeds the L2; CUDA events; after warm-up, the median of --reps
per-launch times and the mean of --reps calls back to back, as
coalesce-bench times its variants (Backend::Benchmark).
"""
import argparse
import json
import statistics
import sys
import time

import torch

DTYPES = {"float32": torch.float32, "float16": torch.float16,
          "bfloat16": torch.bfloat16}
FOOTPRINT = 512 << 20
# The GPU sleeps at least this long before each timed span, so that the host
# has enqueued the span's events and calls before the GPU reaches them.
MIN_SLEEP_US = 100

_sleep_cycles_per_us = None


def sleep_us(us):
    """Keeps the GPU busy for about `us` microseconds (torch.cuda._sleep
    spins for a number of SM clock cycles): the clock is read once by timing
    a sleep with events."""
    global _sleep_cycles_per_us
    if _sleep_cycles_per_us is None:
        cycles = 1_000_000
        torch.cuda._sleep(cycles)  # brings the clock up
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(
            enable_timing=True)
        s.record()
        torch.cuda._sleep(cycles)
        e.record()
        e.synchronize()
        _sleep_cycles_per_us = cycles / (s.elapsed_time(e) * 1e3)
    torch.cuda._sleep(int(us * _sleep_cycles_per_us))


def time_fn(make_args, fn, reps, warmup=5):
    """(median ms per launch, mean ms back to back) of fn(*args) over reps,
    rotating argument sets.

    Per launch: events around each call, after a GPU sleep that outlasts
    the host's enqueuing of them, so the span is the GPU's work and not
    Python's launch time. Back to back: one event, reps calls with nothing
    between them, one event, all enqueued behind one sleep that outlasts
    the host's enqueuing of them all.
    """
    sets = [make_args()]
    per_set = sum(t.numel() * t.element_size() for t in sets[0])
    while len(sets) * per_set < FOOTPRINT and len(sets) < 64:
        sets.append(make_args())
    host_us = []
    for i in range(warmup):
        t0 = time.perf_counter()
        fn(*sets[i % len(sets)])
        host_us.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    # The host's time to enqueue one call, from the warm-up after its first
    # call (which may compile); twice that, for its jitter.
    per_call_us = 2 * statistics.median(host_us[1:] or host_us or [0])
    times = []
    for i in range(reps):
        a = sets[i % len(sets)]
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(
            enable_timing=True)
        sleep_us(max(MIN_SLEEP_US, per_call_us))
        s.record()
        fn(*a)
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(
        enable_timing=True)
    sleep_us(MIN_SLEEP_US + reps * per_call_us)
    s.record()
    for i in range(reps):
        # The rotation goes on from the per-launch calls.
        fn(*sets[(reps + i) % len(sets)])
    e.record()
    e.synchronize()
    return statistics.median(times), s.elapsed_time(e) / reps


def rand(shape, dtype):
    x = torch.rand(shape, device="cuda", dtype=torch.float32) * 0.75 + 0.25
    sign = torch.randint(0, 2, shape, device="cuda") * 2 - 1
    return (x * sign).to(dtype)


def gelu_ln(x, bias, residual, gamma, beta):
    h = torch.nn.functional.gelu(x + bias) + residual
    return torch.nn.functional.layer_norm(h, (h.shape[-1],), gamma, beta, 1e-5)


_compiled_gelu_ln = None


def compiled_gelu_ln(*args):
    global _compiled_gelu_ln
    if _compiled_gelu_ln is None:
        _compiled_gelu_ln = torch.compile(gelu_ln)
    return _compiled_gelu_ln(*args)


def case_fn(case, shape, dtype, compiled=False):
    """(make_args, fn) running the PyTorch equivalent of one case; for
    gelu_layer_norm, torch.compile's version when compiled."""
    if case == "gelu_layer_norm":
        rows, hidden = shape
        return (lambda: (rand((rows, hidden), dtype), rand((hidden,), dtype),
                         rand((rows, hidden), dtype), rand((hidden,), dtype),
                         rand((hidden,), dtype)),
                compiled_gelu_ln if compiled else gelu_ln)
    if case == "gemm":
        b, m, n, k = shape
        # cuBLAS through PyTorch, TF32 off for float32 (as our fp32 rows).
        torch.backends.cuda.matmul.allow_tf32 = False
        if b == 1:
            return (lambda: (rand((m, k), dtype), rand((k, n), dtype)),
                    torch.matmul)
        return (lambda: (rand((b, m, k), dtype), rand((b, k, n), dtype)),
                torch.bmm)
    if case in ("transpose", "aos_to_soa", "soa_to_aos"):
        if len(shape) == 2:
            shape = [1] + shape
        b, m, n = shape
        return (lambda: (rand((b, m, n), dtype),
                         torch.empty((b, n, m), device="cuda", dtype=dtype)),
                lambda x, y: y.copy_(x.transpose(-1, -2)))
    if case == "nchw_to_nhwc":
        return (lambda: (rand(tuple(shape), dtype),),
                lambda x: x.contiguous(memory_format=torch.channels_last))
    if case == "nhwc_to_nchw":
        n, h, w, c = shape
        return (lambda: (rand((n, c, h, w), dtype).contiguous(
            memory_format=torch.channels_last),),
                lambda x: x.contiguous())
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("coalesce_json")
    ap.add_argument("out_json")
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args()
    src = json.load(open(args.coalesce_json))
    seen, rows = set(), []
    # The copy ceiling as PyTorch measures it, in the same run.
    n = 1 << 28
    ms, b2b_ms = time_fn(lambda: (torch.empty(n, device="cuda"),
                                  rand((n,), torch.float32)),
                         lambda y, x: y.copy_(x), args.reps)
    torch_copy = 2 * 4 * n / ms / 1e6
    torch_copy_b2b = 2 * 4 * n / b2b_ms / 1e6
    todo = []
    for r in src["rows"]:
        key = (r["case"], r["dtype"], tuple(r["shape"]))
        if key not in seen:
            seen.add(key)
            todo.append(r)
    for i, r in enumerate(todo):
        shape = list(r["shape"])
        if r["case"] == "transpose" and shape[0] == 1:
            shape = shape[1:]
        made = case_fn(r["case"], shape, DTYPES[r["dtype"]])
        print(f"\r[{i + 1}/{len(todo)}] torch {r['case']} {r['dtype']} "
              f"{r['shape']}", end="", file=sys.stderr, flush=True)
        if made is None:
            continue
        ms, b2b_ms = time_fn(made[0], made[1], args.reps)
        extra = {}
        if r["case"] == "gelu_layer_norm":
            made_c = case_fn(r["case"], shape, DTYPES[r["dtype"]], True)
            cms, c_b2b_ms = time_fn(made_c[0], made_c[1], args.reps)
            extra = {"torch_compile_us": cms * 1e3,
                     "torch_compile_GBps": r["bytes"] / (cms * 1e-3) / 1e9,
                     "torch_compile_b2b_us": c_b2b_ms * 1e3,
                     "torch_compile_b2b_GBps":
                         r["bytes"] / (c_b2b_ms * 1e-3) / 1e9}
        if r["case"] == "gemm":
            extra = {"torch_TFLOPs": r["flops"] / (ms * 1e-3) / 1e12}
        # A plain copy of the same bytes: the ceiling at this size (launch
        # and tail costs included), beside the large-copy peak.
        numel = r["bytes"] // 2 // torch.tensor([], dtype=DTYPES[r["dtype"]]
                                               ).element_size()
        copy_ms, copy_b2b_ms = time_fn(
            lambda: (torch.empty(numel, device="cuda",
                                 dtype=DTYPES[r["dtype"]]),
                     rand((numel,), DTYPES[r["dtype"]])),
            lambda y, x: y.copy_(x), args.reps)
        rows.append({"case": r["case"], "dtype": r["dtype"],
                     "shape": r["shape"], "torch_us": ms * 1e3,
                     "torch_GBps": r["bytes"] / (ms * 1e-3) / 1e9,
                     "torch_b2b_us": b2b_ms * 1e3,
                     "torch_b2b_GBps": r["bytes"] / (b2b_ms * 1e-3) / 1e9,
                     "same_size_copy_GBps": r["bytes"] / (copy_ms * 1e-3) / 1e9,
                     "same_size_copy_b2b_us": copy_b2b_ms * 1e3,
                     "same_size_copy_b2b_GBps":
                         r["bytes"] / (copy_b2b_ms * 1e-3) / 1e9,
                     **extra})
        torch.cuda.empty_cache()
    print(file=sys.stderr)
    json.dump({"torch": torch.__version__, "device":
               torch.cuda.get_device_name(), "torch_copy_GBps": torch_copy,
               "torch_copy_b2b_GBps": torch_copy_b2b, "rows": rows},
              open(args.out_json, "w"), indent=1)


if __name__ == "__main__":
    main()
