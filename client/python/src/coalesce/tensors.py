"""NumPy <-> coalesce.v1.Tensor, and the references an op input or output
can be besides inline bytes: a server handle, a shared-memory slice."""

from dataclasses import dataclass
from typing import Tuple

import ml_dtypes
import numpy as np

from coalesce.v1 import tensor_ops_pb2 as pb

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)

_TO_PROTO = {
    np.dtype(np.float32): pb.DATA_TYPE_FLOAT32,
    np.dtype(np.float16): pb.DATA_TYPE_FLOAT16,
    BFLOAT16: pb.DATA_TYPE_BFLOAT16,
}
_FROM_PROTO = {v: k for k, v in _TO_PROTO.items()}


def to_proto_dtype(dtype):
    """np.float32 / np.float16 / ml_dtypes.bfloat16 (or their names)."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt is not None:
        dt = dt.newbyteorder("=")  # the wire is little-endian, as is x86/ARM
    if dt not in _TO_PROTO:
        raise TypeError(
            f"unsupported dtype {dtype!r}: Coalesce takes float32, float16 "
            "and bfloat16 (ml_dtypes.bfloat16); cast with .astype()")
    return _TO_PROTO[dt]


def from_proto_dtype(data_type):
    if data_type not in _FROM_PROTO:
        raise ValueError(f"unknown DataType {data_type}")
    return _FROM_PROTO[data_type]


@dataclass(frozen=True)
class TensorSpec:
    """dtype and shape without data: what ExplainSelection takes."""

    shape: Tuple[int, ...]
    dtype: np.dtype

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        object.__setattr__(self, "dtype", np.dtype(self.dtype))


@dataclass(frozen=True)
class TensorHandle:
    """A tensor kept on the server (PutTensor, or an op output placed there).

    Pass it as an op input (no bytes move), or as an op's output= to
    overwrite it in place.
    """

    handle: str
    dtype: np.dtype = None
    shape: Tuple[int, ...] = None
    byte_size: int = 0
    owner: str = ""
    idle_seconds: float = 0.0
    device_ordinal: int = 0  # the device its bytes live on

    def __str__(self):
        return self.handle

    @classmethod
    def from_info(cls, info):
        return cls(handle=info.handle, dtype=from_proto_dtype(info.dtype),
                   shape=tuple(info.shape), byte_size=info.byte_size,
                   owner=info.owner, idle_seconds=info.idle_seconds,
                   device_ordinal=info.device_ordinal)

    @classmethod
    def from_tensor(cls, t):
        dtype = from_proto_dtype(t.dtype)
        shape = tuple(t.shape)
        size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        return cls(handle=t.handle, dtype=dtype, shape=shape, byte_size=size)


def contiguous(array):
    """array as C-contiguous little-endian of a supported dtype."""
    array = np.asarray(array)
    to_proto_dtype(array.dtype)
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    return np.ascontiguousarray(array)


def array_to_proto(array, spec_only=False):
    array = contiguous(array)
    t = pb.Tensor(dtype=to_proto_dtype(array.dtype), shape=array.shape)
    if not spec_only:
        t.raw = array.tobytes()
    return t


def proto_to_array(t):
    dtype = from_proto_dtype(t.dtype)
    # A copy: frombuffer over bytes would be read-only.
    return np.frombuffer(t.raw, dtype=dtype).reshape(tuple(t.shape)).copy()
