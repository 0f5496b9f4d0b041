// Programmatic dependent launch (sm_90): a kernel launched with
// LaunchAfterPriorGrid (launch.h) may be scheduled while the kernel before
// it in the stream is still finishing, so its launch latency and block
// dispatch overlap that kernel's tail. Such a kernel must call
// WaitForPriorGrid() before its first global memory access, read or write:
// the previous kernel may still read what this one overwrites. Launched
// plainly, the wait returns at once. Internal to kernels/cuda.
#pragma once

namespace coalesce::cuda {

__device__ __forceinline__ void WaitForPriorGrid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

}  // namespace coalesce::cuda
