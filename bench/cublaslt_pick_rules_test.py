#!/usr/bin/env python3
"""Tests of cublaslt_pick_rules.py: the shapes it draws from testdata, its
reading of coalesce-cublaslt-algos lines, and its mirror of
PickLtAlgorithm, including the constants it shares with
kernels/cuda/gemm/cublaslt_pick.h."""
import os
import re
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cublaslt_pick_rules as rules  # noqa: E402


def line(shape, rank, split, workspace, waves, us):
    # coalesce-cublaslt-algos' format (bench/cublaslt_algos.cc).
    return ("%-22s rank %d algo %3d tile %3d splitk %4d reduction %d stages "
            "%3d workspace %9d waves %6.2f  %9.2f us\n" %
            (shape, rank, 20, 16, split, 2, 28, workspace, waves, us))


def offer(split, workspace, us, waves=0.0):
    return {"split": split, "workspace": workspace, "waves": waves, "us": us}


class PickRulesTest(unittest.TestCase):
    def test_constants_match_the_header(self):
        with open(os.path.join(HERE, "..", "kernels", "cuda", "gemm",
                               "cublaslt_pick.h")) as f:
            header = f.read()
        self.assertIn("kLtHeuristicResults = %d;" % rules.HEURISTIC_RESULTS,
                      header)
        self.assertIn("kLtNoSplitMaxK = %d;" % rules.NO_SPLIT_MAX_K, header)
        self.assertIn("kLtWideNoSplitMaxK = %d;" % rules.WIDE_NO_SPLIT_MAX_K,
                      header)
        self.assertIn("kLtNoSplitMinWaves = %.1ff;" % rules.NO_SPLIT_MIN_WAVES,
                      header)
        self.assertIn("kLtNoSplitMinStepsPerSplit = %d;" %
                      rules.NO_SPLIT_MIN_STEPS, header)
        self.assertIn("kLtNoSplitMinFirstSplits = %d;" %
                      rules.NO_SPLIT_MIN_FIRST_SPLITS, header)

    def test_split_shapes_keeps_float32_split_candidates(self):
        lines = [
            "# header\n",
            "float32\t4755,2,137,1,0,0\tcublaslt=2e-05\n",
            "float32\t64,64,541,2,1,1\tcublaslt=2e-05\n",
            "float32\t7,134,128,1,0,0\tnaive=7e-06\n",  # K <= 128
            "float32\t1,448,1154,31,0,0\tnaive=2e-05\n",  # GEMV
            "float32\t256,256,300,1,0,0\tnaive=2e-05\n",  # 64K outputs
            "bfloat16\t4755,2,137,1,0,0\tcublaslt=2e-05\n",
        ]
        self.assertEqual(rules.split_shapes(lines),
                         ["4755,2,137,1", "64,64,541,2,ta,tb"])

    def test_reads_the_tools_lines(self):
        text = [
            line("4755,2,137", 0, 18, 684720, 3.39, 24.58),
            line("4755,2,137", 1, 1, 0, 0.03, 8.10),
            "4755,2,137             first 24.58 us, fastest rank 1 8.10 us\n",
        ]
        shapes = rules.read_offers(text)
        self.assertEqual(list(shapes), ["4755,2,137"])
        self.assertEqual(shapes["4755,2,137"], [
            offer(18, 684720, 24.58, 3.39), offer(1, 0, 8.10, 0.03)])

    def test_pick_mirrors_the_variant(self):
        split_first = [offer(18, 900, 20.0), offer(1, 0, 8.0)]
        self.assertEqual(rules.pick(split_first, False)["us"], 20.0)
        self.assertEqual(rules.pick(split_first, True)["us"], 8.0)
        # -1 (no split-K attribute) counts as unsplit, as split_k <= 1 does.
        self.assertEqual(
            rules.pick([offer(4, 10, 9.0), offer(-1, 0, 7.0)], True)["us"],
            7.0)
        # Every offer splits: the first of the fewest splits, or of the
        # least workspace.
        all_split = [offer(8, 500, 9.0), offer(4, 100, 8.0),
                     offer(2, 700, 6.0), offer(2, 100, 5.0)]
        self.assertEqual(rules.pick(all_split, True)["us"], 6.0)
        self.assertEqual(rules.pick(all_split, True, "workspace")["us"], 8.0)
        # Only the first HEURISTIC_RESULTS offers are asked for.
        many = [offer(8, 500, 9.0)] * rules.HEURISTIC_RESULTS + [
            offer(1, 0, 1.0)]
        self.assertEqual(rules.pick(many, True)["us"], 9.0)

    def test_score_against_the_fastest_offer(self):
        shapes = {
            "4755,2,137": [offer(18, 900, 24.0, 3.4), offer(1, 0, 8.0)],
            "64,64,100": [offer(4, 900, 5.0), offer(1, 0, 10.0)],
        }
        # The variant: K = 137 avoids the split where the first offer fills
        # 3.4 waves, K = 100 always.
        _, variant, fallback = rules.rules()[0]
        geo, over10, over25, worst, at = rules.score(shapes, variant,
                                                     fallback)
        self.assertAlmostEqual(geo, 2.0 ** 0.5)
        self.assertEqual((over10, over25, worst, at), (1, 1, 2.0, "64,64,100"))
        k128 = dict((n, r) for n, r, _ in rules.rules())[
            "K <= 128; fewest splits"]
        geo, over10, over25, worst, at = rules.score(shapes, k128, "split")
        self.assertAlmostEqual(geo, (3.0 * 2.0) ** 0.5)
        self.assertEqual((over10, over25, worst, at), (2, 2, 3.0, "4755,2,137"))
        narrow = {"4755,2,137": [offer(18, 900, 24.0, 0.1), offer(1, 0, 8.0)]}
        self.assertEqual(rules.score(narrow, variant, fallback)[3], 3.0)
        # Under 2 steps of K per split: avoided whatever the waves.
        thin = {"64,168,136,1,tb": [offer(88, 900, 28.9, 0.12),
                                    offer(1, 0, 6.8)]}
        self.assertEqual(rules.score(thin, variant, fallback)[3], 1.0)
        # 256 splits or more: avoided at any K, the fewest splits taken.
        absurd = {"7,96,2048": [offer(264, 2163379, 53.4, 0.15),
                                offer(33, 86016, 9.0), offer(264, 16, 409.5)]}
        self.assertEqual(rules.score(absurd, variant, fallback)[3], 1.0)
        never = rules.score(shapes, lambda k, first: False, "split")
        self.assertAlmostEqual(never[0], 3.0 ** 0.5)
        self.assertEqual(never[3:], (3.0, "4755,2,137"))

    def test_table_shapes_take_each_entrys_buckets_and_alignment(self):
        v = "|NVIDIA H200|9.0|vb25d6121\tw\t1e-06\tw=1e-06\n"
        lines = [
            "device NVIDIA H200|9.0\n",
            # m bucket 4 (9-16) of alignment 4: 12; n bucket 8 (129-256) of
            # alignment 16: 176 (nearest 181); k bucket 9 of alignment 16:
            # 368 (nearest 362).
            "entry gemm|float32|b0|m4|n8|k9|a4.16.16|t11" + v,
            "entry gemm|float32|b6|m0|n2|k13|a1.4.16|t01" + v,
            "entry gemm|float32|b0|m4|n8|k9|a4.16.16|t11" + v,  # a repeat
            "entry gemm|bfloat16|b0|m4|n8|k9|a4.16.16|t00" + v,
            "entry transpose|float32|b0|r4|c4|a16.16" + v,
        ]
        self.assertEqual(rules.table_shapes(lines),
                         ["1,4,5792,33,tb", "12,176,368,1,ta,tb"])
        for shape in rules.table_shapes(lines):
            m, n, k = map(int, shape.split(",")[:3])
            self.assertEqual(rules.align_class(k), 16)
        self.assertIsNone(rules.bucket_value(1, 1))  # bucket 1 holds only 2

    def test_moved_lists_the_shapes_whose_pick_changed(self):
        shapes = {
            # All split: the least workspace before, the fewest splits now.
            "16,192,512": [offer(264, 4326599, 55.7, 0.31),
                           offer(33, 196608, 7.7), offer(264, 48, 110.5)],
            # Unsplit second offer: both revisions take it.
            "64,64,100": [offer(4, 900, 5.0), offer(1, 0, 10.0)],
        }
        self.assertEqual(rules.moved(shapes), [("16,192,512", 110.5, 7.7)])

    def test_every_rule_names_itself(self):
        names = [name for name, _, _ in rules.rules()]
        self.assertIn(rules.previous_rule()[0], names)
        self.assertEqual(len(names), len(set(names)))
        self.assertTrue(re.match(
            r"K <= 128, or K <= 512 and \(waves >= 0.2 or K / split < 2\), "
            r"or first split >= 256; fewest splits \(the variant\)",
            names[0]))


if __name__ == "__main__":
    unittest.main()
