"""Python client for Coalesce, the tensor-ops gRPC service.

    import numpy as np, coalesce
    with coalesce.Client("127.0.0.1:50051") as client:
        y = client.transpose(np.random.rand(64, 32).astype(np.float32))
"""

from coalesce.client import HANDLE, INLINE, Client, TensorList
from coalesce.errors import CoalesceError
from coalesce.report import KernelReport, LaunchConfig
from coalesce.shm import SharedMemoryRegion, ShmTensor
from coalesce.tensors import BFLOAT16, TensorHandle, TensorSpec

__all__ = [
    "BFLOAT16", "Client", "CoalesceError", "HANDLE", "INLINE", "KernelReport",
    "LaunchConfig", "SharedMemoryRegion", "ShmTensor", "TensorHandle",
    "TensorList", "TensorSpec",
]
__version__ = "0.1.0"
