#include "kernels/cuda/launch.h"

namespace coalesce::cuda {

void RecordLaunch(const void* func, dim3 grid, dim3 block, size_t smem_bytes,
                  ExecContext& ctx) {
  LaunchInfo& li = ctx.launch;
  ++li.launches;
  const int64_t blocks = static_cast<int64_t>(grid.x) * grid.y * grid.z;
  if (blocks < li.grid[0] * li.grid[1] * li.grid[2]) return;
  li.grid[0] = grid.x;
  li.grid[1] = grid.y;
  li.grid[2] = grid.z;
  li.block[0] = block.x;
  li.block[1] = block.y;
  li.block[2] = block.z;
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, func) != cudaSuccess) {
    cudaGetLastError();  // clear; bookkeeping must never fail a request
    return;
  }
  li.registers_per_thread = attr.numRegs;
  li.shared_memory_bytes =
      static_cast<int64_t>(attr.sharedSizeBytes) + static_cast<int64_t>(smem_bytes);
  int active = 0;
  const int threads = block.x * block.y * block.z;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&active, func, threads,
                                                    smem_bytes) != cudaSuccess) {
    cudaGetLastError();
    return;
  }
  if (ctx.device != nullptr && ctx.device->max_threads_per_multiprocessor > 0) {
    // In warps, as Nsight Compute counts it: a partial warp occupies a slot.
    const int warps_per_block = (threads + 31) / 32;
    li.theoretical_occupancy =
        static_cast<double>(active * warps_per_block) /
        (ctx.device->max_threads_per_multiprocessor / 32);
    if (active > 0 && ctx.device->multiprocessors > 0) {
      li.waves = static_cast<double>(blocks) /
                 (static_cast<double>(active) * ctx.device->multiprocessors);
    }
  }
}

}  // namespace coalesce::cuda
