#include "kernels/cuda/profiling/gpm_reader.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <utility>
#include <vector>

#include "absl/base/call_once.h"
#include "absl/memory/memory.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "kernels/cuda/runtime/dynamic_library.h"

namespace coalesce::cuda {
namespace {

// ---- NVML, as declared by nvml.h (NVML API version 12).
// Sources: NVIDIA's nvml.h as vendored in github.com/NVIDIA/go-nvml
// (gen/nvml/nvml.h, "NVML VERSION: 12.2.140": nvmlReturn_t, the
// nvmlGpmMetricId_t enum, nvmlGpmMetric_t, nvmlGpmMetricsGet_t,
// nvmlGpmSupport_t, NVML_GPM_METRICS_GET_VERSION, NVML_GPM_SUPPORT_VERSION
// and the GPM function prototypes), and the NVML API reference
// (https://docs.nvidia.com/deploy/nvml-api/group__nvmlGpmFunctions.html,
// structnvmlGpmMetricsGet__t.html). Only what this file uses.

// enum nvmlReturn_enum: a C enum, int-sized.
using nvmlReturn_t = int;
constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr nvmlReturn_t NVML_ERROR_INVALID_ARGUMENT = 2;
constexpr nvmlReturn_t NVML_ERROR_NOT_SUPPORTED = 3;
constexpr nvmlReturn_t NVML_ERROR_NO_PERMISSION = 4;
constexpr nvmlReturn_t NVML_ERROR_NOT_FOUND = 6;
constexpr nvmlReturn_t NVML_ERROR_DRIVER_NOT_LOADED = 9;
constexpr nvmlReturn_t NVML_ERROR_TIMEOUT = 10;
constexpr nvmlReturn_t NVML_ERROR_LIBRARY_NOT_FOUND = 12;
constexpr nvmlReturn_t NVML_ERROR_FUNCTION_NOT_FOUND = 13;
constexpr nvmlReturn_t NVML_ERROR_GPU_IS_LOST = 15;
constexpr nvmlReturn_t NVML_ERROR_RESET_REQUIRED = 16;
constexpr nvmlReturn_t NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18;
constexpr nvmlReturn_t NVML_ERROR_IN_USE = 19;
constexpr nvmlReturn_t NVML_ERROR_MEMORY = 20;
constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_RESOURCES = 23;
constexpr nvmlReturn_t NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25;
constexpr nvmlReturn_t NVML_ERROR_NOT_READY = 27;
constexpr nvmlReturn_t NVML_ERROR_GPU_NOT_FOUND = 28;

using nvmlDevice_t = struct nvmlDevice_st*;
using nvmlGpmSample_t = struct nvmlGpmSample_st*;

// nvmlGpmMetricId_t.
constexpr unsigned int NVML_GPM_METRIC_SM_OCCUPANCY = 3;
constexpr unsigned int NVML_GPM_METRIC_DRAM_BW_UTIL = 10;

// nvmlGpmMetric_t.
struct nvmlGpmMetric_t {
  unsigned int metricId;    // IN
  nvmlReturn_t nvmlReturn;  // OUT: value is valid only if NVML_SUCCESS
  double value;             // OUT
  struct {
    char* shortName;
    char* longName;
    char* unit;
  } metricInfo;  // OUT, may be null
};

// nvmlGpmMetricsGet_t's metrics[] has NVML_GPM_METRIC_MAX entries: 98 in
// NVML 12.2, larger in later releases (333 in the R550 headers) under the
// same NVML_GPM_METRICS_GET_VERSION 1. NVML reads and writes the first
// numMetrics entries; the array is sized well past every release's maximum
// so that a driver newer than any header seen still stays inside it.
constexpr size_t kGpmMetricSlots = 1024;

// nvmlGpmMetricsGet_t.
struct nvmlGpmMetricsGet_t {
  unsigned int version;     // IN: NVML_GPM_METRICS_GET_VERSION
  unsigned int numMetrics;  // IN
  nvmlGpmSample_t sample1;  // IN
  nvmlGpmSample_t sample2;  // IN
  nvmlGpmMetric_t metrics[kGpmMetricSlots];
};
constexpr unsigned int NVML_GPM_METRICS_GET_VERSION = 1;

// nvmlGpmSupport_t.
struct nvmlGpmSupport_t {
  unsigned int version;            // IN: NVML_GPM_SUPPORT_VERSION
  unsigned int isSupportedDevice;  // OUT
};
constexpr unsigned int NVML_GPM_SUPPORT_VERSION = 1;

// The C layout on LP64 (x86-64, aarch64), which these mirror.
static_assert(sizeof(nvmlGpmMetric_t) == 40);
static_assert(offsetof(nvmlGpmMetric_t, value) == 8);
static_assert(offsetof(nvmlGpmMetricsGet_t, sample1) == 8);
static_assert(offsetof(nvmlGpmMetricsGet_t, metrics) == 24);
static_assert(sizeof(nvmlGpmSupport_t) == 8);

// The entry points used, bound with dlsym (SymbolBinder).
struct NvmlApi {
  nvmlReturn_t (*nvmlInit_v2)();
  nvmlReturn_t (*nvmlShutdown)();
  const char* (*nvmlErrorString)(nvmlReturn_t);
  nvmlReturn_t (*nvmlDeviceGetHandleByUUID)(const char*, nvmlDevice_t*);
  nvmlReturn_t (*nvmlGpmQueryDeviceSupport)(nvmlDevice_t, nvmlGpmSupport_t*);
  nvmlReturn_t (*nvmlGpmSampleAlloc)(nvmlGpmSample_t*);
  nvmlReturn_t (*nvmlGpmSampleFree)(nvmlGpmSample_t);
  nvmlReturn_t (*nvmlGpmSampleGet)(nvmlDevice_t, nvmlGpmSample_t);
  nvmlReturn_t (*nvmlGpmMetricsGet)(nvmlGpmMetricsGet_t*);
};

struct LoadedApi {
  NvmlApi* api = nullptr;
  absl::Status status;
};

// libnvidia-ml, loaded once per process. Only the driver's soname: the
// toolkit's stubs/libnvidia-ml.so answers every call with an error.
const LoadedApi& LoadApi() {
  static absl::once_flag once;
  static LoadedApi* loaded = new LoadedApi();
  absl::call_once(once, [] {
    absl::StatusOr<void*> lib = OpenFirstLibrary(
        "NVML (the NVIDIA driver's libnvidia-ml.so.1)", {"libnvidia-ml.so.1"});
    if (!lib.ok()) {
      loaded->status = lib.status();
      return;
    }
    auto* api = new NvmlApi();
    SymbolBinder binder(*lib);
    binder.Bind(api->nvmlInit_v2, "nvmlInit_v2");
    binder.Bind(api->nvmlShutdown, "nvmlShutdown");
    binder.Bind(api->nvmlErrorString, "nvmlErrorString");
    binder.Bind(api->nvmlDeviceGetHandleByUUID, "nvmlDeviceGetHandleByUUID");
    binder.Bind(api->nvmlGpmQueryDeviceSupport, "nvmlGpmQueryDeviceSupport");
    binder.Bind(api->nvmlGpmSampleAlloc, "nvmlGpmSampleAlloc");
    binder.Bind(api->nvmlGpmSampleFree, "nvmlGpmSampleFree");
    binder.Bind(api->nvmlGpmSampleGet, "nvmlGpmSampleGet");
    binder.Bind(api->nvmlGpmMetricsGet, "nvmlGpmMetricsGet");
    if (!binder.missing().empty()) {
      // A driver older than GPM (R520).
      loaded->status = absl::UnimplementedError(
          absl::StrCat("the loaded NVML lacks GPM (driver R520 or newer): ",
                       absl::StrJoin(binder.missing(), ", ")));
      delete api;
      return;
    }
    loaded->api = api;
  });
  return *loaded;
}

absl::Status Check(const NvmlApi& api, nvmlReturn_t result, const char* call) {
  if (result == NVML_SUCCESS) return absl::OkStatus();
  return NvmlStatus(result, call, api.nvmlErrorString(result));
}

#define COALESCE_NVML_RETURN_IF_ERROR(api, call) \
  COALESCE_RETURN_IF_ERROR(Check((api), (api).call, #call))

}  // namespace

absl::StatusOr<DeviceActivity> ActivityFromGpm(const GpmPercents& percents,
                                               double peak_bandwidth,
                                               double seconds) {
  if (!std::isfinite(percents.sm_occupancy) ||
      !std::isfinite(percents.dram_bw_util)) {
    return absl::InvalidArgumentError(
        absl::StrCat("GPM returned SM occupancy ", percents.sm_occupancy,
                     "% and DRAM bandwidth ", percents.dram_bw_util, "%"));
  }
  if (!(peak_bandwidth > 0) || !std::isfinite(peak_bandwidth)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the device's peak DRAM bandwidth is ", peak_bandwidth, " bytes/s"));
  }
  if (!(seconds > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("GPM samples ", seconds, " s apart"));
  }
  DeviceActivity a;
  a.sm_occupancy = std::clamp(percents.sm_occupancy, 0.0, 100.0) / 100.0;
  a.dram_bytes_per_second =
      std::clamp(percents.dram_bw_util, 0.0, 100.0) / 100.0 * peak_bandwidth;
  a.interval_seconds = seconds;
  return a;
}

absl::Status NvmlStatus(int result, absl::string_view call, const char* text) {
  if (result == NVML_SUCCESS) return absl::OkStatus();
  const std::string message =
      absl::StrCat(call, ": ", text != nullptr ? text : "unknown NVML error",
                   " (nvmlReturn_t ", result, ")");
  switch (result) {
    case NVML_ERROR_NOT_SUPPORTED:
    case NVML_ERROR_DRIVER_NOT_LOADED:
    case NVML_ERROR_LIBRARY_NOT_FOUND:
    case NVML_ERROR_FUNCTION_NOT_FOUND:
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
      return absl::UnimplementedError(message);
    case NVML_ERROR_NO_PERMISSION:
      return absl::PermissionDeniedError(message);
    case NVML_ERROR_NOT_FOUND:
    case NVML_ERROR_GPU_NOT_FOUND:
      return absl::NotFoundError(message);
    case NVML_ERROR_TIMEOUT:
    case NVML_ERROR_GPU_IS_LOST:
    case NVML_ERROR_RESET_REQUIRED:
    case NVML_ERROR_IN_USE:
    case NVML_ERROR_NOT_READY:
      return absl::UnavailableError(message);
    case NVML_ERROR_MEMORY:
    case NVML_ERROR_INSUFFICIENT_RESOURCES:
      return absl::ResourceExhaustedError(message);
    case NVML_ERROR_INVALID_ARGUMENT:
    default:
      return absl::InternalError(message);
  }
}

struct GpmReader::State {
  const NvmlApi* api = nullptr;
  bool initialized = false;
  nvmlDevice_t device = nullptr;
  // samples[previous] holds the last sample taken; the other is read into.
  nvmlGpmSample_t samples[2] = {nullptr, nullptr};
  int previous = 0;
  std::chrono::steady_clock::time_point previous_time;
  // Reused by every Read (about 40 KB).
  std::unique_ptr<nvmlGpmMetricsGet_t> get =
      std::make_unique<nvmlGpmMetricsGet_t>();

  ~State() {
    if (api == nullptr) return;
    for (nvmlGpmSample_t s : samples) {
      if (s != nullptr) api->nvmlGpmSampleFree(s);
    }
    // NVML counts initializations; this undoes Create's.
    if (initialized) api->nvmlShutdown();
  }
};

GpmReader::~GpmReader() = default;

absl::StatusOr<std::unique_ptr<GpmReader>> GpmReader::Create(
    const std::string& uuid, double peak_bandwidth) {
  if (!absl::StartsWith(uuid, "GPU-")) {
    return absl::StartsWith(uuid, "MIG-")
               ? absl::UnimplementedError(
                     absl::StrCat("NVML GPM of a MIG instance (", uuid,
                                  ") is not read here: only whole GPUs"))
               : absl::InvalidArgumentError(absl::StrCat(
                     "not a GPU UUID: '", uuid, "' (want GPU-...)"));
  }
  if (!(peak_bandwidth > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the device's peak DRAM bandwidth is ", peak_bandwidth, " bytes/s"));
  }
  const LoadedApi& loaded = LoadApi();
  COALESCE_RETURN_IF_ERROR(loaded.status);
  const NvmlApi& api = *loaded.api;

  auto state = std::make_unique<State>();
  state->api = &api;
  COALESCE_NVML_RETURN_IF_ERROR(api, nvmlInit_v2());
  state->initialized = true;
  COALESCE_NVML_RETURN_IF_ERROR(
      api, nvmlDeviceGetHandleByUUID(uuid.c_str(), &state->device));
  nvmlGpmSupport_t support = {};
  support.version = NVML_GPM_SUPPORT_VERSION;
  COALESCE_NVML_RETURN_IF_ERROR(
      api, nvmlGpmQueryDeviceSupport(state->device, &support));
  if (support.isSupportedDevice == 0) {
    return absl::UnimplementedError(
        absl::StrCat("GPU ", uuid,
                     " does not support NVML GPM (Hopper or newer, with a "
                     "driver that enables it)"));
  }
  for (nvmlGpmSample_t& s : state->samples) {
    COALESCE_NVML_RETURN_IF_ERROR(api, nvmlGpmSampleAlloc(&s));
  }
  COALESCE_NVML_RETURN_IF_ERROR(
      api, nvmlGpmSampleGet(state->device, state->samples[0]));
  state->previous = 0;
  state->previous_time = std::chrono::steady_clock::now();

  auto reader = absl::WrapUnique(new GpmReader());
  reader->peak_bandwidth_ = peak_bandwidth;
  absl::MutexLock lock(&reader->mu_);
  reader->state_ = std::move(state);
  return reader;
}

absl::StatusOr<DeviceActivity> GpmReader::Read() {
  absl::MutexLock lock(&mu_);
  State& s = *state_;
  const NvmlApi& api = *s.api;
  const auto now = std::chrono::steady_clock::now();
  const std::chrono::duration<double> apart = now - s.previous_time;
  if (apart < kGpmMinSampleInterval) {
    return absl::FailedPreconditionError(absl::StrCat(
        "GPM samples ", apart.count() * 1e3, " ms apart: NVML needs ",
        kGpmMinSampleInterval.count(), " ms"));
  }
  const int next = 1 - s.previous;
  COALESCE_NVML_RETURN_IF_ERROR(api,
                                nvmlGpmSampleGet(s.device, s.samples[next]));
  // From here the new sample is the previous one of the next Read, whatever
  // the metrics below say: each interval starts at the latest sample.
  const nvmlGpmSample_t first = s.samples[s.previous];
  s.previous = next;
  s.previous_time = now;

  nvmlGpmMetricsGet_t& get = *s.get;
  get.version = NVML_GPM_METRICS_GET_VERSION;
  get.numMetrics = 2;
  get.sample1 = first;
  get.sample2 = s.samples[next];
  get.metrics[0] = {};
  get.metrics[0].metricId = NVML_GPM_METRIC_SM_OCCUPANCY;
  get.metrics[1] = {};
  get.metrics[1].metricId = NVML_GPM_METRIC_DRAM_BW_UTIL;
  COALESCE_NVML_RETURN_IF_ERROR(api, nvmlGpmMetricsGet(&get));
  COALESCE_RETURN_IF_ERROR(
      Check(api, get.metrics[0].nvmlReturn, "nvmlGpmMetricsGet(SM_OCCUPANCY)"));
  COALESCE_RETURN_IF_ERROR(
      Check(api, get.metrics[1].nvmlReturn, "nvmlGpmMetricsGet(DRAM_BW_UTIL)"));
  GpmPercents percents;
  percents.sm_occupancy = get.metrics[0].value;
  percents.dram_bw_util = get.metrics[1].value;
  return ActivityFromGpm(percents, peak_bandwidth_, apart.count());
}

}  // namespace coalesce::cuda
