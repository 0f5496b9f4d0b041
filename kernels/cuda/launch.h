// Launch bookkeeping shared by the CUDA variants: fills LaunchInfo
// (registers, shared memory, theoretical occupancy from the occupancy API,
// waves) for the launch a variant makes. Thread-safe.
#pragma once

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "kernels/core/variant.h"

namespace coalesce::cuda {

// Records func's launch in ctx.launch (kept when it is the largest launch
// so far of this call). Cheap: cudaFuncGetAttributes and the occupancy
// calculator are cached per function by the runtime.
void RecordLaunch(const void* func, dim3 grid, dim3 block, size_t smem_bytes,
                  ExecContext& ctx);

template <typename Kernel>
void RecordLaunch(Kernel* func, dim3 grid, dim3 block, size_t smem_bytes,
                  ExecContext& ctx) {
  RecordLaunch(reinterpret_cast<const void*>(func), grid, block, smem_bytes,
               ctx);
}

// The grid of a persistent kernel: as many blocks of func (threads each,
// smem_bytes dynamic shared memory) as are resident at once on every SM of
// ctx's device, from the occupancy calculator (cached, as for RecordLaunch;
// at least one per SM, also when the query fails), at most max_blocks (the
// work items), at least 1.
int64_t PersistentGrid(const void* func, int threads, size_t smem_bytes,
                       const ExecContext& ctx, int64_t max_blocks);

template <typename Kernel>
int64_t PersistentGrid(Kernel* func, int threads, size_t smem_bytes,
                       const ExecContext& ctx, int64_t max_blocks) {
  return PersistentGrid(reinterpret_cast<const void*>(func), threads,
                        smem_bytes, ctx, max_blocks);
}

// Lets func take smem_bytes of dynamic shared memory per block on the
// current device. Past 48 KB per block, static and dynamic together, a
// launch needs the opt-in attribute, which is per device; it is set once
// per (function, device) and raised only when a launch asks for more than
// was set before, where the variants called the driver on every launch.
// (Skipping it up to 48 KB of dynamic memory alone failed on the H200:
// 48 KB plus 64 static bytes is past the default.)
absl::Status AllowDynamicSharedMemory(const void* func, size_t smem_bytes);

template <typename Kernel>
absl::Status AllowDynamicSharedMemory(Kernel* func, size_t smem_bytes) {
  return AllowDynamicSharedMemory(reinterpret_cast<const void*>(func),
                                  smem_bytes);
}

inline cudaStream_t StreamOf(const ExecContext& ctx) {
  return static_cast<cudaStream_t>(ctx.stream);
}

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace coalesce::cuda
