#!/usr/bin/env python3
"""Where a request's time goes, and how busy the GPU really was.

  request_profile.py stages METRICS [--op=transpose] [--since=METRICS0]
      Mean seconds per request of each stage the server exports (handler,
      queue, host-to-device, kernel, device-to-host), from one /metrics
      text scraped after a load against a fresh server, or from the
      difference of two scrapes (--since: the one before the load). A
      KServe ModelInfer that runs an op counts under the op.

  request_profile.py busy GPU_TRACE_CSV --window=SECONDS [--server_busy=R]
      From an Nsight Systems cuda_gpu_trace report (CSV): over the last
      SECONDS of kernel activity, the sum of the request kernels' durations
      over wall time (what coalesce_device_busy_ratio estimates) and the
      union of their intervals over wall time (the fraction of time at
      least one ran). The launch gate's polling kernel is left out: it
      spans the host's launch calls, not work.
"""
import argparse
import csv
import re
import sys

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$')


def parse_metrics(text):
    out = []
    for line in text.splitlines():
        if not line or line.startswith('#'):
            continue
        m = SAMPLE.match(line.strip())
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ''))
        out.append((m.group(1), labels, float(m.group(3))))
    return out


def stages(args):
    samples = parse_metrics(open(args.metrics).read())
    before = parse_metrics(open(args.since).read()) if args.since else []

    def total(name, **want):
        def of(rows):
            return sum(v for n, l, v in rows if n == name and
                       all(l.get(k) == w for k, w in want.items()))
        return of(samples) - of(before)

    requests = total('coalesce_request_duration_seconds_count', op=args.op)
    if requests == 0:
        sys.exit(f'no {args.op} requests in {args.metrics}')
    rows = [
        ('handler', total('coalesce_request_duration_seconds_sum', op=args.op),
         requests),
        ('queue', total('coalesce_request_queue_seconds_sum', op=args.op),
         total('coalesce_request_queue_seconds_count', op=args.op)),
        ('h2d', total('coalesce_request_h2d_seconds_sum', op=args.op),
         total('coalesce_request_h2d_seconds_count', op=args.op)),
        ('kernel', total('coalesce_kernel_seconds_sum', op=args.op),
         total('coalesce_kernel_seconds_count', op=args.op)),
        ('d2h', total('coalesce_request_d2h_seconds_sum', op=args.op),
         total('coalesce_request_d2h_seconds_count', op=args.op)),
    ]
    print(f'{args.op}: {requests:.0f} requests; mean per request, us')
    means = {}
    for name, s, n in rows:
        means[name] = s / n * 1e6 if n else float('nan')
        print(f'  {name:8s} {means[name]:9.1f}  ({n:.0f} samples)')
    rest = means['handler'] - sum(means[k]
                                  for k in ('queue', 'h2d', 'kernel', 'd2h'))
    print(f'  {"rest":8s} {rest:9.1f}  (handler minus the stages: CUDA calls '
          'outside the events, completion, answer)')


def busy(args):
    kernels = []
    with open(args.csv, newline='') as f:
        for row in csv.DictReader(f):
            start = row.get('Start (ns)')
            dur = row.get('Duration (ns)')
            name = row.get('Name', '')
            if start is None or dur is None or name.startswith('[CUDA'):
                continue
            if 'GateKernel' in name:
                continue
            s = int(float(start))
            kernels.append((s, s + int(float(dur))))
    if not kernels:
        sys.exit(f'no kernels in {args.csv}')
    kernels.sort()
    end = max(e for _, e in kernels)
    begin = end - int(args.window * 1e9)
    total = union = 0
    reach = begin
    n = 0
    for s, e in kernels:
        s, e = max(s, begin), min(e, end)
        if e <= s:
            continue
        n += 1
        total += e - s
        if e > reach:
            union += e - max(s, reach)
            reach = e
    wall = end - begin
    print(f'nsys, last {args.window:.3f} s of kernels: {n} kernels; '
          f'sum/wall {total / wall:.3f}, union/wall {union / wall:.3f}')
    if args.server_busy is not None:
        print(f'server coalesce_device_kernel_seconds_total rate '
              f'{args.server_busy:.3f}: {100 * (args.server_busy - union / wall):+.1f} '
              f'points against the union, '
              f'{100 * (args.server_busy - total / wall):+.1f} against the sum')


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest='cmd', required=True)
    s = sub.add_parser('stages')
    s.add_argument('metrics')
    s.add_argument('--op', default='transpose')
    s.add_argument('--since')
    b = sub.add_parser('busy')
    b.add_argument('csv')
    b.add_argument('--window', type=float, required=True)
    b.add_argument('--server_busy', type=float)
    args = p.parse_args()
    {'stages': stages, 'busy': busy}[args.cmd](args)


if __name__ == '__main__':
    main()
