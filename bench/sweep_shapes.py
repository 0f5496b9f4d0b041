#!/usr/bin/env python3
"""The random shapes of `coalesce tune OP --random_shapes=N
[--shape_class=C]` (RandomShapes in client/cli/tune_shapes.cc:
std::mt19937_64 and libstdc++'s uniform_real_distribution, re-implemented
bit for bit; bench/sweep_shapes_test.py holds the two together), the text
of a tune shape and its class, and the selection key's log2 buckets and
alignment classes (kernels/selection/selection_key.cc), for the tools that
refit the selection estimates on an H200 sweep (gemm_selection_fit.py,
transpose_selection_data.py) or score it (selection_score.py), and their
tables' reader. Plain Python 3.8+."""

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


# The shape classes of each op, its default first (client/cli/tune_shapes.h).
SHAPE_CLASSES = {
    "transpose": ("2d", "batched"),
    "gemm": ("plain", "transposed", "batched"),
    "layout": ("nchw_nhwc", "nhwc_nchw", "permutation", "aos_soa",
               "soa_aos"),
    "gelu-ln": ("default",),
}

# The op field of a selection key -> the op's name in `coalesce tune`.
KEY_OPS = {"transpose": "transpose", "gemm": "gemm",
           "convert_layout": "layout", "gelu_layer_norm": "gelu-ln"}


def random_tune_shapes(op, count, seed, max_bytes, shape_class=None,
                       element_bytes=4):
    """RandomShapes(op, shape_class, count, seed, max_bytes, element_bytes)
    of client/cli/tune_shapes.cc: the tune shapes as `coalesce tune` writes
    them ("DIMS[ flag=value]...")."""
    classes = SHAPE_CLASSES.get(op)
    if classes is None:
        raise ValueError("random_shapes: no op %r" % op)
    cls = shape_class or classes[0]
    if cls not in classes:
        raise ValueError("random_shapes: %s has no class %r" % (op, cls))
    rng = MT19937_64(seed)

    def canonical():  # std::generate_canonical<double, 53> of a 64-bit engine
        r = float(rng()) / 18446744073709551616.0
        return r if r < 1.0 else math.nextafter(1.0, 0.0)

    def log_uniform(lo, hi):
        a, b = math.log(lo), math.log(hi)
        return min(max(int(math.exp(canonical() * (b - a) + a)), lo), hi)

    def size(lo, hi):
        a, b = math.log(lo), math.log(hi)
        v = int(math.exp(canonical() * (b - a) + a))
        if rng() % 2 == 0:
            v = max(64, (v + 32) // 64 * 64)
        return min(max(v, lo), hi)

    def gemm_elems(m, n, k):
        return m * k + k * n + m * n

    out = []
    while len(out) < count:
        settings = ""
        elems = None  # None: the product of s
        # Every call in the order of the C++ (braced lists left to right).
        if cls == "2d":
            s = [size(1, 16384), size(1, 16384)]
        elif cls == "plain":
            s = [size(1, 8192), size(1, 8192), size(1, 8192)]
            elems = gemm_elems(*s)
        elif cls == "nchw_nhwc":
            c = 3 if rng() % 3 == 0 else size(1, 512)
            hw = size(1, 224)
            s = [size(1, 64), c, hw, hw]
        elif cls == "default":
            s = [size(1, 32768), size(1, 16384)]
        elif cls == "batched" and op == "transpose":
            b = log_uniform(2, 512)
            s = [b, size(1, 8192), size(1, 8192)]
        elif cls == "transposed":
            s = [size(1, 8192), size(1, 8192), size(1, 8192)]
            elems = gemm_elems(*s)
            t = 1 + rng() % 3
            settings = " trans_a=%d trans_b=%d" % (t & 1, t >> 1)
        elif cls == "batched":  # gemm
            b = log_uniform(2, 512)
            s = [size(1, 4096), size(1, 4096), size(1, 4096)]
            elems = b * gemm_elems(*s)
            settings = " batch=%d" % b
        elif cls == "nhwc_nchw":
            c = 3 if rng() % 3 == 0 else size(1, 512)
            hw = size(1, 224)
            s = [size(1, 64), hw, hw, c]
            settings = " from=NHWC to=NCHW"
        elif cls == "permutation":
            rank = 3 + rng() % 3
            hi = {3: 2048, 4: 256, 5: 64}[rank]
            s = [size(1, hi) for _ in range(rank)]
            perm = list(range(rank))
            if rng() % 8 == 0:
                i = rng() % rank
                j = (i + 1 + rng() % (rank - 1)) % rank
                s[i] = s[j] = 1
                perm[i], perm[j] = perm[j], perm[i]
            else:
                for i in range(rank - 1, 0, -1):
                    j = rng() % (i + 1)
                    perm[i], perm[j] = perm[j], perm[i]
            settings = " perm=" + ",".join(map(str, perm))
        else:  # aos_soa, soa_aos
            f = 2 + rng() % 31
            n = size(1, 1 << 22)
            if cls == "aos_soa":
                s, settings = [n, f], " direction=aos_to_soa"
            else:
                s, settings = [f, n], " direction=soa_to_aos"
        if elems is None:
            elems = math.prod(s)
        if elems * element_bytes <= max_bytes:
            out.append(",".join(map(str, s)) + settings)
    return out


def random_shapes(op, count, seed, max_bytes):
    """RandomShapes of the op's default class, float32, as tuples of the
    dims: (m, n, k) for "gemm", (rows, cols) for "transpose", (n, c, h, w)
    for "layout", (rows, hidden) for "gelu-ln"."""
    return [parse_tune_shape(s)[0]
            for s in random_tune_shapes(op, count, seed, max_bytes)]


def parse_tune_shape(text):
    """("DIMS[ flag=value]...") -> (dims tuple, {flag: value})."""
    parts = text.split()
    dims = tuple(int(d) for d in parts[0].split(","))
    settings = {}
    for p in parts[1:]:
        flag, _, value = p.partition("=")
        if not flag or not value:
            raise ValueError("tune shape %r: %r is no flag=value" % (text, p))
        settings[flag] = value
    return dims, settings


def shape_class(op, text):
    """The shape class a tune shape of op (a tune op name or a selection
    key's op) belongs to, read from its dims and settings (flags given on
    tune's command line for every shape are not in them); layout shapes
    without settings are taken as NCHW -> NHWC, the conversion tune sweeps
    unless told otherwise."""
    op = KEY_OPS.get(op, op)
    dims, settings = parse_tune_shape(text)
    if op == "transpose":
        return "batched" if len(dims) == 3 else "2d"
    if op == "gemm":
        tags = []
        if int(settings.get("batch", "0")) > 0:
            tags.append("batched")
        if settings.get("trans_a", "0") != "0" or \
                settings.get("trans_b", "0") != "0":
            tags.append("transposed")
        return "+".join(tags) or "plain"
    if op == "layout":
        if "perm" in settings:
            return "permutation"
        if settings.get("direction") == "soa_to_aos":
            return "soa_aos"
        if "direction" in settings or "aos_fields" in settings:
            return "aos_soa"
        if settings.get("from", "NCHW").upper() == "NHWC":
            return "nhwc_nchw"
        return "nchw_nhwc"
    return "default"


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
