// Launch bookkeeping shared by the CUDA variants: fills LaunchInfo
// (registers, shared memory, theoretical occupancy from the occupancy API,
// waves) for the launch a variant makes. Thread-safe.
#pragma once

#include <cuda_runtime.h>

#include <utility>

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
// was set before, instead of a driver call on every launch. (Static bytes
// count too: on the H200, 48 KB of dynamic memory plus 64 static bytes is
// past the default.)
absl::Status AllowDynamicSharedMemory(const void* func, size_t smem_bytes);

template <typename Kernel>
absl::Status AllowDynamicSharedMemory(Kernel* func, size_t smem_bytes) {
  return AllowDynamicSharedMemory(reinterpret_cast<const void*>(func),
                                  smem_bytes);
}

inline cudaStream_t StreamOf(const ExecContext& ctx) {
  return static_cast<cudaStream_t>(ctx.stream);
}

// kernel<<<grid, block, smem_bytes, stream>>>(args...) as a programmatic
// dependent launch: on sm_90 the kernel may be scheduled before the stream's
// previous kernel has completed, which hides its launch latency behind that
// kernel's last blocks when kernels run back to back. kernel must call
// WaitForPriorGrid() (grid_dependency.cuh) before it touches global memory.
// Launch errors surface as for <<<>>>.
template <typename... Params, typename... Args>
void LaunchAfterPriorGrid(void (*kernel)(Params...), dim3 grid, dim3 block,
                          size_t smem_bytes, cudaStream_t stream,
                          Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  config.attrs = attr;
  config.numAttrs = 1;
  // The error is the one cudaGetLastError reports after the launch.
  (void)cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

// The same on ctx's stream.
template <typename... Params, typename... Args>
void LaunchAfterPriorGrid(void (*kernel)(Params...), dim3 grid, dim3 block,
                          size_t smem_bytes, const ExecContext& ctx,
                          Args&&... args) {
  LaunchAfterPriorGrid(kernel, grid, block, smem_bytes, StreamOf(ctx),
                       std::forward<Args>(args)...);
}

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace coalesce::cuda
