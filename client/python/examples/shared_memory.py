#!/usr/bin/env python3
"""Inputs and outputs in POSIX shared memory. The server must run with
--allow_client_shm --unix_socket=PATH, and this client connect to
unix:PATH (registration needs the caller's uid, which only the local
socket tells)."""

import argparse

import numpy as np

import coalesce

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--target", default="unix:/tmp/coalesce.sock")
args = parser.parse_args()

x = np.random.default_rng().standard_normal((1024, 768)).astype(np.float32)
with coalesce.Client(args.target) as client:
    with client.shared_memory(2 * x.nbytes + 64) as region:
        src = region.place(x)                     # written once, in place
        dst = region.allocate((768, 1024), np.float32)
        client.transpose(src, output=dst)         # the server writes dst
        assert np.array_equal(dst.numpy(), x.T)
        print(f"transposed {x.shape} through region {region.name} "
              f"({region.key}), no tensor bytes on the socket")
