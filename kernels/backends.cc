#include "kernels/backends.h"

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_backend.h"
#ifdef COALESCE_WITH_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

namespace coalesce {

bool CudaBackendBuilt() {
#ifdef COALESCE_WITH_CUDA
  return true;
#else
  return false;
#endif
}

absl::StatusOr<BackendChoice> CreateBackend(const BackendOptions& opts) {
  if (opts.device != "auto" && opts.device != "cpu" && opts.device != "cuda") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--device must be auto, cpu or cuda, not '", opts.device, "'"));
  }
  std::string why_not_cuda;
  if (opts.device != "cpu") {
#ifdef COALESCE_WITH_CUDA
    absl::StatusOr<std::unique_ptr<Backend>> cuda =
        CreateCudaBackend(opts.cuda_device, opts.cuda_lanes);
    if (cuda.ok()) {
      return BackendChoice{std::move(*cuda),
                           opts.device == "cuda"
                               ? "--device=cuda"
                               : "a CUDA device is visible (--device=auto)"};
    }
    why_not_cuda = std::string(cuda.status().message());
#else
    why_not_cuda = "this build has no CUDA backend (COALESCE_CUDA=OFF)";
#endif
    if (opts.device == "cuda") {
      return absl::FailedPreconditionError(
          absl::StrCat("--device=cuda: ", why_not_cuda));
    }
  }
  return BackendChoice{
      CreateCpuBackend(opts.threads),
      opts.device == "cpu"
          ? std::string("--device=cpu")
          : absl::StrCat("no usable CUDA device (", why_not_cuda, ")")};
}

}  // namespace coalesce
