#!/usr/bin/env python3
"""Tests of sweep_shapes.py: its random tune shapes against the C++ draws
(tune-shapes-print, the path given as the first argument) for every op,
class, element size and a few seeds; the default classes against the
shapes an H200 sweep measured (kernels/cuda/testdata); and what each class
draws (bounds, settings, permutations, copies), which holds for the C++
too when the two agree."""
import math
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import sweep_shapes  # noqa: E402
from sweep_shapes import (SHAPE_CLASSES, parse_tune_shape,  # noqa: E402
                          random_tune_shapes, shape_class)

TESTDATA = os.path.join(HERE, "..", "kernels", "cuda", "testdata")
PRINT = None  # tune-shapes-print, from argv
MIB = 1 << 20


def max_bytes(op):  # what scripts/gpu-check.sh's tune step passes
    return 64 * MIB if op == "gemm" else 256 * MIB


class CppAgreementTest(unittest.TestCase):
    def cpp(self, op, cls, count, seed, limit, element_bytes):
        r = subprocess.run([PRINT, op, cls, str(count), str(seed), str(limit),
                            str(element_bytes)], capture_output=True,
                           text=True, check=True)
        return r.stdout.splitlines()

    def test_every_class_dtype_and_seed(self):
        if PRINT is None:
            self.skipTest("no tune-shapes-print given")
        for op, classes in SHAPE_CLASSES.items():
            for cls in classes:
                for element_bytes in (4, 2):
                    for seed in (7, 8, 9, 12345):
                        with self.subTest(op=op, cls=cls, seed=seed,
                                          element_bytes=element_bytes):
                            want = self.cpp(op, cls, 200, seed, max_bytes(op),
                                            element_bytes)
                            got = random_tune_shapes(op, 200, seed,
                                                     max_bytes(op), cls,
                                                     element_bytes)
                            self.assertEqual(len(want), 200)
                            self.assertEqual(got, want)

    def test_empty_class_is_the_default(self):
        if PRINT is None:
            self.skipTest("no tune-shapes-print given")
        for op, classes in SHAPE_CLASSES.items():
            self.assertEqual(self.cpp(op, "", 20, 7, max_bytes(op), 4),
                             self.cpp(op, classes[0], 20, 7, max_bytes(op), 4))

    def test_unknown_class_is_refused(self):
        if PRINT is None:
            self.skipTest("no tune-shapes-print given")
        r = subprocess.run([PRINT, "gemm", "nchw_nhwc", "3", "7", "1000", "4"],
                           capture_output=True, text=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("plain, transposed, batched", r.stderr)
        with self.assertRaises(ValueError):
            random_tune_shapes("gemm", 3, 7, 1000, "nchw_nhwc")


class DefaultClassTest(unittest.TestCase):
    def shapes_of(self, name):
        with open(os.path.join(TESTDATA, name)) as f:
            return [line.split("\t")[0] for line in f
                    if line.strip() and not line.startswith("#")]

    def test_layout_default_is_what_the_h200_sweep_measured(self):
        # Every shape of those sweeps, in order: the draws are unchanged.
        for seed in (7, 8):
            self.assertEqual(
                random_tune_shapes("layout", 200, seed, 256 * MIB),
                self.shapes_of("layout_selection_seed%d.txt" % seed))

    def test_transpose_default_holds_the_h200_sweep_in_order(self):
        # Those tables keep the last shape of each key: a subsequence.
        for seed in (7, 8):
            drawn = random_tune_shapes("transpose", 200, seed, 256 * MIB)
            kept = self.shapes_of("transpose_selection_seed%d.txt"
                                        % seed)
            it = iter(drawn)
            self.assertTrue(all(s in it for s in kept), seed)

    def test_random_shapes_keeps_its_tuples(self):
        self.assertEqual(sweep_shapes.random_shapes("gemm", 3, 7, 64 * MIB),
                         [(896, 64, 64), (1792, 64, 906), (64, 1805, 7849)])


class ClassTest(unittest.TestCase):
    def draws(self, op, cls, element_bytes=4, seed=7):
        return [(s,) + parse_tune_shape(s) for s in random_tune_shapes(
            op, 200, seed, max_bytes(op), cls, element_bytes)]

    def test_bytes_bounded_by_the_element_size(self):
        for op, classes in SHAPE_CLASSES.items():
            for cls in classes:
                for element_bytes in (4, 2):
                    largest = 0
                    for _, dims, settings in self.draws(op, cls,
                                                        element_bytes):
                        if op == "gemm":
                            m, n, k = dims
                            e = (m * k + k * n + m * n) * int(
                                settings.get("batch", "1"))
                        else:
                            e = math.prod(dims)
                        largest = max(largest, e * element_bytes)
                    self.assertLessEqual(largest, max_bytes(op))
                    # Large tensors are drawn too, not only small ones.
                    self.assertGreater(largest, max_bytes(op) / 8, (op, cls))

    def test_sixteen_bit_draws_differ_only_where_bounded(self):
        # The 2-byte bound admits more shapes, so the sequences part.
        self.assertNotEqual(random_tune_shapes("transpose", 200, 7, 256 * MIB),
                            random_tune_shapes("transpose", 200, 7, 256 * MIB,
                                               None, 2))

    def test_every_draw_reads_back_as_its_class(self):
        for op, classes in SHAPE_CLASSES.items():
            for cls in classes:
                for text, _, _ in self.draws(op, cls):
                    self.assertEqual(shape_class(op, text), cls, text)

    def test_gemm_transposed_always_transposes_something(self):
        seen = set()
        for _, dims, s in self.draws("gemm", "transposed"):
            self.assertEqual(len(dims), 3)
            t = (s["trans_a"], s["trans_b"])
            self.assertNotEqual(t, ("0", "0"))
            seen.add(t)
        self.assertEqual(seen, {("1", "0"), ("0", "1"), ("1", "1")})

    def test_batched_shapes(self):
        batches = [int(s["batch"]) for _, _, s in self.draws("gemm",
                                                             "batched")]
        self.assertGreaterEqual(min(batches), 2)
        self.assertLessEqual(max(batches), 512)
        for _, dims, s in self.draws("transpose", "batched"):
            self.assertEqual(len(dims), 3)
            self.assertEqual(s, {})

    def test_permutations_and_copies(self):
        ranks, copies = set(), 0
        for text, dims, s in self.draws("layout", "permutation"):
            perm = [int(p) for p in s["perm"].split(",")]
            self.assertEqual(sorted(perm), list(range(len(dims))), text)
            ranks.add(len(dims))
            moved = [i for i, p in enumerate(perm) if p != i]
            if moved and all(dims[i] == 1 for i in moved):
                copies += 1
        self.assertEqual(ranks, {3, 4, 5})
        # About one in eight moves only size-1 axes.
        self.assertGreaterEqual(copies, 10)

    def test_layout_directions(self):
        for cls, want in (("nhwc_nchw", {"from": "NHWC", "to": "NCHW"}),
                          ("aos_soa", {"direction": "aos_to_soa"}),
                          ("soa_aos", {"direction": "soa_to_aos"})):
            for _, dims, s in self.draws("layout", cls):
                self.assertEqual(s, want)
        # The NHWC class stores the default class's tensors NHWC.
        nchw = random_tune_shapes("layout", 50, 7, 256 * MIB)
        nhwc = random_tune_shapes("layout", 50, 7, 256 * MIB, "nhwc_nchw")
        for a, b in zip(nchw, nhwc):
            n, c, h, w = parse_tune_shape(a)[0]
            self.assertEqual(parse_tune_shape(b)[0], (n, h, w, c))

    def test_shape_class_of_key_ops_and_hand_written_shapes(self):
        self.assertEqual(shape_class("convert_layout", "2,3,4,5"), "nchw_nhwc")
        self.assertEqual(shape_class("gemm", "4,5,6 batch=3 trans_b=1"),
                         "batched+transposed")
        self.assertEqual(shape_class("gemm", "4,5,6 trans_a=0 trans_b=0"),
                         "plain")
        self.assertEqual(shape_class("gelu_layer_norm", "8,1024"), "default")
        with self.assertRaises(ValueError):
            parse_tune_shape("4,5,6 batch")


if __name__ == "__main__":
    # The one argument that is a file: tune-shapes-print; the rest is
    # unittest's.
    for arg in sys.argv[1:]:
        if os.path.isfile(arg):
            PRINT = os.path.abspath(arg)
            sys.argv.remove(arg)
            break
    unittest.main()
