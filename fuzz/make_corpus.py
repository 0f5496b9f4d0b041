#!/usr/bin/env python3
"""Writes the starting corpus of each fuzz target under fuzz/corpus/<target>/.

A few small inputs per target, valid ones and edge cases, so that a short run
starts deep in each parser instead of rediscovering its syntax. Protobuf
messages are written in text format and encoded by protoc (--encode), so this
needs protoc and nothing else. Deterministic: the same files every run.

  fuzz/make_corpus.py            rewrite every target's corpus
  fuzz/make_corpus.py npy_fuzzer rewrite one
"""

import os
import random
import shutil
import struct
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")

# The RPCs of coalesce.v1.TensorOps in the order request_decode_fuzzer's
# first byte picks them (the proto's order).
RPCS = [
    ("Transpose", "TransposeRequest"),
    ("Gemm", "GemmRequest"),
    ("ConvertLayout", "ConvertLayoutRequest"),
    ("GeluLayerNorm", "GeluLayerNormRequest"),
    ("GetServerInfo", "GetServerInfoRequest"),
    ("ExplainSelection", "ExplainSelectionRequest"),
    ("Echo", "EchoRequest"),
    ("PutTensor", "PutTensorRequest"),
    ("GetTensor", "GetTensorRequest"),
    ("DeleteTensor", "DeleteTensorRequest"),
    ("ListTensors", "ListTensorsRequest"),
    ("RegisterSharedMemory", "RegisterSharedMemoryRequest"),
    ("UnregisterSharedMemory", "UnregisterSharedMemoryRequest"),
    ("ListSharedMemory", "ListSharedMemoryRequest"),
]

rng = random.Random()


def random_bytes(n):
    return bytes(rng.getrandbits(8) for _ in range(n))


def text_bytes(b):
    """A protobuf text-format string literal holding bytes b."""
    return '"' + "".join("\\%03o" % c for c in b) + '"'


def encode(message_type, text):
    """The wire form of the coalesce.v1 message written in text format."""
    return subprocess.run(
        ["protoc", "--proto_path=" + os.path.join(ROOT, "proto"),
         "--encode=coalesce.v1." + message_type, "coalesce/v1/tensor_ops.proto"],
        input=text.encode(), stdout=subprocess.PIPE, check=True).stdout


def tensor(dtype, shape, element_size, data=True):
    """Text of an inline tensor with random bytes."""
    n = element_size
    for d in shape:
        n *= d
    text = "dtype: %s " % dtype + "".join("shape: %d " % d for d in shape)
    if data:
        text += "raw: " + text_bytes(random_bytes(n))
    return "{ %s }" % text


def f32(*shape, data=True):
    return tensor("DATA_TYPE_FLOAT32", shape, 4, data)


def write(target, files):
    out = os.path.join(CORPUS, target)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    for name, content in files.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(content)


def request_decode():
    requests = {
        "transpose_inline": ("Transpose", "input: " + f32(2, 3)),
        "transpose_handle_to_handle": (
            "Transpose", 'input { handle: "f32" } '
            "options { outputs { placement: OUTPUT_PLACEMENT_SERVER_HANDLE } }"),
        "transpose_shm_in_shm_out": (
            "Transpose",
            "input { dtype: DATA_TYPE_FLOAT32 shape: 4 shape: 8 "
            'shared_memory { region: "r0" offset: 0 byte_size: 128 } } '
            "options { outputs { placement: OUTPUT_PLACEMENT_SHARED_MEMORY "
            'shared_memory { region: "r1" offset: 16 byte_size: 128 } } }'),
        "transpose_shm_alias": (
            "Transpose",
            "input { dtype: DATA_TYPE_FLOAT32 shape: 4 shape: 8 "
            'shared_memory { region: "r0" offset: 64 byte_size: 128 } } '
            "options { outputs { placement: OUTPUT_PLACEMENT_SHARED_MEMORY "
            'shared_memory { region: "r2" offset: 0 byte_size: 128 } } }'),
        "transpose_rank7": (
            "Transpose", "input { dtype: DATA_TYPE_FLOAT16 "
            + "shape: 1 " * 7 + 'raw: "ab" }'),
        "gemm_inline_with_c": (
            "Gemm", "a: %s b: %s c: %s beta: 0.5 alpha: 2" % (
                f32(2, 3), f32(3, 4), f32(2, 4))),
        "gemm_batched_handle": (
            "Gemm", 'a { handle: "f32-3d" } b: %s trans_b: true '
            'options { variant: "gemm.cpu.openblas" report: true }' % f32(5, 4)),
        "gemm_k_mismatch": ("Gemm", "a: %s b: %s" % (f32(2, 3), f32(2, 4))),
        "convert_nchw_to_nhwc_bf16": (
            "ConvertLayout", 'input { handle: "bf16" } '
            "layouts { from: LAYOUT_NCHW to: LAYOUT_NHWC }"),
        "convert_permutation": (
            "ConvertLayout", "input: %s permutation { perm: 2 perm: 0 perm: 1 }"
            % f32(2, 3, 2)),
        "convert_aos_soa": (
            "ConvertLayout", "input: %s aos_soa { direction: DIRECTION_AOS_TO_SOA "
            "fields: 3 }" % f32(4, 3)),
        "gelu_ln_full": (
            "GeluLayerNorm", "x: %s bias: %s residual: %s gamma: %s beta: %s "
            "epsilon: 1e-6 approximation: GELU_APPROXIMATION_TANH "
            "return_pre_norm: true" % (
                f32(2, 4), f32(4), f32(2, 4), f32(4), f32(4))),
        "gelu_ln_handles_two_outputs": (
            "GeluLayerNorm", 'x { handle: "f32" } gamma { handle: "f32-vec" } '
            "return_pre_norm: true options { "
            "outputs { placement: OUTPUT_PLACEMENT_SHARED_MEMORY "
            'shared_memory { region: "r1" byte_size: 128 } } '
            "outputs { placement: OUTPUT_PLACEMENT_SHARED_MEMORY "
            'shared_memory { region: "r1" offset: 128 byte_size: 128 } } }'),
        "server_info": ("GetServerInfo", ""),
        "explain_gemm_shapes_only": (
            "ExplainSelection", "gemm { a: %s b: %s } measure: true" % (
                f32(64, 32, data=False), f32(32, 16, data=False))),
        "explain_convert_handle": (
            "ExplainSelection", 'convert_layout { input { handle: "f16" } '
            "permutation { perm: 1 perm: 0 } }"),
        "echo": ("Echo", "payload: " + text_bytes(random_bytes(16))),
        "put_header": (
            "PutTensor", 'header { dtype: DATA_TYPE_FLOAT16 shape: 3 shape: 5 '
            'name: "t1" }'),
        "put_chunk_first": ("PutTensor", 'chunk: "abcd"'),
        "get_tensor": ("GetTensor", 'handle: "f32" chunk_bytes: 7'),
        "delete_tensor": ("DeleteTensor", 'handle: "t-0123456789abcdef"'),
        "delete_tensors": ("DeleteTensor",
                           'handle: "f32" handles: "f16" handles: "f32"'),
        "list_tensors": ("ListTensors", ""),
        "register_shm": (
            "RegisterSharedMemory", 'name: "in" key: "/coalesce-fuzz-decode-1" '
            "offset: 4096 byte_size: 1024"),
        "unregister_shm": ("UnregisterSharedMemory", 'name: "r0"'),
        "list_shm": ("ListSharedMemory", ""),
    }
    names = [rpc for rpc, _ in RPCS]
    files = {}
    for name, (rpc, text) in requests.items():
        message_type = RPCS[names.index(rpc)][1]
        files[name] = bytes([names.index(rpc)]) + encode(message_type, text)
    write("request_decode_fuzzer", files)


def records(*messages):
    """Messages as upload_framing_fuzzer reads them: 2-byte LE length each."""
    return b"".join(struct.pack("<H", len(m)) + m for m in messages)


def upload_framing():
    def header(dtype, *shape):
        return encode("PutTensorRequest", "header { dtype: %s %s }" % (
            dtype, "".join("shape: %d " % d for d in shape)))

    def chunk(n):
        return encode("PutTensorRequest", "chunk: " + text_bytes(random_bytes(n)))

    files = {
        "exact_one_chunk": records(header("DATA_TYPE_FLOAT32", 4), chunk(16)),
        "exact_split_elements": records(
            header("DATA_TYPE_FLOAT16", 3, 5), chunk(7), chunk(7), chunk(7),
            chunk(9)),
        "empty_chunk_then_rest": records(
            header("DATA_TYPE_BFLOAT16", 2, 2), chunk(0), chunk(8)),
        "overrun": records(header("DATA_TYPE_FLOAT32", 4), chunk(10), chunk(7)),
        "underrun": records(header("DATA_TYPE_FLOAT32", 2, 2), chunk(15)),
        "chunk_first": records(chunk(4), chunk(4)),
        "header_twice": records(
            header("DATA_TYPE_FLOAT32", 1), header("DATA_TYPE_FLOAT32", 1)),
        "bad_header_rank0": records(header("DATA_TYPE_FLOAT32")),
        "huge_declared": records(
            header("DATA_TYPE_FLOAT32", 1 << 20, 1 << 20), chunk(32)),
    }
    write("upload_framing_fuzzer", files)


def npy_file(descr, shape, data, major=1, fortran=False):
    shape_text = "(%s)" % ("".join("%d," % d for d in shape) if len(shape) == 1
                           else ", ".join(str(d) for d in shape))
    header = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (
        descr, "True" if fortran else "False", shape_text)
    length_size = 2 if major == 1 else 4
    prefix = 6 + 2 + length_size
    padded = (prefix + len(header) + 1 + 63) // 64 * 64 - prefix
    header = header + " " * (padded - len(header) - 1) + "\n"
    length = struct.pack("<H" if major == 1 else "<I", len(header))
    return b"\x93NUMPY" + bytes([major, 0]) + length + header.encode() + data


def npy():
    # The first byte picks the dtype asked for: none, float32, float16,
    # bfloat16.
    floats = struct.pack("<6f", 1.5, -2.0, 0.0, float("inf"), 3e-8, 65504.0)
    halves = struct.pack("<6H", 0x3c00, 0x7c00, 0xfc00, 0x7e00, 0x0001, 0x8000)
    files = {
        "f4_as_is": b"\0" + npy_file("<f4", (2, 3), floats),
        "f4_to_f16": b"\2" + npy_file("<f4", (6,), floats),
        "f4_to_bf16": b"\3" + npy_file("<f4", (3, 2), floats),
        "f2_as_is": b"\0" + npy_file("<f2", (6,), halves),
        "f2_to_f32": b"\1" + npy_file("<f2", (2, 3), halves),
        "u2_bf16": b"\3" + npy_file("<u2", (1, 6), halves),
        "u2_refused_as_f32": b"\1" + npy_file("<u2", (6,), halves),
        "scalar": b"\0" + npy_file("<f4", (), floats[:4]),
        "empty": b"\0" + npy_file("<f2", (0, 4), b""),
        "version2": b"\2" + npy_file("<f2", (3,), halves[:6], major=2),
        "fortran": b"\0" + npy_file("<f4", (2, 3), floats, fortran=True),
        "big_endian": b"\0" + npy_file(">f4", (2,), floats[:8]),
        "short_data": b"\0" + npy_file("<f4", (2, 3), floats[:20]),
    }
    write("npy_fuzzer", files)


def tuning_store():
    entries = (
        "entry transpose|float32|r1024.c512|NVIDIA H200|9.0|v2\t"
        "transpose.cuda.smem_padded\t3.1e-06\t"
        "transpose.cuda.smem_padded=3.1e-06,transpose.cuda.naive=9.5e-06\n"
        "entry gemm|float16|m64.n64.k64|NVIDIA H200|9.0|v1\tgemm.cuda.wgmma\t"
        "1.25e-05\tgemm.cuda.wgmma=1.25e-05\n")

    def head(build, device="NVIDIA H200|9.0"):
        return ("coalesce-tuning 1\nbuild %s\ndevice %s\n"
                "variants gemm=v1,transpose=v2\n" % (build, device))

    files = {
        "table_any_build": head("any") + entries,
        "cache_this_build": head("0a1b2c3") + entries,
        "cache_empty": head("0a1b2c3"),
        "cache_other_build": head("ffff000") + entries,
        "other_device": head("any", "NVIDIA A100|8.0") + entries,
        "special_values": head("any") + (
            "entry k1\tw\tinf\tw=nan,x=-inf,=0\n"
            "entry k1\tv\t0x1p-3\tv=1e308\n"
            "entry \tw\t-0\t\n"),
        "malformed_entry": head("any") + "entry k\tw\t1.0\n",
        "bad_time": head("0a1b2c3") + "entry k\tw\tfast\tw=1\n",
        "crlf": (head("any") + entries).replace("\n", "\r\n"),
    }
    write("tuning_store_fuzzer", {k: v.encode() for k, v in files.items()})


def token_file():
    alice = "tok-alice-0123456789abcdef"
    bob = "tok-bob-fedcba9876543210"
    ops = "tok-ops-00112233445566778899"
    files = {
        "users_and_admin": (
            "# tokens of the staging server\n"
            "%s alice user\n%s bob@example.org user\n\n"
            "%s ops admin  # on call\n" % (alice, bob, ops)),
        "rotation": "%s alice user\n%s alice user\n" % (alice, bob),
        "comments_and_blanks": "\n# only a comment\n   \n\t\n",
        "tabs_and_crlf": "%s\t carol.x_y \tadmin  \r\n# c\r\n" % alice,
        "no_final_newline": "%s ivan admin" % ops,
        "short_token": "tok-short erin user\n",
        "token_with_hash": "tok-0123456789#abcdef erin user\n",
        "unknown_role": "%s dave superuser\n" % alice,
        "missing_field": "%s erin\n" % alice,
        "extra_field": "%s frank user extra\n" % alice,
        "bad_identity": "%s fr/ank user\n" % alice,
        "duplicate_token": "%s gina user\n%s hank admin\n" % (alice, alice),
        "two_roles": "%s gina user\n%s gina admin\n" % (alice, bob),
    }
    write("token_file_fuzzer", {k: v.encode() for k, v in files.items()})


TARGETS = {
    "request_decode_fuzzer": request_decode,
    "upload_framing_fuzzer": upload_framing,
    "npy_fuzzer": npy,
    "tuning_store_fuzzer": tuning_store,
    "token_file_fuzzer": token_file,
}

if __name__ == "__main__":
    for target in sys.argv[1:] or TARGETS:
        rng.seed(target)  # the same bytes whether run alone or with the rest
        TARGETS[target]()
        print("wrote", os.path.relpath(os.path.join(CORPUS, target), ROOT))
