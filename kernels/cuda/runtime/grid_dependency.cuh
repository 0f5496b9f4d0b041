// Programmatic dependent launch (sm_90): a kernel launched with
// LaunchAfterPriorGrid (launch.h) may be scheduled while the kernel before it
// in the stream is still finishing, so its launch latency and block dispatch
// overlap that kernel's tail. Such a kernel must call WaitForPriorGrid() before
// its first global memory access, read or write (an L2 prefetch, PrefetchL2,
// excepted): the previous kernel may still read what this one overwrites.
// Launched plainly, the wait returns at once. Internal to kernels/cuda.
#pragma once

namespace coalesce::cuda {

__device__ __forceinline__ void WaitForPriorGrid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the stream's next kernel, where it was launched with
// LaunchAfterPriorGrid, be scheduled before this one has finished: its
// blocks take the SM slots this kernel's blocks free, then hold at their
// WaitForPriorGrid. Without it the next kernel is scheduled only once every
// block of this one has exited.
__device__ __forceinline__ void AllowNextGrid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Asks the L2 for the 128-byte line holding p. Allowed before
// WaitForPriorGrid: a prefetch reads nothing into the thread and the L2 is
// the device's point of coherence, so the previous kernel's later writes to
// the line land in the L2 copy and the loads after the wait see them. With
// AllowNextGrid in the previous kernel, this is how a kernel's first loads
// overlap that kernel's last blocks.
__device__ __forceinline__ void PrefetchL2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

}  // namespace coalesce::cuda
