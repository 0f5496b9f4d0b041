// Asynchronous copies from global to shared memory, shared by the CUDA
// kernels: cp.async (LDGSTS, sm_80+: per-thread 4- to 16-byte copies) and
// the Hopper tensor memory accelerator (cp.async.bulk.tensor, sm_90: one
// thread copies a whole box of a tensor map, completion counted in bytes on
// an mbarrier). Internal to kernels/cuda.
#pragma once

#include <cuda.h>  // CUtensorMap only: no -lcuda
#include <cuda_runtime.h>

#include <cstdint>

namespace coalesce::cuda {

// ------------------------------------------------------------- cp.async

__device__ __forceinline__ uint32_t SharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// cp.async (LDGSTS): kBytes (4, 8 or 16) from global memory to shared
// memory at shared address dst, not through registers. With valid false
// the source size is 0: nothing is read (src need only be a valid address)
// and the destination is zero-filled. 16-byte copies skip L1 (.cg); .cg
// takes no smaller size.
template <int kBytes>
__device__ __forceinline__ void CpAsync(uint32_t dst, const void* src,
                                        bool valid) {
  static_assert(kBytes == 4 || kBytes == 8 || kBytes == 16, "cp.async size");
  if constexpr (kBytes == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst),
                 "l"(src), "r"(valid ? 16 : 0)
                 : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(dst),
                 "l"(src), "n"(kBytes), "r"(valid ? kBytes : 0)
                 : "memory");
  }
}
__device__ __forceinline__ void CpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Waits until at most kPending committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// ------------------------------------------------- mbarrier and TMA

__device__ __forceinline__ void MbarInit(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar),
               "r"(count)
               : "memory");
}
__device__ __forceinline__ void MbarArriveExpectTx(uint32_t bar,
                                                   uint32_t bytes) {
  asm volatile(
      "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
      "r"(bytes)
      : "memory");
}
__device__ __forceinline__ void MbarArrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar)
               : "memory");
}
// Returns once the barrier's phase with the given parity has completed. A
// fresh barrier is in phase 0, so waiting for parity 1 returns at once:
// the producer's first pass over the ring needs no "empty" signal.
__device__ __forceinline__ void MbarWait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (done == 0);
}

// Makes barriers initialized by this thread visible to the async (TMA)
// proxy; a __syncthreads must follow before other threads use them.
__device__ __forceinline__ void MbarInitFence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// One box of the tensor map at coordinates (c0 innermost, c1, c2) into
// shared memory at dst; completion is counted in bytes on bar.
__device__ __forceinline__ void TmaLoad3d(uint32_t dst, const CUtensorMap* map,
                                          int c0, int c1, int c2,
                                          uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::"
      "bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}

// The same for a rank-4 tensor map.
__device__ __forceinline__ void TmaLoad4d(uint32_t dst, const CUtensorMap* map,
                                          int c0, int c1, int c2, int c3,
                                          uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::"
      "bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3),
      "r"(bar)
      : "memory");
}

}  // namespace coalesce::cuda
