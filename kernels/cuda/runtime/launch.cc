#include "kernels/cuda/runtime/launch.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include <utility>

#include "kernels/cuda/runtime/cuda_check.h"

namespace coalesce::cuda {
namespace {

struct FuncFacts {
  int registers = 0;
  int64_t static_smem = 0;
  int active_blocks = 0;
  bool ok = false;
};

// The attribute and occupancy queries cost microseconds each: more than a
// small kernel runs. Their answers never change for a (function, block
// size, dynamic shared memory) triple, so they are computed once.
FuncFacts FactsOf(const void* func, int threads, size_t smem_bytes) {
  static std::mutex mu;
  static std::map<std::tuple<const void*, int, size_t>, FuncFacts>* cache =
      new std::map<std::tuple<const void*, int, size_t>, FuncFacts>();
  const auto key = std::make_tuple(func, threads, smem_bytes);
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache->find(key);
    if (it != cache->end()) return it->second;
  }
  FuncFacts f;
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, func) == cudaSuccess &&
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          &f.active_blocks, func, threads, smem_bytes) == cudaSuccess) {
    f.registers = attr.numRegs;
    f.static_smem = static_cast<int64_t>(attr.sharedSizeBytes);
    f.ok = true;
  } else {
    cudaGetLastError();  // bookkeeping must never fail a request
  }
  std::lock_guard<std::mutex> lock(mu);
  (*cache)[key] = f;
  return f;
}

// True the first time func is launched in this process: the launch loaded
// its module (CUDA_MODULE_LOADING=LAZY, the default), which the timed span
// includes.
bool FirstLaunch(const void* func) {
  static std::mutex mu;
  static std::set<const void*>* seen = new std::set<const void*>();
  std::lock_guard<std::mutex> lock(mu);
  return seen->insert(func).second;
}

}  // namespace

absl::Status AllowDynamicSharedMemory(const void* func, size_t smem_bytes) {
  if (smem_bytes == 0) return absl::OkStatus();
  int device = 0;
  COALESCE_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, size_t>* allowed =
      new std::map<std::pair<const void*, int>, size_t>();
  std::lock_guard<std::mutex> lock(mu);
  size_t& set = (*allowed)[{func, device}];
  if (set >= smem_bytes) return absl::OkStatus();
  COALESCE_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(func, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(smem_bytes)));
  set = smem_bytes;
  return absl::OkStatus();
}

int64_t PersistentGrid(const void* func, int threads, size_t smem_bytes,
                       const ExecContext& ctx, int64_t max_blocks) {
  const int64_t per_sm =
      std::max(FactsOf(func, threads, smem_bytes).active_blocks, 1);
  const int sms =
      std::max(ctx.device != nullptr ? ctx.device->multiprocessors : 1, 1);
  return std::max<int64_t>(1, std::min<int64_t>(max_blocks, per_sm * sms));
}

void RecordLaunch(const void* func, dim3 grid, dim3 block, size_t smem_bytes,
                  ExecContext& ctx) {
  LaunchInfo& li = ctx.launch;
  ++li.launches;
  if (FirstLaunch(func)) li.cold = true;
  const int64_t blocks = static_cast<int64_t>(grid.x) * grid.y * grid.z;
  if (blocks < li.grid[0] * li.grid[1] * li.grid[2]) return;
  li.grid[0] = grid.x;
  li.grid[1] = grid.y;
  li.grid[2] = grid.z;
  li.block[0] = block.x;
  li.block[1] = block.y;
  li.block[2] = block.z;
  const int threads = block.x * block.y * block.z;
  const FuncFacts f = FactsOf(func, threads, smem_bytes);
  if (!f.ok) return;
  li.registers_per_thread = f.registers;
  li.shared_memory_bytes = f.static_smem + static_cast<int64_t>(smem_bytes);
  const int active = f.active_blocks;
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
