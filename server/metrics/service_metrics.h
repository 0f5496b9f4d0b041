// What the TensorOps service reports about every RPC, as an interface so that
// the service knows nothing of Prometheus (the metrics boundary): BuildServer
// injects metrics::PrometheusServiceMetrics, and the kernel figures arrive
// here as the backend measured them (RunResult), with the derived figures
// computed once by the service for both the KernelReport and the metrics.
//
// Call order per RPC: RpcStarted; for ops that run a kernel, VariantSelected
// and BackendStarted once the request is decoded and a variant chosen,
// Launched once the backend returns, and KernelRan and LaunchServed when it
// succeeded (once per launch: a batch of requests reports them once);
// RpcFinished always, also on errors.
// Implementations are thread-safe: the service calls them from every request
// thread at once, so they must be cheap (no shared lock, no allocation).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "kernels/core/backend.h"
#include "kernels/core/problem.h"
#include "kernels/selection/heuristic.h"

namespace coalesce {

// The RPCs of coalesce.v1.TensorOps, then those of the KServe v2
// inference.GRPCInferenceService. The four that run a kernel share their
// numbering with OpKind. A ModelInfer that runs a native op is reported as
// that op (kTranspose); kModelInfer counts the others (identity, and those
// refused before reaching an op).
enum class Rpc : int {
  kTranspose = 0,
  kGemm = 1,
  kConvertLayout = 2,
  kGeluLayerNorm = 3,
  kGetServerInfo = 4,
  kExplainSelection = 5,
  kEcho = 6,
  kPutTensor = 7,
  kGetTensor = 8,
  kDeleteTensor = 9,
  kListTensors = 10,
  kRegisterSharedMemory = 11,
  kUnregisterSharedMemory = 12,
  kListSharedMemory = 13,
  kServerLive = 14,
  kServerReady = 15,
  kModelReady = 16,
  kServerMetadata = 17,
  kModelMetadata = 18,
  kModelInfer = 19,
  kModelStreamInfer = 20,
  kModelConfig = 21,
  kModelStatistics = 22,
  kRepositoryIndex = 23,
  kSystemSharedMemoryStatus = 24,
  kSystemSharedMemoryRegister = 25,
  kSystemSharedMemoryUnregister = 26,
  kCudaSharedMemoryStatus = 27,
  kCudaSharedMemoryRegister = 28,
  kCudaSharedMemoryUnregister = 29,
};
inline constexpr int kNumRpcs = 30;
inline constexpr int kNumKernelRpcs = 4;
static_assert(static_cast<int>(Rpc::kGeluLayerNorm) ==
                  static_cast<int>(OpKind::kGeluLayerNorm) &&
              static_cast<int>(Rpc::kConvertLayout) ==
                  static_cast<int>(OpKind::kConvertLayout));

inline Rpc RpcOf(OpKind op) { return static_cast<Rpc>(op); }
inline bool RunsKernel(Rpc rpc) {
  return static_cast<int>(rpc) < kNumKernelRpcs;
}
// OpName of the op for the four kernel RPCs; the RPC's name in snake case
// ("get_server_info", "put_tensor", ...) for the others, prefixed "kserve_"
// for the KServe ones ("kserve_model_infer").
absl::string_view RpcName(Rpc rpc);

// One successful kernel execution.
struct KernelObservation {
  const KernelVariant* variant = nullptr;  // from the backend's registry
  OpKind op = OpKind::kTranspose;
  DType dtype = DType::kFloat32;
  int64_t bytes_moved = 0;      // MinBytesMoved of the problem
  double bytes_per_second = 0;  // bytes_moved / kernel_seconds
  double flops_per_second = 0;  // Flops / kernel_seconds (0: no FLOPs)
  double peak_fraction = 0;     // of the measured copy peak; 0: unknown
  RunResult run;                // times and launch, as the backend measured
};

struct RpcOutcome {
  Rpc rpc = Rpc::kTranspose;
  absl::StatusCode code = absl::StatusCode::kOk;
  double seconds = 0;            // handler entry to return
  int64_t request_bytes = 0;     // serialized size of the request
  int64_t response_bytes = 0;    // serialized size of the response; 0 on error
  bool reached_backend = false;  // BackendStarted was called
};

// How much per-kernel detail the kernel metric families carry
// (--metrics_detail).
enum class MetricsDetail {
  kBasic,  // op and variant
  kFull,   // op, variant, dtype and size bucket
};
// "basic" or "full"; false otherwise.
bool ParseMetricsDetail(absl::string_view text, MetricsDetail* detail);

class ServiceMetrics {
 public:
  virtual ~ServiceMetrics() = default;
  // The RPC entered its handler: in flight, and queued until it reaches the
  // backend.
  virtual void RpcStarted(Rpc rpc) = 0;
  // Selection chose selection.variant.
  virtual void VariantSelected(const Selection& selection) = 0;
  // The request is handed to the backend: no longer queued.
  virtual void BackendStarted(Rpc rpc) = 0;
  // The backend returned; its launch began queue_seconds after the request
  // entered the handler (decoding, the device queue, selection, output
  // allocation and the wait for a free stream).
  virtual void Launched(Rpc rpc, double queue_seconds) = 0;
  virtual void KernelRan(const KernelObservation& kernel) = 0;
  // One launch of op served `requests` requests (1 unless batched); called
  // once per successful launch, whether or not KernelRan was.
  virtual void LaunchServed(OpKind op, int requests) = 0;
  virtual void RpcFinished(const RpcOutcome& outcome) = 0;
};

}  // namespace coalesce
