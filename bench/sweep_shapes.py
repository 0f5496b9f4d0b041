#!/usr/bin/env python3
"""The random shapes of `coalesce tune OP --random_shapes=N` (RandomShapes in
client/cli/selection_commands.cc: std::mt19937_64 and libstdc++'s
uniform_real_distribution, re-implemented bit for bit) and the selection
key's log2 buckets and alignment classes (kernels/selection/selection_key.cc),
for the tools that refit the selection estimates on an H200 sweep
(gemm_selection_fit.py, transpose_selection_data.py), and their tables' reader.
Plain Python 3."""

import math
import sys

MASK64 = (1 << 64) - 1


class MT19937_64:
    """std::mt19937_64."""

    def __init__(self, seed):
        self.mt = [seed & MASK64]
        for i in range(1, 312):
            prev = self.mt[-1]
            self.mt.append((6364136223846793005 * (prev ^ (prev >> 62)) + i)
                           & MASK64)
        self.index = 312

    def __call__(self):
        if self.index >= 312:
            mt = self.mt
            for i in range(312):
                x = (mt[i] & 0xFFFFFFFF80000000) | (mt[(i + 1) % 312]
                                                    & 0x7FFFFFFF)
                mt[i] = mt[(i + 156) % 312] ^ (x >> 1) ^ (
                    0xB5026F5AA96619E9 if x & 1 else 0)
            self.index = 0
        y = self.mt[self.index]
        self.index += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        y ^= y >> 43
        return y & MASK64


def random_shapes(op, count, seed, max_bytes):
    """RandomShapes(op, count, seed, max_bytes) for "gemm" (m, n, k) and
    "transpose" (rows, cols), as tuples."""
    rng = MT19937_64(seed)

    def canonical():  # std::generate_canonical<double, 53> of a 64-bit engine
        r = float(rng()) / 18446744073709551616.0
        return r if r < 1.0 else math.nextafter(1.0, 0.0)

    def size(lo, hi):
        a, b = math.log(lo), math.log(hi)
        v = int(math.exp(canonical() * (b - a) + a))
        if rng() % 2 == 0:
            v = max(64, (v + 32) // 64 * 64)
        return min(max(v, lo), hi)

    out = []
    while len(out) < count:
        if op == "gemm":
            m, n, k = size(1, 8192), size(1, 8192), size(1, 8192)
            s, elems = (m, n, k), m * k + k * n + m * n
        elif op == "transpose":
            s = (size(1, 16384), size(1, 16384))
            elems = s[0] * s[1]
        else:
            raise ValueError("random_shapes: op %r is not mirrored" % op)
        if elems * 4 <= max_bytes:
            out.append(s)
    return out


def log2_bucket(x):
    b = 0
    while (1 << b) < x and b < 62:
        b += 1
    return b


def align_class(x):
    a = 1
    while a < 16 and x % (2 * a) == 0:
        a *= 2
    return a


def read_table(path, prefix, key_fields, short_names=False):
    """{shape key: {variant: seconds}} of a tuning table's entries whose key
    starts with prefix (e.g. "gemm|float32|"), each key its first
    key_fields fields (the device and version fields dropped); variant
    names shortened to their last component with short_names."""
    table = {}
    with open(path) as f:
        for line in f:
            if not line.startswith("entry " + prefix):
                continue
            cols = line.rstrip("\n").split("\t")
            key = "|".join(cols[0][len("entry "):].split("|")[:key_fields])
            table[key] = {}
            for kv in cols[3].split(","):
                name, seconds = kv.split("=")
                if short_names:
                    name = name.rsplit(".", 1)[-1]
                table[key][name] = float(seconds)
    return table


def last_of_each_key(shapes, table, shape_key, what):
    """[(shape, {variant: seconds})] of the shapes with their own
    measurement: the sweep writes its table shape by shape, a later shape's
    entry replacing an earlier one's, so each key's entry is its last
    shape's. Exits, naming what, if the table's keys are not the shapes'."""
    last = {shape_key(*s): i for i, s in enumerate(shapes)}
    if set(last) != set(table):
        sys.exit("%s: its keys are not those of the shapes" % what)
    return [(s, table[shape_key(*s)]) for i, s in enumerate(shapes)
            if last[shape_key(*s)] == i]
