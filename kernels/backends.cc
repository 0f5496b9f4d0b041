#include "kernels/backends.h"

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "kernels/core/device_group.h"
#include "kernels/cpu/cpu_backend.h"
#ifdef COALESCE_WITH_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

namespace coalesce {
namespace {

// One backend for one device, a DeviceGroup for several.
absl::StatusOr<std::unique_ptr<Backend>> Combine(
    std::vector<std::unique_ptr<Backend>> members) {
  if (members.size() == 1) return std::move(members[0]);
  COALESCE_ASSIGN_OR_RETURN(std::unique_ptr<DeviceGroup> group,
                            DeviceGroup::Create(std::move(members)));
  return std::unique_ptr<Backend>(std::move(group));
}

std::string Served(const std::vector<int>& ordinals) {
  return ordinals.size() == 1
             ? absl::StrCat("device ", ordinals[0])
             : absl::StrCat("devices ", absl::StrJoin(ordinals, ","));
}

absl::StatusOr<std::unique_ptr<Backend>> CreateCpu(const BackendOptions& opts,
                                                   std::string* served) {
  if (opts.cpu_devices < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--cpu_devices must be at least 1, not ", opts.cpu_devices));
  }
  if (opts.cpu_devices == 1 && opts.devices == "all") {
    return CreateCpuBackend(opts.threads);
  }
  COALESCE_ASSIGN_OR_RETURN(const std::vector<int> ordinals,
                            ParseDevices(opts.devices, opts.cpu_devices));
  std::vector<std::unique_ptr<Backend>> members;
  for (int i : ordinals) {
    members.push_back(CreateSimulatedCpuDevice(opts.threads, i));
  }
  *served =
      absl::StrCat("; simulated ", Served(ordinals), " of ", opts.cpu_devices);
  return Combine(std::move(members));
}

}  // namespace

bool CudaBackendBuilt() {
#ifdef COALESCE_WITH_CUDA
  return true;
#else
  return false;
#endif
}

absl::StatusOr<std::vector<int>> ParseDevices(absl::string_view devices,
                                              int count) {
  std::vector<int> out;
  if (devices == "all") {
    for (int i = 0; i < count; ++i) out.push_back(i);
  } else {
    for (absl::string_view part : absl::StrSplit(devices, ',')) {
      int ordinal = -1;
      if (!absl::SimpleAtoi(part, &ordinal) || ordinal < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--devices must be all or device ordinals separated by commas "
            "(0,2), not '",
            devices, "'"));
      }
      if (ordinal >= count) {
        return absl::InvalidArgumentError(
            absl::StrCat("--devices: device ", ordinal, " requested, ", count,
                         count == 1 ? " is" : " are", " visible"));
      }
      if (std::find(out.begin(), out.end(), ordinal) != out.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--devices: device ", ordinal, " named twice"));
      }
      out.push_back(ordinal);
    }
    std::sort(out.begin(), out.end());
  }
  if (out.empty()) {
    return absl::InvalidArgumentError("--devices: no device to serve");
  }
  return out;
}

absl::StatusOr<BackendChoice> CreateBackend(const BackendOptions& opts) {
  if (opts.device != "auto" && opts.device != "cpu" && opts.device != "cuda") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--device must be auto, cpu or cuda, not '", opts.device, "'"));
  }
  std::string why_not_cuda;
  if (opts.device != "cpu") {
#ifdef COALESCE_WITH_CUDA
    const int count = CudaDeviceCount();
    if (count > 0) {
      COALESCE_ASSIGN_OR_RETURN(const std::vector<int> ordinals,
                                ParseDevices(opts.devices, count));
      std::vector<std::unique_ptr<Backend>> members;
      absl::Status failed;
      for (int i : ordinals) {
        absl::StatusOr<std::unique_ptr<Backend>> cuda =
            CreateCudaBackend(i, opts.cuda_lanes, opts.cuda_launch_graphs);
        if (!cuda.ok()) {
          failed = cuda.status();
          break;
        }
        members.push_back(*std::move(cuda));
      }
      if (failed.ok()) {
        COALESCE_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend,
                                  Combine(std::move(members)));
        return BackendChoice{
            std::move(backend),
            absl::StrCat(
                opts.device == "cuda"
                    ? "--device=cuda"
                    : "a CUDA device is visible (--device=auto)",
                count > 1 ? absl::StrCat("; ", Served(ordinals), " of ", count)
                          : "")};
      }
      why_not_cuda = std::string(failed.message());
    } else {
      why_not_cuda = "no CUDA device visible";
    }
#else
    why_not_cuda = "this build has no CUDA backend (COALESCE_CUDA=OFF)";
#endif
    if (opts.device == "cuda") {
      return absl::FailedPreconditionError(
          absl::StrCat("--device=cuda: ", why_not_cuda));
    }
  }
  std::string served;
  COALESCE_ASSIGN_OR_RETURN(std::unique_ptr<Backend> cpu,
                            CreateCpu(opts, &served));
  return BackendChoice{
      std::move(cpu), absl::StrCat(opts.device == "cpu"
                                       ? std::string("--device=cpu")
                                       : absl::StrCat("no usable CUDA device (",
                                                      why_not_cuda, ")"),
                                   served)};
}

}  // namespace coalesce
