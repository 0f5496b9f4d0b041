#include "kernels/cuda/runtime/lane_pool.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cuda/runtime/cuda_check.h"

namespace coalesce::cuda {
namespace {

bool IsStickyError(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
    case cudaErrorInvalidPc:
    case cudaErrorInvalidAddressSpace:
      return true;
    default:
      return false;
  }
}

}  // namespace

absl::Status DeviceHealth::Track(absl::Status s) {
  if (s.ok()) return s;
  const cudaError_t e = cudaPeekAtLastError();
  if (IsStickyError(e) || IsStickyError(cudaStreamQuery(nullptr))) {
    absl::MutexLock lock(&mu_);
    health_ = absl::InternalError(
        absl::StrCat("CUDA context is unusable after: ", s.message()));
  }
  return s;
}

absl::Status LanePool::Init(int count) {
  lanes_.resize(count);
  for (Lane& l : lanes_) {
    COALESCE_CUDA_RETURN_IF_ERROR(
        cudaStreamCreateWithFlags(&l.stream, cudaStreamNonBlocking));
    for (cudaEvent_t* e : {&l.kernel_start, &l.kernel_stop}) {
      COALESCE_CUDA_RETURN_IF_ERROR(cudaEventCreate(e));
    }
    COALESCE_CUDA_RETURN_IF_ERROR(
        cudaEventCreateWithFlags(&l.done, cudaEventDisableTiming));
    for (int i = 0; i < 2; ++i) {
      COALESCE_CUDA_RETURN_IF_ERROR(
          cudaEventCreateWithFlags(&l.staging_free[i], cudaEventDisableTiming));
      COALESCE_CUDA_RETURN_IF_ERROR(
          cudaMallocHost(&l.staging[i], kStagingChunkBytes));
    }
    COALESCE_ASSIGN_OR_RETURN(l.gate, LaunchGate::Create());
    l.graphs = std::make_unique<LaunchGraphs>();
    free_.push_back(&l);
  }
  return absl::OkStatus();
}

void LanePool::Shutdown() {
  for (Lane& l : lanes_) {
    if (l.stream) cudaStreamSynchronize(l.stream);
    l.graphs.reset();  // before the events its graphs record
    for (int i = 0; i < 2; ++i) {
      if (l.staging[i]) cudaFreeHost(l.staging[i]);
      if (l.staging_free[i]) cudaEventDestroy(l.staging_free[i]);
      l.staging[i] = nullptr;
      l.staging_free[i] = nullptr;
    }
    for (cudaEvent_t* e : {&l.kernel_start, &l.kernel_stop, &l.done}) {
      if (*e) cudaEventDestroy(*e);
      *e = nullptr;
    }
    if (l.stream) cudaStreamDestroy(l.stream);
    l.stream = nullptr;
  }
}

absl::Status LanePool::OnLane(absl::FunctionRef<absl::Status(Lane&)> f,
                              double* waited) {
  COALESCE_RETURN_IF_ERROR(health_.Status());
  COALESCE_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
  const auto start = std::chrono::steady_clock::now();
  Lane* lane = Acquire();
  if (waited != nullptr) {
    *waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
  }
  const absl::Status s = f(*lane);
  Release(lane);
  return health_.Track(s);
}

Lane* LanePool::Acquire() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !free_.empty(); });
  Lane* l = free_.back();
  free_.pop_back();
  return l;
}

void LanePool::Release(Lane* l) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(l);
  }
  cv_.notify_one();
}

}  // namespace coalesce::cuda
