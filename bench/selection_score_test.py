#!/usr/bin/env python3
"""Tests of selection_score.py on shapes TSVs written here: the ratio math
at and around the limits, ties, an automatic choice that was not measured,
grouping by op, dtype and class, the table hit rate, the targets and the
exit status."""
import contextlib
import io
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import selection_score  # noqa: E402

DEVICE = "NVIDIA H200|9.0|v1"


def key(op, dtype):
    return "%s|%s|b0|x|%s" % (op, dtype, DEVICE)


def line(label, op, dtype, automatic, source, times):
    """A shapes TSV line; times {variant: seconds}, written fastest first
    as tune writes them."""
    measured = ",".join("%s=%.9g" % kv
                        for kv in sorted(times.items(), key=lambda kv: kv[1]))
    return "\t".join([label, key(op, dtype), automatic, source, measured])


class SelectionScoreTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def write(self, name, lines):
        path = os.path.join(self.dir.name, name)
        with open(path, "w") as f:
            f.write("# shape\tkey\tautomatic\tsource\tmeasured seconds, "
                    "fastest first\n")
            f.write("".join(ln + "\n" for ln in lines))
        return path

    def score(self, *args):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = selection_score.main(["selection_score.py", *args])
        return rc, out.getvalue()

    def cells(self, text, op, dtype, cls):
        for ln in text.splitlines():
            c = [x.strip() for x in ln.strip().strip("|").split("|")]
            if c[:3] == [op, dtype, cls]:
                return dict(zip(["op", "dtype", "class", "shapes", "w10",
                                 "w5", "worst", "worst_shape", "table",
                                 "verdict"], c))
        self.fail("no row %s %s %s in:\n%s" % (op, dtype, cls, text))

    def test_ratio_math_at_the_limits(self):
        # Automatic at 1.00x, exactly 1.05x, exactly 1.10x, 1.12x, 1.3x
        # the fastest: 3 of 5 within 10% (the limit counts), 2 within 5%.
        rows = [line("%d,64" % i, "transpose", "float32", "t.a", "heuristic",
                     {"t.a": 1e-5 * r, "t.b": 1e-5})
                for i, r in enumerate([1.0, 1.05, 1.10, 1.12, 1.3])]
        # "1.0": t.a ties t.b, so the first is a tie, not a loss.
        _, text = self.score(self.write("s.tsv", rows))
        c = self.cells(text, "transpose", "float32", "2d")
        self.assertEqual(c["shapes"], "5")
        self.assertEqual(c["w10"], "3 (60.0%)")
        self.assertEqual(c["w5"], "2 (40.0%)")
        self.assertEqual(c["worst"], "1.30x")
        self.assertEqual(c["worst_shape"],
                         "`4,64`: t.a (heuristic), fastest t.b")

    def test_a_tie_is_not_a_miss(self):
        rows = [line("8,8", "transpose", "float32", "t.b", "heuristic",
                     {"t.a": 2e-6, "t.b": 2e-6})]
        _, text = self.score(self.write("s.tsv", rows))
        c = self.cells(text, "transpose", "float32", "2d")
        self.assertEqual((c["w10"], c["w5"], c["worst"]),
                         ("1 (100.0%)", "1 (100.0%)", "1.00x"))

    def test_an_unmeasured_choice_is_an_infinite_miss(self):
        rows = [line("8,8", "transpose", "float32", "t.a", "heuristic",
                     {"t.a": 1e-6}),
                line("9,9", "transpose", "float32", "t.gone", "table",
                     {"t.a": 1e-6, "t.b": 2e-6})]
        _, text = self.score(self.write("s.tsv", rows))
        c = self.cells(text, "transpose", "float32", "2d")
        self.assertEqual(c["shapes"], "2")  # kept, not dropped
        self.assertEqual(c["w10"], "1 (50.0%)")
        self.assertEqual(c["worst"], "inf")
        self.assertIn("`9,9`: t.gone, not measured (table)", c["worst_shape"])
        self.assertIn("worst", c["verdict"])

    def test_groups_by_dtype_and_counts_table_hits(self):
        rows = [line("64,64,64", "gemm", "float32", "g.a", "table",
                     {"g.a": 1e-5, "g.b": 3e-5}),
                line("64,64,65", "gemm", "float32", "g.a", "heuristic",
                     {"g.a": 1e-5, "g.b": 3e-5}),
                line("64,64,64", "gemm", "bfloat16", "g.b", "table",
                     {"g.a": 1e-5, "g.b": 3e-5})]
        second = [line("64,64,66", "gemm", "float32", "g.b", "table",
                       {"g.a": 1e-5, "g.b": 1.04e-5})]
        _, text = self.score(self.write("a.tsv", rows),
                             self.write("b.tsv", second))
        f32 = self.cells(text, "gemm", "float32", "plain")
        bf16 = self.cells(text, "gemm", "bfloat16", "plain")
        self.assertEqual((f32["shapes"], f32["table"], f32["w5"]),
                         ("3", "2 (66.7%)", "3 (100.0%)"))
        self.assertEqual((bf16["shapes"], bf16["table"], bf16["worst"]),
                         ("1", "1 (100.0%)", "3.00x"))

    def test_classes_under_an_all_row(self):
        rows = [line("2,3,4,5", "convert_layout", "float16", "l.a",
                     "heuristic", {"l.a": 1e-6}),
                line("2,3,4 perm=2,0,1", "convert_layout", "float16", "l.b",
                     "heuristic", {"l.a": 1e-6, "l.b": 2e-6}),
                line("7,3 direction=aos_to_soa", "convert_layout", "float16",
                     "l.a", "heuristic", {"l.a": 1e-6})]
        _, text = self.score(self.write("s.tsv", rows))
        self.assertEqual(self.cells(text, "layout", "float16", "all")
                         ["shapes"], "3")
        self.assertEqual(self.cells(text, "layout", "float16", "permutation")
                         ["worst"], "2.00x")
        self.assertEqual(self.cells(text, "layout", "float16", "nchw_nhwc")
                         ["worst"], "1.00x")
        self.assertEqual(self.cells(text, "layout", "float16", "aos_soa")
                         ["shapes"], "1")

    def test_targets_and_exit_status(self):
        good = [line("%d,1024" % i, "gelu_layer_norm", "bfloat16", "n.a",
                     "heuristic", {"n.a": 1e-6, "n.b": 2e-6})
                for i in range(200)]
        path = self.write("good.tsv", good)
        rc, text = self.score("--fail-on-miss", path)
        self.assertEqual(rc, 0)
        self.assertEqual(self.cells(text, "gelu-ln", "bfloat16", "default")
                         ["verdict"], "PASS")
        self.assertIn("1 of 1 op and dtype rows PASS", text)
        # One shape short of the count.
        rc, text = self.score("--fail-on-miss",
                              self.write("short.tsv", good[1:]))
        self.assertEqual(rc, 1)
        self.assertEqual(self.cells(text, "gelu-ln", "bfloat16", "default")
                         ["verdict"], "MISS: shapes")
        # 7 of 200 at 1.2x: 96.5% within 10%, 96.5% within 5%, under a
        # 97% target; a 1.1x worst-ratio target misses too.
        bad = good[7:] + [line("%d,8" % i, "gelu_layer_norm", "bfloat16",
                               "n.a", "heuristic", {"n.a": 1.2e-6,
                                                    "n.b": 1e-6})
                          for i in range(7)]
        rc, text = self.score("--worst=1.1", self.write("bad.tsv", bad))
        self.assertEqual(rc, 0)  # without --fail-on-miss
        self.assertEqual(self.cells(text, "gelu-ln", "bfloat16", "default")
                         ["verdict"], "MISS: within 10%, worst")
        rc, text = self.score("--within-10=0.96", "--within-5=0.97",
                              self.write("bad.tsv", bad))
        self.assertEqual(self.cells(text, "gelu-ln", "bfloat16", "default")
                         ["verdict"], "MISS: within 5%")

    def test_malformed_line_names_its_place(self):
        path = self.write("m.tsv", ["8,8\t" + key("transpose", "float32")
                                    + "\tt.a\theuristic\tt.a"])
        with self.assertRaises(SystemExit) as e:
            self.score(path)
        self.assertIn("m.tsv:2", str(e.exception.code))


if __name__ == "__main__":
    unittest.main()
