"""POSIX shared memory shared with a server on the same host.

The server maps a region only when it runs with --allow_client_shm, only for
calls over its local socket (--unix_socket; connect to "unix:PATH"), only for
an object owned by the caller's uid and named with its key prefix
(--client_shm_key_prefix, default "/coalesce"). docs/DATAPATH.md has the rules.
"""

import secrets
from dataclasses import dataclass
from multiprocessing import shared_memory
from typing import Tuple

import numpy as np

from coalesce.errors import CoalesceError
from coalesce.tensors import contiguous, to_proto_dtype
from coalesce.v1 import tensor_ops_pb2 as pb

# Slots that place() hands out start on this boundary, so that kernels see
# aligned operands as they would with any allocator.
_ALIGN = 64


@dataclass(frozen=True)
class ShmTensor:
    """dtype and shape of a tensor at offset in a registered region: an op
    input, or (as output=) where an op writes its output."""

    region: "SharedMemoryRegion"
    offset: int
    shape: Tuple[int, ...]
    dtype: np.dtype

    @property
    def byte_size(self):
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def numpy(self):
        """A view of the bytes in the region (no copy): it sees what the
        server writes there, and is invalid once the region is closed."""
        return self.region.ndarray(self.shape, self.dtype, self.offset)

    def ref(self):
        return pb.SharedMemoryRef(region=self.region.name, offset=self.offset,
                                  byte_size=self.byte_size)

    def to_proto(self):
        return pb.Tensor(dtype=to_proto_dtype(self.dtype), shape=self.shape,
                         shared_memory=self.ref())


class SharedMemoryRegion:
    """A POSIX shared-memory object created here and registered with the
    server under name; close() (or leaving the with-block) unregisters it and
    unlinks the object.

        with client.shared_memory(1 << 20) as region:
            x = region.place(array)               # input, copied in once
            y = region.allocate((n, m), np.float32)
            client.transpose(x, output=y)
            result = y.numpy()                    # the server wrote it here
    """

    def __init__(self, client, byte_size, name=None, key_prefix="/coalesce"):
        if byte_size <= 0:
            raise ValueError("byte_size must be > 0")
        if not key_prefix.startswith("/") or "/" in key_prefix[1:]:
            raise ValueError("key_prefix must be '/' and a name with no '/'")
        self._client = client
        self.byte_size = int(byte_size)
        self.name = name or f"py-{secrets.token_hex(8)}"
        self.key = f"{key_prefix}-{secrets.token_hex(12)}"
        # SharedMemory adds the leading '/' itself; mode 0600, owned by us,
        # as the server requires.
        self._shm = shared_memory.SharedMemory(
            name=self.key[1:], create=True, size=self.byte_size)
        self._next = 0
        self._registered = False
        try:
            client.register_shared_memory(self.name, self.key, self.byte_size)
            self._registered = True
        except BaseException:
            self._release()
            raise

    @property
    def buffer(self):
        return self._shm.buf

    def ndarray(self, shape, dtype, offset=0):
        """A NumPy view of the region's bytes at offset."""
        dtype = np.dtype(dtype)
        shape = tuple(int(d) for d in shape)
        count = int(np.prod(shape, dtype=np.int64))
        if offset < 0 or offset + count * dtype.itemsize > self.byte_size:
            raise ValueError(
                f"{count * dtype.itemsize} bytes at offset {offset} do not fit "
                f"in the region's {self.byte_size}")
        return np.frombuffer(self._shm.buf, dtype=dtype, count=count,
                             offset=offset).reshape(shape)

    def allocate(self, shape, dtype, offset=None):
        """A slot for a tensor: at offset, or after the last slot handed out."""
        dtype = np.dtype(dtype)
        to_proto_dtype(dtype)
        shape = tuple(int(d) for d in shape)
        size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if offset is None:
            offset = -(-self._next // _ALIGN) * _ALIGN
        if offset < 0 or offset + size > self.byte_size:
            raise ValueError(
                f"a {size}-byte tensor at offset {offset} does not fit in the "
                f"region's {self.byte_size} bytes")
        self._next = max(self._next, offset + size)
        return ShmTensor(self, offset, shape, dtype)

    def place(self, array, offset=None):
        """Copies array into a new slot (or at offset) and returns it."""
        array = contiguous(array)
        slot = self.allocate(array.shape, array.dtype, offset)
        slot.numpy()[...] = array
        return slot

    def close(self):
        try:
            if self._registered:
                self._registered = False
                self._client.unregister_shared_memory(self.name)
        except CoalesceError:
            pass  # the server may be gone; the object is still ours to unlink
        finally:
            self._release()

    def _release(self):
        if self._shm is None:
            return
        shm, self._shm = self._shm, None
        try:
            shm.unlink()
        finally:
            try:
                shm.close()
            except BufferError:
                # NumPy views of the region are still alive: the mapping
                # goes when they do.
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        # A region never closed is at least unregistered and unlinked here;
        # at interpreter exit the channel may be gone, hence the guard.
        if getattr(self, "_shm", None) is not None:
            try:
                self.close()
            except Exception:
                pass
