#!/usr/bin/env python3
"""Tests of sweep_data.py on shapes TSV lines written here: each op's
output line, the classes and default flags, short variant names and four
significant digits, and an op it does not pack."""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sweep_data  # noqa: E402

HEADER = "# shape\tkey\tautomatic\tsource\tmeasured seconds, fastest first\n"


def tsv(lines):
    f = tempfile.NamedTemporaryFile("w", suffix=".tsv", delete=False)
    f.write(HEADER + "".join(x + "\n" for x in lines))
    f.close()
    return f.name


def line(label, op, dtype, times):
    return "\t".join([label, "%s|%s|x|NVIDIA H200|9.0|v1" % (op, dtype),
                      "a", "heuristic", times])


class SweepDataTest(unittest.TestCase):
    def convert(self, *lines):
        path = tsv(lines)
        try:
            return list(sweep_data.convert(path))
        finally:
            os.unlink(path)

    def test_gemm_flags_default_and_set(self):
        out = self.convert(
            line("64,32,16", "gemm", "float16",
                 "gemm.cuda.cublaslt=1.234567e-05,gemm.cuda.naive=2e-05"),
            line("7,8,9 trans_a=1 trans_b=0", "gemm", "float32",
                 "gemm.cuda.naive=3e-06"),
            line("12,3885,9 batch=201", "gemm", "bfloat16",
                 "gemm.cuda.cublaslt=5.565e-05"))
        self.assertEqual(out, [
            "float16\t64,32,16,1,0,0\tcublaslt=1.235e-05,naive=2e-05",
            "float32\t7,8,9,1,1,0\tnaive=3e-06",
            "bfloat16\t12,3885,9,201,0,0\tcublaslt=5.565e-05",
        ])

    def test_layout_classes(self):
        t = "convert_layout.cuda.naive=4e-06"
        out = self.convert(
            line("10,3,86,86", "convert_layout", "float32", t),
            line("40,192,192,3 from=NHWC to=NCHW", "convert_layout",
                 "float16", t),
            line("27,64,5,247 perm=3,0,2,1", "convert_layout", "float32", t),
            line("1936000,11 direction=aos_to_soa", "convert_layout",
                 "float32", t),
            line("11,1936000 direction=soa_to_aos", "convert_layout",
                 "bfloat16", t))
        self.assertEqual(out, [
            "float32\tnchw_nhwc\t10,3,86,86\t0,2,3,1\tnaive=4e-06",
            "float16\tnhwc_nchw\t40,192,192,3\t0,3,1,2\tnaive=4e-06",
            "float32\tpermutation\t27,64,5,247\t3,0,2,1\tnaive=4e-06",
            "float32\taos_soa\t1936000,11\t1,0\tnaive=4e-06",
            "bfloat16\tsoa_aos\t11,1936000\t1,0\tnaive=4e-06",
        ])

    def test_transpose_gets_a_batch(self):
        t = "transpose.cuda.vec16=5.664e-06"
        out = self.convert(line("128,4288", "transpose", "float32", t),
                           line("69,64,1687", "transpose", "float16", t))
        self.assertEqual(out, ["float32\t1,128,4288\tvec16=5.664e-06",
                               "float16\t69,64,1687\tvec16=5.664e-06"])

    def test_other_ops_are_refused(self):
        with self.assertRaises(SystemExit):
            self.convert(line("16,1024", "gelu_layer_norm", "float32",
                              "gelu_layer_norm.cuda.warp_per_row=4e-06"))


if __name__ == "__main__":
    unittest.main()
