#include "kernels/cuda/profiling/cupti_sampler.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

#ifdef COALESCE_WITH_CUPTI
#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_range_profiler.h>
#include <cupti_result.h>
#include <cupti_target.h>
#include <cupti_version.h>

#include <array>
#include <iterator>
#include <type_traits>

#include "absl/base/call_once.h"
#include "absl/memory/memory.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "kernels/cuda/runtime/cuda_check.h"
#include "kernels/cuda/runtime/dynamic_library.h"
#endif

namespace coalesce::cuda {

int64_t SampleInterval(double fraction) {
  // !(fraction > 0) also catches NaN; callers validate, this only stays
  // defined.
  if (!(fraction > 0)) return kMaxSampleInterval;
  const double n = std::round(1.0 / fraction);
  if (n <= 1) return 1;
  if (n >= static_cast<double>(kMaxSampleInterval)) return kMaxSampleInterval;
  return static_cast<int64_t>(n);
}

#ifndef COALESCE_WITH_CUPTI

struct CuptiSampler::State {};

CuptiSampler::~CuptiSampler() = default;

absl::StatusOr<std::unique_ptr<CuptiSampler>> CuptiSampler::Create(
    int /*device*/) {
  return absl::UnimplementedError(
      "built without CUPTI: cupti_range_profiler.h was not found when this "
      "build was configured (kernels/cuda/CMakeLists.txt)");
}

CuptiSampler::Outcome CuptiSampler::TrySample(
    void* /*stream*/, absl::FunctionRef<absl::StatusOr<int>()> /*launch*/) {
  // Unreachable: Create never returns a sampler in this build.
  Outcome outcome;
  outcome.counters = absl::UnimplementedError("built without CUPTI");
  return outcome;
}

#else  // COALESCE_WITH_CUPTI

namespace {

// Profiler ranges one sampled range may hold (one per kernel). A request
// launches at most a few kernels (three for gelu_ln.cuda.unfused); more
// than this means other work was serialized into the range, and the
// profiler drops the ranges past it, which Profile reports.
constexpr size_t kMaxRanges = 64;

// The soname that matches the headers this was compiled against: CUPTI's
// parameter structs are versioned by size, and a library of another major
// release may refuse or misread them.
std::string CuptiSoname() {
  return absl::StrCat("libcupti.so.", CUDA_VERSION / 1000);
}

}  // namespace

// The entry points used, bound with dlsym (SymbolBinder).
struct CuptiApi {
  decltype(&::cuptiGetResultString) cuptiGetResultString;
  decltype(&::cuptiProfilerInitialize) cuptiProfilerInitialize;
  decltype(&::cuptiProfilerDeInitialize) cuptiProfilerDeInitialize;
  decltype(&::cuptiProfilerDeviceSupported) cuptiProfilerDeviceSupported;
  decltype(&::cuptiDeviceGetChipName) cuptiDeviceGetChipName;
  decltype(&::cuptiProfilerGetCounterAvailability)
      cuptiProfilerGetCounterAvailability;
  decltype(&::cuptiProfilerHostInitialize) cuptiProfilerHostInitialize;
  decltype(&::cuptiProfilerHostDeinitialize) cuptiProfilerHostDeinitialize;
  decltype(&::cuptiProfilerHostConfigAddMetrics)
      cuptiProfilerHostConfigAddMetrics;
  decltype(&::cuptiProfilerHostGetConfigImageSize)
      cuptiProfilerHostGetConfigImageSize;
  decltype(&::cuptiProfilerHostGetConfigImage) cuptiProfilerHostGetConfigImage;
  decltype(&::cuptiProfilerHostEvaluateToGpuValues)
      cuptiProfilerHostEvaluateToGpuValues;
  decltype(&::cuptiRangeProfilerEnable) cuptiRangeProfilerEnable;
  decltype(&::cuptiRangeProfilerDisable) cuptiRangeProfilerDisable;
  decltype(&::cuptiRangeProfilerGetCounterDataSize)
      cuptiRangeProfilerGetCounterDataSize;
  decltype(&::cuptiRangeProfilerCounterDataImageInitialize)
      cuptiRangeProfilerCounterDataImageInitialize;
  decltype(&::cuptiRangeProfilerSetConfig) cuptiRangeProfilerSetConfig;
  decltype(&::cuptiRangeProfilerStart) cuptiRangeProfilerStart;
  decltype(&::cuptiRangeProfilerStop) cuptiRangeProfilerStop;
  decltype(&::cuptiRangeProfilerDecodeData) cuptiRangeProfilerDecodeData;
  decltype(&::cuptiRangeProfilerGetCounterDataInfo)
      cuptiRangeProfilerGetCounterDataInfo;
};

namespace {

struct LoadedApi {
  CuptiApi* api = nullptr;
  absl::Status status;
};

// libcupti, loaded once per process: first by soname (LD_LIBRARY_PATH, the
// GPU bundle's lib/), then from where the build found it.
const LoadedApi& LoadApi() {
  static absl::once_flag once;
  static LoadedApi* loaded = new LoadedApi();
  absl::call_once(once, [] {
    std::vector<std::string> names = {CuptiSoname()};
#ifdef COALESCE_CUPTI_LIBRARY
    names.push_back(COALESCE_CUPTI_LIBRARY);
#endif
    absl::StatusOr<void*> lib = OpenFirstLibrary("CUPTI", names);
    if (!lib.ok()) {
      loaded->status = lib.status();
      return;
    }
    auto* api = new CuptiApi();
    SymbolBinder binder(*lib);
    auto bind = [&binder](auto& fn, const char* symbol) {
      binder.Bind(fn, symbol);
    };
    bind(api->cuptiGetResultString, "cuptiGetResultString");
    bind(api->cuptiProfilerInitialize, "cuptiProfilerInitialize");
    bind(api->cuptiProfilerDeInitialize, "cuptiProfilerDeInitialize");
    bind(api->cuptiProfilerDeviceSupported, "cuptiProfilerDeviceSupported");
    bind(api->cuptiDeviceGetChipName, "cuptiDeviceGetChipName");
    bind(api->cuptiProfilerGetCounterAvailability,
         "cuptiProfilerGetCounterAvailability");
    bind(api->cuptiProfilerHostInitialize, "cuptiProfilerHostInitialize");
    bind(api->cuptiProfilerHostDeinitialize, "cuptiProfilerHostDeinitialize");
    bind(api->cuptiProfilerHostConfigAddMetrics,
         "cuptiProfilerHostConfigAddMetrics");
    bind(api->cuptiProfilerHostGetConfigImageSize,
         "cuptiProfilerHostGetConfigImageSize");
    bind(api->cuptiProfilerHostGetConfigImage,
         "cuptiProfilerHostGetConfigImage");
    bind(api->cuptiProfilerHostEvaluateToGpuValues,
         "cuptiProfilerHostEvaluateToGpuValues");
    bind(api->cuptiRangeProfilerEnable, "cuptiRangeProfilerEnable");
    bind(api->cuptiRangeProfilerDisable, "cuptiRangeProfilerDisable");
    bind(api->cuptiRangeProfilerGetCounterDataSize,
         "cuptiRangeProfilerGetCounterDataSize");
    bind(api->cuptiRangeProfilerCounterDataImageInitialize,
         "cuptiRangeProfilerCounterDataImageInitialize");
    bind(api->cuptiRangeProfilerSetConfig, "cuptiRangeProfilerSetConfig");
    bind(api->cuptiRangeProfilerStart, "cuptiRangeProfilerStart");
    bind(api->cuptiRangeProfilerStop, "cuptiRangeProfilerStop");
    bind(api->cuptiRangeProfilerDecodeData, "cuptiRangeProfilerDecodeData");
    bind(api->cuptiRangeProfilerGetCounterDataInfo,
         "cuptiRangeProfilerGetCounterDataInfo");
    if (!binder.missing().empty()) {
      // An older CUPTI, before the range profiler (CUDA 12.6).
      loaded->status = absl::UnimplementedError(
          absl::StrCat("the loaded CUPTI lacks the range profiler: ",
                       absl::StrJoin(binder.missing(), ", ")));
      delete api;
      return;
    }
    loaded->api = api;
  });
  return *loaded;
}

// A CUPTI result as a Status naming the call, with the code the cause
// deserves: what the operator can fix (permission) and what no one can
// (unsupported device) apart from plain failures.
absl::Status Check(const CuptiApi& api, CUptiResult result, const char* call) {
  if (result == CUPTI_SUCCESS) return absl::OkStatus();
  const char* text = nullptr;
  if (api.cuptiGetResultString(result, &text) != CUPTI_SUCCESS ||
      text == nullptr) {
    text = "unknown CUPTI error";
  }
  std::string message = absl::StrCat(call, ": ", text, " (CUptiResult ",
                                     static_cast<int>(result), ")");
  switch (result) {
    case CUPTI_ERROR_INSUFFICIENT_PRIVILEGES:
    case CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES:
      return absl::PermissionDeniedError(absl::StrCat(
          message,
          "; GPU performance counters are restricted to administrators: run "
          "as root, or load the NVIDIA driver with "
          "NVreg_RestrictProfilingToAdminUsers=0 "
          "(https://developer.nvidia.com/ERR_NVGPUCTRPERM)"));
    case CUPTI_ERROR_NOT_SUPPORTED:
    case CUPTI_ERROR_NOT_COMPATIBLE:
    case CUPTI_ERROR_API_NOT_IMPLEMENTED:
    case CUPTI_ERROR_LEGACY_PROFILER_NOT_SUPPORTED:
    case CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_CONFIDENTIAL_COMPUTING_NOT_SUPPORTED:
    case CUPTI_ERROR_CMP_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_SLI_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_WSL_DEVICE_NOT_SUPPORTED:
#if CUPTI_API_VERSION >= 130000
    case CUPTI_ERROR_INVALID_CHIP_NAME:
#endif
      return absl::UnimplementedError(message);
    // "The performance monitoring hardware is in use by other client"
    // (cupti_result.h): what DCGM's profiling metrics, holding the GPU's
    // profiling lock, make CUPTI answer; the other two are Nsight's and an
    // older profiler API's hold on the process. UNAVAILABLE, which
    // --profile_sampling=sampled answers by falling back to NVML GPM.
    case CUPTI_ERROR_HARDWARE_BUSY:
    case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
    case CUPTI_ERROR_OLD_PROFILER_API_INITIALIZED:
      return absl::UnavailableError(absl::StrCat(
          message,
          "; another profiler (DCGM profiling, Nsight Compute or Systems) "
          "holds the device's counters"));
    case CUPTI_ERROR_OUT_OF_MEMORY:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::InternalError(message);
  }
}

// Calls CUPTI's fn(params) through api, returning a failure named after fn.
#define COALESCE_CUPTI_RETURN_IF_ERROR(api, fn, params) \
  COALESCE_RETURN_IF_ERROR(Check((api), (api).fn(params), #fn))

// The context the CUDA runtime made current (the device's primary one),
// through the driver entry point: linking libcuda would stop the binary
// from starting on a machine without the driver, where the CPU backend
// serves.
absl::StatusOr<CUcontext> CurrentContext() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
  COALESCE_CUDA_RETURN_IF_ERROR(cudaGetDriverEntryPointByVersion(
      "cuCtxGetCurrent", &fn, 12000, cudaEnableDefault, &found));
#else
  COALESCE_CUDA_RETURN_IF_ERROR(cudaGetDriverEntryPoint(
      "cuCtxGetCurrent", &fn, cudaEnableDefault, &found));
#endif
  if (fn == nullptr || found != cudaDriverEntryPointSuccess) {
    return absl::InternalError("the driver has no cuCtxGetCurrent");
  }
  CUcontext ctx = nullptr;
  const CUresult r = reinterpret_cast<decltype(&cuCtxGetCurrent)>(fn)(&ctx);
  if (r != CUDA_SUCCESS || ctx == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no current CUDA context to profile (cuCtxGetCurrent: ", r, ")"));
  }
  return ctx;
}

// Why CUPTI refuses a device: every feature it does not report SUPPORTED.
std::string UnsupportedFeatures(
    const CUpti_Profiler_DeviceSupported_Params& p) {
  std::vector<std::string> why;
  auto add = [&](CUpti_Profiler_Support_Level level, const char* feature) {
    if (level == CUPTI_PROFILER_CONFIGURATION_SUPPORTED) return;
    why.push_back(absl::StrCat(
        feature, level == CUPTI_PROFILER_CONFIGURATION_DISABLED
                     ? " (disabled)"
                     : (level == CUPTI_PROFILER_CONFIGURATION_UNSUPPORTED
                            ? " (unsupported)"
                            : " (unknown)")));
  };
  add(p.architecture, "architecture (needs compute capability 7.0+)");
  add(p.sli, "SLI");
  add(p.vGpu, "vGPU");
  add(p.confidentialCompute, "confidential computing");
  add(p.cmp, "CMP");
  add(p.wsl, "WSL");
  return why.empty() ? "no reason given" : absl::StrJoin(why, ", ");
}

}  // namespace

struct CuptiSampler::State {
  const CuptiApi* api = nullptr;
  CUcontext ctx = nullptr;
  bool profiler_initialized = false;
  CUpti_Profiler_Host_Object* host = nullptr;
  // Enabled on ctx from Create to the destructor.
  CUpti_RangeProfiler_Object* profiler = nullptr;
  std::vector<uint8_t> config;
  // kSampledMetrics, as CUPTI's parameters take them.
  std::array<const char*, std::size(kSampledMetrics)> metrics;
};

CuptiSampler::~CuptiSampler() {
  if (state_ == nullptr || state_->api == nullptr) return;
  const CuptiApi& api = *state_->api;
  if (state_->profiler != nullptr) {
    CUpti_RangeProfiler_Disable_Params p = {
        CUpti_RangeProfiler_Disable_Params_STRUCT_SIZE};
    p.pRangeProfilerObject = state_->profiler;
    api.cuptiRangeProfilerDisable(&p);
  }
  if (state_->host != nullptr) {
    CUpti_Profiler_Host_Deinitialize_Params p = {
        CUpti_Profiler_Host_Deinitialize_Params_STRUCT_SIZE};
    p.pHostObject = state_->host;
    api.cuptiProfilerHostDeinitialize(&p);
  }
  if (state_->profiler_initialized) {
    CUpti_Profiler_DeInitialize_Params p = {
        CUpti_Profiler_DeInitialize_Params_STRUCT_SIZE};
    api.cuptiProfilerDeInitialize(&p);
  }
}

absl::StatusOr<std::unique_ptr<CuptiSampler>> CuptiSampler::Create(int device) {
  const LoadedApi& loaded = LoadApi();
  COALESCE_RETURN_IF_ERROR(loaded.status);
  const CuptiApi& api = *loaded.api;
  COALESCE_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  COALESCE_ASSIGN_OR_RETURN(CUcontext ctx, CurrentContext());

  auto sampler = absl::WrapUnique(new CuptiSampler());
  sampler->state_ = std::make_unique<State>();
  State& s = *sampler->state_;
  s.api = &api;
  s.ctx = ctx;
  std::copy(std::begin(kSampledMetrics), std::end(kSampledMetrics),
            s.metrics.begin());

  CUpti_Profiler_Initialize_Params init = {
      CUpti_Profiler_Initialize_Params_STRUCT_SIZE};
  COALESCE_CUPTI_RETURN_IF_ERROR(api, cuptiProfilerInitialize, &init);
  s.profiler_initialized = true;

  CUpti_Profiler_DeviceSupported_Params supported = {
      CUpti_Profiler_DeviceSupported_Params_STRUCT_SIZE};
  supported.cuDevice = device;
  supported.api = CUPTI_PROFILER_RANGE_PROFILING;
  COALESCE_CUPTI_RETURN_IF_ERROR(api, cuptiProfilerDeviceSupported, &supported);
  if (supported.isSupported != CUPTI_PROFILER_CONFIGURATION_SUPPORTED) {
    return absl::UnimplementedError(absl::StrCat(
        "CUDA device ", device, " does not support CUPTI range profiling: ",
        UnsupportedFeatures(supported)));
  }

  CUpti_Device_GetChipName_Params chip = {
      CUpti_Device_GetChipName_Params_STRUCT_SIZE};
  chip.deviceIndex = static_cast<size_t>(device);
  COALESCE_CUPTI_RETURN_IF_ERROR(api, cuptiDeviceGetChipName, &chip);
  const std::string chip_name = chip.pChipName;

  // Counters this context can read: lets the host object leave out what a
  // driver or another client withholds.
  CUpti_Profiler_GetCounterAvailability_Params availability = {
      CUpti_Profiler_GetCounterAvailability_Params_STRUCT_SIZE};
  availability.ctx = ctx;
  COALESCE_CUPTI_RETURN_IF_ERROR(api, cuptiProfilerGetCounterAvailability,
                                 &availability);
  std::vector<uint8_t> availability_image(
      availability.counterAvailabilityImageSize);
  availability.pCounterAvailabilityImage = availability_image.data();
  COALESCE_CUPTI_RETURN_IF_ERROR(api, cuptiProfilerGetCounterAvailability,
                                 &availability);

  CUpti_Profiler_Host_Initialize_Params host = {
      CUpti_Profiler_Host_Initialize_Params_STRUCT_SIZE};
  host.profilerType = CUPTI_PROFILER_TYPE_RANGE_PROFILER;
  host.pChipName = chip_name.c_str();
  host.pCounterAvailabilityImage = availability_image.data();
  COALESCE_CUPTI_RETURN_IF_ERROR(api, cuptiProfilerHostInitialize, &host);
  s.host = host.pHostObject;

  CUpti_Profiler_Host_ConfigAddMetrics_Params add = {
      CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE};
  add.pHostObject = s.host;
  add.ppMetricNames = s.metrics.data();
  add.numMetrics = s.metrics.size();
  const absl::Status added =
      Check(api, api.cuptiProfilerHostConfigAddMetrics(&add),
            "cuptiProfilerHostConfigAddMetrics");
  if (!added.ok()) {
    return absl::Status(
        added.code(),
        absl::StrCat(added.message(), " (metrics ",
                     absl::StrJoin(s.metrics, ", "), " on ", chip_name, ")"));
  }
  CUpti_Profiler_Host_GetConfigImageSize_Params config_size = {
      CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE};
  config_size.pHostObject = s.host;
  COALESCE_CUPTI_RETURN_IF_ERROR(api, cuptiProfilerHostGetConfigImageSize,
                                 &config_size);
  s.config.resize(config_size.configImageSize);
  CUpti_Profiler_Host_GetConfigImage_Params config = {
      CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE};
  config.pHostObject = s.host;
  config.configImageSize = s.config.size();
  config.pConfigImage = s.config.data();
  COALESCE_CUPTI_RETURN_IF_ERROR(api, cuptiProfilerHostGetConfigImage, &config);

  // Enabled once for good: on the H200 the first range after enabling
  // takes about 200 ms to start and disabling about 25 ms, against about
  // 3 ms of set-up per range on an enabled profiler (profile_sampling_gpu_test
  // prints a sampled and an unsampled request's time: `scripts/gpu-check.sh
  // OUT tests`). Outside a range it collects nothing (unsampled requests
  // take no longer with it enabled; its effect on a single kernel's time is
  // not measured).
  CUpti_RangeProfiler_Enable_Params enable = {
      CUpti_RangeProfiler_Enable_Params_STRUCT_SIZE};
  enable.ctx = ctx;
  COALESCE_CUPTI_RETURN_IF_ERROR(api, cuptiRangeProfilerEnable, &enable);
  s.profiler = enable.pRangeProfilerObject;
  // One empty range: the permission and "another profiler" errors come
  // from enabling and starting the profiler, and belong at start-up (which
  // also pays the first start's cost).
  {
    absl::MutexLock range(&sampler->range_mu_);
    absl::WriterMutexLock exclusive(&sampler->launch_mu_);
    Outcome probe;
    int expected = 0;
    COALESCE_RETURN_IF_ERROR(
        sampler->Profile(nullptr, nullptr, &probe, &expected));
  }
  return sampler;
}

absl::Status CuptiSampler::Profile(
    void* stream, absl::FunctionRef<absl::StatusOr<int>()>* launch,
    Outcome* outcome, int* expected_kernels) {
  const State& s = *state_;
  const CuptiApi& api = *s.api;
  CUpti_RangeProfiler_Object* object = s.profiler;
  bool started = false;

  absl::Status status = [&]() -> absl::Status {
    CUpti_RangeProfiler_GetCounterDataSize_Params size = {
        CUpti_RangeProfiler_GetCounterDataSize_Params_STRUCT_SIZE};
    size.pRangeProfilerObject = object;
    size.pMetricNames = const_cast<const char**>(s.metrics.data());
    size.numMetrics = s.metrics.size();
    size.maxNumOfRanges = kMaxRanges;
    size.maxNumRangeTreeNodes = kMaxRanges;
    COALESCE_CUPTI_RETURN_IF_ERROR(api, cuptiRangeProfilerGetCounterDataSize,
                                   &size);
    counter_data_.assign(size.counterDataSize, 0);
    CUpti_RangeProfiler_CounterDataImage_Initialize_Params image = {
        CUpti_RangeProfiler_CounterDataImage_Initialize_Params_STRUCT_SIZE};
    image.pRangeProfilerObject = object;
    image.counterDataSize = counter_data_.size();
    image.pCounterData = counter_data_.data();
    COALESCE_CUPTI_RETURN_IF_ERROR(
        api, cuptiRangeProfilerCounterDataImageInitialize, &image);

    CUpti_RangeProfiler_SetConfig_Params config = {
        CUpti_RangeProfiler_SetConfig_Params_STRUCT_SIZE};
    config.pRangeProfilerObject = object;
    config.configSize = s.config.size();
    config.pConfig = s.config.data();
    config.counterDataImageSize = counter_data_.size();
    config.pCounterDataImage = counter_data_.data();
    config.range = CUPTI_AutoRange;
    config.replayMode = CUPTI_KernelReplay;
    config.maxRangesPerPass = kMaxRanges;
    // Auto ranges are not nested.
    config.numNestingLevels = 1;
    config.minNestingLevel = 1;
    config.passIndex = 0;
    config.targetNestingLevel = 1;
    COALESCE_CUPTI_RETURN_IF_ERROR(api, cuptiRangeProfilerSetConfig, &config);

    CUpti_RangeProfiler_Start_Params start = {
        CUpti_RangeProfiler_Start_Params_STRUCT_SIZE};
    start.pRangeProfilerObject = object;
    COALESCE_CUPTI_RETURN_IF_ERROR(api, cuptiRangeProfilerStart, &start);
    started = true;

    if (launch != nullptr) {
      outcome->launched = true;
      absl::StatusOr<int> kernels = (*launch)();
      if (kernels.ok()) {
        *expected_kernels = *kernels;
        // The kernels must have finished before the range closes.
        outcome->launch_status =
            CudaStatus(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)),
                       "cudaStreamSynchronize", __FILE__, __LINE__);
      } else {
        outcome->launch_status = kernels.status();
      }
      if (!outcome->launch_status.ok()) {
        return absl::AbortedError("the sampled launch failed");
      }
    }

    CUpti_RangeProfiler_Stop_Params stop = {
        CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE};
    stop.pRangeProfilerObject = object;
    started = false;
    COALESCE_CUPTI_RETURN_IF_ERROR(api, cuptiRangeProfilerStop, &stop);
    if (launch == nullptr) return absl::OkStatus();  // the start-up probe
    // Kernel replay runs every pass of a kernel before its launch returns.
    if (!stop.isAllPassSubmitted) {
      return absl::InternalError(
          "cuptiRangeProfilerStop: passes left unsubmitted under kernel "
          "replay");
    }
    CUpti_RangeProfiler_DecodeData_Params decode = {
        CUpti_RangeProfiler_DecodeData_Params_STRUCT_SIZE};
    decode.pRangeProfilerObject = object;
    COALESCE_CUPTI_RETURN_IF_ERROR(api, cuptiRangeProfilerDecodeData, &decode);
    if (decode.numOfRangeDropped > 0) {
      return absl::OutOfRangeError(
          absl::StrCat("the sampled range held more than ", kMaxRanges,
                       " kernels (", decode.numOfRangeDropped, " dropped)"));
    }
    return absl::OkStatus();
  }();

  // A failure inside the range still closes it, so that later launches run
  // unprofiled; the first error is the one reported.
  if (started) {
    CUpti_RangeProfiler_Stop_Params stop = {
        CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE};
    stop.pRangeProfilerObject = object;
    api.cuptiRangeProfilerStop(&stop);
  }
  return status;
}

absl::StatusOr<RangeCounters> CuptiSampler::Evaluate(int expected_kernels) {
  const State& s = *state_;
  const CuptiApi& api = *s.api;
  CUpti_RangeProfiler_GetCounterDataInfo_Params info = {
      CUpti_RangeProfiler_GetCounterDataInfo_Params_STRUCT_SIZE};
  info.pCounterDataImage = counter_data_.data();
  info.counterDataImageSize = counter_data_.size();
  COALESCE_CUPTI_RETURN_IF_ERROR(api, cuptiRangeProfilerGetCounterDataInfo,
                                 &info);
  const size_t ranges = info.numTotalRanges;
  if (ranges == 0) {
    return absl::FailedPreconditionError(
        "no kernel ran inside the sampled range");
  }
  // The launch lock keeps other requests' kernels out; a benchmark's
  // (autotuning) is not held by it and shows here as a surplus kernel.
  if (expected_kernels > 0 && ranges != static_cast<size_t>(expected_kernels)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the sampled range held ", ranges, " kernels but the variant launched ",
        expected_kernels, ": other work ran inside it"));
  }
  RangeCounters c;
  c.kernels = static_cast<int>(ranges);
  double weighted_occupancy = 0;
  std::array<double, std::size(kSampledMetrics)> values{};
  for (size_t i = 0; i < ranges; ++i) {
    CUpti_Profiler_Host_EvaluateToGpuValues_Params eval = {
        CUpti_Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE};
    eval.pHostObject = s.host;
    eval.pCounterDataImage = counter_data_.data();
    eval.counterDataImageSize = counter_data_.size();
    eval.rangeIndex = i;
    eval.ppMetricNames = const_cast<const char**>(s.metrics.data());
    eval.numMetrics = s.metrics.size();
    eval.pMetricValues = values.data();
    COALESCE_CUPTI_RETURN_IF_ERROR(api, cuptiProfilerHostEvaluateToGpuValues,
                                   &eval);
    // In kSampledMetrics' order: percent, bytes, nanoseconds.
    const double seconds = values[2] * 1e-9;
    c.dram_bytes += values[1];
    c.gpu_seconds += seconds;
    weighted_occupancy += values[0] / 100.0 * seconds;
  }
  if (!(c.gpu_seconds > 0)) {
    return absl::InternalError(
        absl::StrCat("the profiler read no GPU time for ", ranges, " kernels"));
  }
  c.achieved_occupancy =
      std::clamp(weighted_occupancy / c.gpu_seconds, 0.0, 1.0);
  return c;
}

CuptiSampler::Outcome CuptiSampler::TrySample(
    void* stream, absl::FunctionRef<absl::StatusOr<int>()> launch) {
  Outcome outcome;
  if (!range_mu_.TryLock()) {
    outcome.busy = true;
    return outcome;
  }
  int expected_kernels = 0;
  absl::Status profiled;
  {
    absl::WriterMutexLock exclusive(&launch_mu_);
    profiled = Profile(stream, &launch, &outcome, &expected_kernels);
  }
  if (outcome.launched && !outcome.launch_status.ok()) {
    outcome.counters = absl::AbortedError("the sampled launch failed");
  } else if (!profiled.ok()) {
    outcome.counters = profiled;
  } else {
    outcome.counters = Evaluate(expected_kernels);
  }
  range_mu_.Unlock();
  return outcome;
}

#endif  // COALESCE_WITH_CUPTI

}  // namespace coalesce::cuda
