#!/usr/bin/env python3
"""Where a request's time goes, and how busy the GPU really was.

  request_profile.py stages METRICS [--op=transpose] [--since=METRICS0]
      Mean seconds per request of each stage the server exports (handler,
      queue, host-to-device, kernel, device-to-host), from one /metrics
      text scraped after a load against a fresh server, or from the
      difference of two scrapes (--since: the one before the load). A
      KServe ModelInfer that runs an op counts under the op.

  request_profile.py busy GPU_TRACE_CSV --window=SECONDS [--server_busy=R]
                        [--launches=N]
      From an Nsight Systems cuda_gpu_trace report (CSV): over the last
      SECONDS of kernel activity, the sum of the request kernels' durations
      over wall time (what coalesce_device_busy_ratio estimates) and the
      union of their intervals over wall time (the fraction of time at
      least one ran). The launch gate's polling kernel is left out: it
      spans the host's launch calls, not work. --launches: the launches
      the server made in those SECONDS (the bench's requests over its
      mean batch); then how many of them the trace kept, and the server's
      busy time per launch against the trace's union per kernel, which
      still compare when the trace lost kernels.

  request_profile.py timeline NSYS_SQLITE
      A lone request's path through the server's threads, from an Nsight
      Systems trace exported to SQLite (`-t cuda,osrt`; gpu-check.sh
      latency with LATENCY_KEEP_SQLITE=1 keeps it). Requests handed off:
      medians over the responses a scheduler thread sent, of the time from
      the request's recvmsg on gRPC's thread to the scheduler thread waking
      (and of the wake itself: the last short futex call on another thread
      before it), from the wake to the response's sendmsg, and of the
      sendmsg; with
      the CUDA trace, each CUDA call of the requests' usual sequence, the
      span from its first call to its last, and from the last to sendmsg.
      Scheduler threads are those whose waits are in Scheduler::WorkerLoop.
      Requests answered on the thread that received them (direct runs, and
      Echo): medians of the time from the last recvmsg to the sendmsg and
      of the sendmsg, apart for those with CUDA calls in between and those
      without; for the former, from the recvmsg to the first CUDA call,
      each call of the usual sequence, and from the last to the sendmsg.
"""
import argparse
import bisect
import collections
import csv
import re
import sqlite3
import statistics
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
    # Per stream, from a launch gate's end to the next kernel's start: the
    # launch's start event fires in between, so its span includes this.
    gate_end, gate_gaps = {}, []
    with open(args.csv, newline='') as f:
        for row in csv.DictReader(f):
            start = row.get('Start (ns)')
            dur = row.get('Duration (ns)')
            name = row.get('Name', '')
            if start is None or dur is None or name.startswith('[CUDA'):
                continue
            s = int(float(start))
            e = s + int(float(dur))
            stream = row.get('Strm')
            if 'GateKernel' in name:
                gate_end[stream] = e
                continue
            if stream in gate_end:
                gate_gaps.append((s, s - gate_end.pop(stream)))
            kernels.append((s, e))
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
    gaps = sorted(g for s, g in gate_gaps if s >= begin)
    if gaps:
        print(f'gate end to kernel start on a stream: median '
              f'{gaps[len(gaps) // 2] / 1e3:.2f} us, mean '
              f'{sum(gaps) / len(gaps) / 1e3:.2f} us ({len(gaps)} launches)')
    if args.server_busy is not None:
        over = (args.server_busy - union / wall) * wall / max(n, 1)
        print(f'server over the union: {over / 1e3:.2f} us per kernel')
        print(f'server coalesce_device_kernel_seconds_total rate '
              f'{args.server_busy:.3f}: {100 * (args.server_busy - union / wall):+.1f} '
              f'points against the union, '
              f'{100 * (args.server_busy - total / wall):+.1f} against the sum')
    if args.launches:
        # A trace that lost kernels (Nsight Systems can drop the last
        # buffers of a busy process) understates the union over the window;
        # per launch, the kernels it kept still compare.
        print(f'nsys kept {n} kernels in the window of the {args.launches} '
              f'the server launched in the phase ({n / args.launches:.0%})')
        if args.server_busy is not None and n:
            rate = args.launches / wall * 1e9
            server_us = args.server_busy / rate * 1e6
            nsys_us = union / n / 1e3
            print(f'per launch: server {server_us:.2f} us, nsys union '
                  f'{nsys_us:.2f} us; at the server\'s {rate:.0f} launches/s, '
                  f'{100 * (server_us - nsys_us) * rate / 1e6:+.1f} points')


# A futex wait longer than this is a thread asleep, a shorter one a wake.
SLEEP_NS = 20_000
# CUDA calls of one request: on one thread, no gap longer than this.
CUDA_GAP_NS = 40_000


def us(values):
    return f'{statistics.median(values) / 1e3:.1f} us'


def print_sequence(items, indent, calls_of=lambda item: item):
    """The medians of each call of the most common sequence among the items'
    CUDA calls (calls_of(item): a list of (start, end, tid, name)); returns
    the items whose calls came in that order."""
    def names(item):
        return tuple(c[3] for c in calls_of(item))
    sequence, count = collections.Counter(
        names(item) for item in items).most_common(1)[0]
    mine = [item for item in items if names(item) == sequence]
    runs = [calls_of(item) for item in mine]
    print(f'{indent}CUDA calls, {count} of {len(items)} requests in this '
          f'order:')
    for i, name in enumerate(sequence):
        print(f'{indent}  {name:36s} {us([r[i][1] - r[i][0] for r in runs])}')
    print(f'{indent}  first call to the last one\'s end   '
          f'{us([r[-1][1] - r[0][0] for r in runs])}')
    return mine


def handed_off(calls, cuda, worker_chains):
    """Requests a scheduler thread answered; returns the worker threads and
    whether any answered."""
    waits = [c for c in calls
             if c[4] in worker_chains and c[1] - c[0] > SLEEP_NS]
    workers = {c[2] for c in waits}
    sends = [c for c in calls if c[3] == 'sendmsg' and c[2] in workers]
    if not sends:
        return workers, False
    recvs = [c for c in calls if c[3] == 'recvmsg' and c[2] not in workers]
    kicks = [c for c in calls if c[3] == 'futex' and c[2] not in workers and
             c[1] - c[0] <= SLEEP_NS]
    wait_ends = collections.defaultdict(list)
    for c in waits:
        wait_ends[c[2]].append(c[1])
    recv_ends = sorted(c[1] for c in recvs)
    kick_starts = [c[0] for c in kicks]
    to_wake, wake, to_send, send = [], [], [], []
    for s, e, tid, _, _ in sends:
        ends = wait_ends[tid]
        i = bisect.bisect_right(ends, s) - 1
        if i < 0:
            continue
        woke = ends[i]
        to_send.append(s - woke)
        send.append(e - s)
        j = bisect.bisect_right(recv_ends, woke) - 1
        if j >= 0:
            to_wake.append(woke - recv_ends[j])
        k = bisect.bisect_right(kick_starts, woke) - 1
        if k >= 0:
            wake.append(woke - kick_starts[k])
    if not to_send:
        return workers, False
    print(f'{len(sends)} responses sent by scheduler threads; medians:')
    if to_wake:
        print(f'  recvmsg end -> scheduler thread awake  {us(to_wake)} '
              f'(the wake: {us(wake) if wake else "-"})')
    print(f'  awake -> sendmsg                       {us(to_send)}')
    print(f'  sendmsg                                {us(send)}')
    if cuda is None:
        print('  no CUDA trace')
        return workers, True
    mine = [c for c in cuda if c[2] in workers]
    runs, run = [], []
    for c in mine:
        if run and (c[2] != run[-1][2] or c[0] - run[-1][1] > CUDA_GAP_NS):
            runs.append(run)
            run = []
        run.append(c)
    if run:
        runs.append(run)
    if not runs:
        print('  no CUDA calls on scheduler threads')
        return workers, True
    usual = print_sequence(runs, '  ')
    send_starts = collections.defaultdict(list)
    for s, _, tid, _, _ in sends:
        send_starts[tid].append(s)
    after = []
    for r in usual:
        starts = send_starts[r[-1][2]]
        i = bisect.bisect_left(starts, r[-1][1])
        if i < len(starts):
            after.append(starts[i] - r[-1][1])
    if after:
        print(f'  last CUDA call\'s end -> sendmsg        {us(after)}')
    return workers, True


def in_place(calls, cuda, workers):
    """Requests answered on the thread that received them: direct runs, and
    RPCs with no device work (Echo). Each sendmsg pairs with the last
    recvmsg that thread ended after its previous sendmsg."""
    recv_ends = collections.defaultdict(list)
    for c in calls:
        if c[3] == 'recvmsg' and c[2] not in workers:
            recv_ends[c[2]].append(c[1])
    cuda_of = collections.defaultdict(list)
    for c in cuda or []:
        cuda_of[c[2]].append(c)
    cuda_starts = {tid: [c[0] for c in v] for tid, v in cuda_of.items()}
    last_send = {}
    plain, ran = [], []
    for s, e, tid, name, _ in calls:
        if name != 'sendmsg' or tid in workers:
            continue
        ends = recv_ends[tid]
        i = bisect.bisect_right(ends, s) - 1
        previous, last_send[tid] = last_send.get(tid, -1), e
        if i < 0 or ends[i] < previous:
            continue
        got = ends[i]
        starts = cuda_starts.get(tid, [])
        mine = cuda_of[tid][bisect.bisect_left(starts, got):
                            bisect.bisect_left(starts, s)]
        (ran if mine else plain).append((got, s, e, mine))
    if not plain and not ran:
        return False
    print(f'{len(plain) + len(ran)} responses sent by the thread that '
          f'received the request; medians:')
    for label, group in (('without CUDA calls (Echo)', plain),
                         ('with CUDA calls (direct runs)', ran)):
        if not group:
            continue
        print(f'  {label}, {len(group)}:')
        print(f'    recvmsg end -> sendmsg               '
              f'{us([s - got for got, s, _, _ in group])}')
        print(f'    sendmsg                              '
              f'{us([e - s for _, s, e, _ in group])}')
    if ran:
        print(f'    recvmsg end -> first CUDA call       '
              f'{us([r[3][0][0] - r[0] for r in ran])}')
        usual = print_sequence(ran, '    ', lambda r: r[3])
        print(f'      last CUDA call\'s end -> sendmsg    '
              f'{us([s - mine[-1][1] for _, s, _, mine in usual])}')
    elif cuda is None:
        print('  no CUDA trace')
    return True


def timeline(args):
    db = sqlite3.connect(args.sqlite)
    names = dict(db.execute('SELECT id, value FROM StringIds'))
    worker_chains = {cid for (cid,) in db.execute(
        'SELECT DISTINCT id FROM OSRT_CALLCHAINS WHERE symbol IN '
        '(SELECT id FROM StringIds WHERE value LIKE ?)',
        ('%Scheduler::WorkerLoop%',))}
    calls = [(s, e, tid, names[n], chain) for s, e, tid, n, chain in db.execute(
        'SELECT start, end, globalTid, nameId, callchainId FROM OSRT_API '
        'ORDER BY start')]
    tables = {t for (t,) in db.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table'")}
    cuda = None
    if 'CUPTI_ACTIVITY_KIND_RUNTIME' in tables:
        cuda = [(s, e, tid, names[n].split('_v')[0])
                for s, e, tid, n in db.execute(
                    'SELECT start, end, globalTid, nameId FROM '
                    'CUPTI_ACTIVITY_KIND_RUNTIME ORDER BY start')]
        cuda = [c for c in cuda if not c[3].startswith('cuKernelGetName')]
    workers, any_handed_off = handed_off(calls, cuda, worker_chains)
    if not in_place(calls, cuda, workers) and not any_handed_off:
        sys.exit(f'{args.sqlite}: no responses (OS runtime trace)')


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
    b.add_argument('--launches', type=int)
    t = sub.add_parser('timeline')
    t.add_argument('sqlite')
    args = p.parse_args()
    {'stages': stages, 'busy': busy, 'timeline': timeline}[args.cmd](args)


if __name__ == '__main__':
    main()
