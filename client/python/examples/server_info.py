#!/usr/bin/env python3
"""What the server runs on, its variants, and which one it would pick for a
GEMM of a given shape (no data sent)."""

import argparse

import numpy as np

import coalesce

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--target", default="127.0.0.1:50051")
args = parser.parse_args()

with coalesce.Client(args.target) as client:
    info = client.server_info()
    print(f"backend {info.backend} ({info.backend_reason or 'as asked'}), "
          f"version {info.build.version}")
    for v in info.variants:
        print(f"  {v.name:32} {v.description}")
    spec = coalesce.TensorSpec
    e = client.explain_selection("gemm", spec((1024, 512), np.float16),
                                 spec((512, 256), np.float16))
    print(f"gemm 1024x256x512 float16 -> {e.chosen_variant} ({e.source}): "
          f"{e.reason}")
    assert e.chosen_variant in {v.name for v in info.variants}
