// gemm.cuda.cublaslt: the vendor baseline, cuBLASLt (linked dynamically).
//
// - Row-major through column-major: a row-major [r,c] array is the
//   column-major c x r matrix, so D^T (n x m) = op(B)^T op(A)^T is computed
//   with cuBLASLt's A = our B and B = our A, transposes carried over.
// - Batches through the strided-batch layout attributes; A and B may be
//   broadcast (stride 0). C is given D's layout (a broadcast or otherwise
//   strided C is left to the other variants), and when C is not read
//   (absent, or beta == 0) D stands in for it with beta = 0.
// - Plans (matmul descriptor, four layouts, the heuristic's first
//   algorithm, or in float32 with short K its first unsplit one
//   (cublaslt_pick.h), and its workspace need) are cached per shape key; the
//   handle is per device and the 32 MiB workspace per (device, stream), because
//   the backend runs requests on several streams at once and two matmuls
//   in flight must not share a workspace. All of it is created lazily
//   under one mutex and freed with the variant.
//
// Compute type float32 (CUBLAS_COMPUTE_32F, or _FAST_TF32 when a float32
// problem allows TF32), scale type float32, for float32, float16 and
// bfloat16 operands alike.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/lru_cache.h"
#include "base/status_macros.h"
#include "kernels/cuda/gemm/common.h"
#include "kernels/cuda/gemm/cublaslt_api.h"
#include "kernels/cuda/gemm/cublaslt_pick.h"
#include "kernels/cuda/runtime/cuda_check.h"
#include "kernels/cuda/runtime/launch.h"
#include "kernels/cuda/variants.h"

namespace coalesce::cuda {
namespace {

constexpr char kName[] = "gemm.cuda.cublaslt";
// The workspace cuBLAS documents as enough for every Hopper kernel.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;
// Plans kept (all devices): M from 1 to 4096 against one weight, each at
// one alignment.
constexpr size_t kMaxPlans = 4096;
// cuBLASLt's fraction of the peak that EstimateSeconds divides by (fp32
// SIMT, or the 16-bit tensor peak): at 4096^3 on the H200 51.3 of 66.9
// TFLOP/s in float32, 789 and 753 of 1070 in bfloat16 and float16:
// `coalesce-bench kernels --ops=gemm --dtypes=float32,bfloat16,float16
// --shape=1,4096,4096,4096 --variants=cublaslt`.
constexpr double kEfficiency = 0.72;
// What a call costs beyond a plain kernel launch: K = 1 and GEMV calls of
// a few KB took 3.7-4.5 us in the H200 selection sweep (64x64x1, 64x1x128,
// 1x64x5; graph-replayed, so no host overhead included).
constexpr double kCallSeconds = 1.9e-6;
// In 16 bits with B transposed and N not a multiple of 8 (D's rows not
// 16-byte aligned), large problems ran at 0.04-0.23 of the tensor peak in
// the H200 sweeps, 1.6-3.6x slower than wgmma (kernels/cuda/testdata/
// gemm_classes_seed*.txt: 1557x1321x304, 889x6826x3008, 1088x6567x1280),
// where smaller M or K ran at par: a quarter of the aligned rate.
constexpr double kUnalignedRowsFactor = 0.25;
bool SlowUnalignedRows(const GemmProblem& g) {
  return g.dtype != DType::kFloat32 && g.trans_b && g.n % 8 != 0 &&
         g.m >= 768 && g.n >= 1024 && g.k >= 256;
}

// bfloat16 GEMMs (not batched, not GEMVs) with an odd leading dimension (a
// row of A, B or D that is not 4-byte aligned): cuBLASLt's heuristic often
// picks a slower kernel than for the same float16 problem. Of a few us in
// the H200 sweep's seed-7 shapes, bfloat16 took 1.83 us more than float16
// on the mean (76 shapes; 45 of them over 1.5 us more) where aligned ones
// took 0.31 more (108): 1.5 us.
constexpr double kBf16OddRowsSeconds = 1.5e-6;
bool Bf16OddRows(const GemmProblem& g) {
  if (g.dtype != DType::kBFloat16 || g.batch != 1 || g.m == 1 || g.n == 1) {
    return false;
  }
  const int64_t lda = g.trans_a ? g.m : g.k;
  const int64_t ldb = g.trans_b ? g.k : g.n;
  return ((lda | ldb | g.n) & 1) != 0;
}

// Float32 without TF32 runs on cuBLASLt's SIMT kernels; their model, fitted
// to the sweep's seed-7 shapes (bench/gemm_selection_fit.py --fit), is
// Float32Seconds below.
//
// A small output splits K over more CTAs, and the partial sums take a
// second kernel: under 32K outputs (about a 16x16 tile per SM) and K >= 2,
// 2.4 us more (fitted when K of 2-128 split too: 6.1-8.6 us there against
// 4.4-4.5 at K = 1). With K <= 128 the plan avoids splitting (LtAvoidsSplitK):
// 4.2-4.4 us at K of 6-7, 5.0-5.6 at 64, 6.4-6.6 at 128 in the H200 sweep
// (211 such shapes of seeds 7 and 8, every class; without the split cost
// the estimate is 0.26 us under the median), so only K > 128 pays it, and
// never GEMVs (m or n of 1: 3.9-4.4 us for 64x1x89 to 64x1x256). A plan
// also avoids the split where cuBLASLt's first algorithm fills 0.2 waves or
// splits K into parts of under 2 steps (K <= 512), or splits 256 ways or
// more (any K; its fallback still splits, 33 ways), which the estimate
// cannot see: it charges those the split as well.
constexpr double kSplitKSeconds = 2.4e-6;
constexpr int64_t kSplitKMaxOutputs = 32768;
// Operands from HBM (GemmOperandsFromHbm) add latency to every step of a
// CTA's K loop, which the split caps: 7.4-7.5 us at K = 64 against 5.4-6.2
// from L2, 9-12.5 at K of 128-256, and 12.4-14 at K of thousands.
constexpr double kHbmStepSeconds = 16e-9;
constexpr int64_t kHbmMaxSteps = 256;
// The minimum bytes at this share of the copy peak, on top of the FLOPs at
// kEfficiency (2303x684x64: 11.8 us, 384x5952x64: 16.6).
constexpr double kMemoryEfficiency = 0.6;
// Batches (not GEMVs) do not split K: each CTA walks all of K, about 36 ns
// a step while the CTAs fit one wave, whatever the batch (2x64x64x3339:
// 128.5 us; 10x256x64x3712: 132.3), less for some tiny outputs (8x2x5x960:
// 21.2 us on an H100, 20 ns a step). As a floor the step is the lower
// quartile of the sweep's seed-7 batched shapes with K >= 256 (32 of them:
// 34.5 ns; median 37.4), so that it rarely over-charges. The 2 us is from
// the best fit (then with 36 ns) to all 199 of seed 7's batched shapes that
// changed none of their picks; no pick of seeds 7 and 8 moves between a 28
// and a 36 ns step.
constexpr double kBatchedFloorSeconds = 2e-6;
constexpr double kBatchedKStepSeconds = 34e-9;

double Float32Seconds(const GemmProblem& p, const DeviceInfo& dev) {
  const RooflineSeconds r = Roofline(p, dev);
  double t = kGpuLaunchSeconds + kCallSeconds + r.math / kEfficiency +
             r.memory / kMemoryEfficiency;
  const bool gemv = p.m == 1 || p.n == 1;
  if (p.k > kLtNoSplitMaxK && p.batch * p.m * p.n < kSplitKMaxOutputs &&
      !gemv) {
    t += kSplitKSeconds;
  }
  if (GemmOperandsFromHbm(p, dev)) {
    t += kHbmStepSeconds * static_cast<double>(std::min(p.k, kHbmMaxSteps));
  }
  if (p.batch > 1 && !gemv) {
    t = std::max(t, kBatchedFloorSeconds +
                        kBatchedKStepSeconds * static_cast<double>(p.k));
  }
  return t;
}

absl::Status LtStatus(cublasStatus_t s, const char* expr) {
  if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  std::string msg = absl::StrCat(kName, ": ", expr, ": ", Lt().GetStatusName(s),
                                 " (", Lt().GetStatusString(s), ")");
  switch (s) {
    case CUBLAS_STATUS_ALLOC_FAILED:
      return absl::ResourceExhaustedError(std::move(msg));
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return absl::UnimplementedError(std::move(msg));
    default:
      return absl::InternalError(std::move(msg));
  }
}

#define COALESCE_LT_RETURN_IF_ERROR(expr)                         \
  do {                                                            \
    ::absl::Status _coalesce_lt_status = LtStatus((expr), #expr); \
    if (!_coalesce_lt_status.ok()) return _coalesce_lt_status;    \
  } while (0)

cudaDataType_t LtType(DType t) {
  switch (t) {
    case DType::kFloat16:
      return CUDA_R_16F;
    case DType::kBFloat16:
      return CUDA_R_16BF;
    case DType::kFloat32:
      break;
  }
  return CUDA_R_32F;
}

// The largest power of two (up to 256) dividing the address: what the
// heuristic may assume about the pointers.
uint32_t AlignmentOf(const void* p) {
  const uintptr_t v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 1;
  while (a < 256 && v % (2 * a) == 0) a *= 2;
  return a;
}

// Everything a plan depends on.
struct PlanKey {
  int device;
  DType dtype;
  int64_t m, n, k, batch, stride_a, stride_b;
  bool trans_a, trans_b, tf32;
  uint32_t alignment;
  bool operator<(const PlanKey& o) const {
    return std::tie(device, dtype, m, n, k, batch, stride_a, stride_b, trans_a,
                    trans_b, tf32, alignment) <
           std::tie(o.device, o.dtype, o.m, o.n, o.k, o.batch, o.stride_a,
                    o.stride_b, o.trans_a, o.trans_b, o.tf32, o.alignment);
  }
};

struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr;  // cuBLASLt's A: our B
  cublasLtMatrixLayout_t b = nullptr;  // cuBLASLt's B: our A
  cublasLtMatrixLayout_t d = nullptr;  // C and D
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
  ~Plan() {
    if (d != nullptr) Lt().MatrixLayoutDestroy(d);
    if (b != nullptr) Lt().MatrixLayoutDestroy(b);
    if (a != nullptr) Lt().MatrixLayoutDestroy(a);
    if (op != nullptr) Lt().MatmulDescDestroy(op);
  }
};

// A column-major rows x cols layout, batched when batch > 1.
absl::Status MakeLayout(cublasLtMatrixLayout_t* layout, cudaDataType_t type,
                        int64_t rows, int64_t cols, int64_t batch,
                        int64_t batch_stride) {
  COALESCE_LT_RETURN_IF_ERROR(
      Lt().MatrixLayoutCreate(layout, type, rows, cols, rows));
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    COALESCE_LT_RETURN_IF_ERROR(Lt().MatrixLayoutSetAttribute(
        *layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    COALESCE_LT_RETURN_IF_ERROR(Lt().MatrixLayoutSetAttribute(
        *layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &batch_stride,
        sizeof(batch_stride)));
  }
  return absl::OkStatus();
}

int32_t SplitKOf(const cublasLtMatmulAlgo_t& algo) {
  int32_t splits = 1;
  size_t written = 0;
  if (Lt().MatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                                        &splits, sizeof(splits),
                                        &written) != CUBLAS_STATUS_SUCCESS) {
    return 1;
  }
  return splits;
}

absl::Status BuildPlan(cublasLtHandle_t handle, const PlanKey& key,
                       Plan* plan) {
  const cudaDataType_t type = LtType(key.dtype);
  const cublasComputeType_t compute =
      key.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  COALESCE_LT_RETURN_IF_ERROR(
      Lt().MatmulDescCreate(&plan->op, compute, CUDA_R_32F));
  const cublasOperation_t op_a = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  COALESCE_LT_RETURN_IF_ERROR(Lt().MatmulDescSetAttribute(
      plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  COALESCE_LT_RETURN_IF_ERROR(Lt().MatmulDescSetAttribute(
      plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  // Our B, stored [k,n] (or [n,k]), is the column-major n x k (k x n).
  COALESCE_RETURN_IF_ERROR(
      MakeLayout(&plan->a, type, key.trans_b ? key.k : key.n,
                 key.trans_b ? key.n : key.k, key.batch, key.stride_b));
  // Our A, stored [m,k] (or [k,m]), is the column-major k x m (m x k).
  COALESCE_RETURN_IF_ERROR(
      MakeLayout(&plan->b, type, key.trans_a ? key.m : key.k,
                 key.trans_a ? key.k : key.m, key.batch, key.stride_a));
  COALESCE_RETURN_IF_ERROR(
      MakeLayout(&plan->d, type, key.n, key.m, key.batch, key.m * key.n));

  cublasLtMatmulPreference_t pref = nullptr;
  COALESCE_LT_RETURN_IF_ERROR(Lt().MatmulPreferenceCreate(&pref));
  const uint64_t max_workspace = kWorkspaceBytes;
  cublasStatus_t s = Lt().MatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace,
      sizeof(max_workspace));
  for (cublasLtMatmulPreferenceAttributes_t attr :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    if (s == CUBLAS_STATUS_SUCCESS) {
      s = Lt().MatmulPreferenceSetAttribute(pref, attr, &key.alignment,
                                            sizeof(key.alignment));
    }
  }
  const bool may_avoid = LtMayAvoidSplitK(key.dtype, key.tf32);
  cublasLtMatmulHeuristicResult_t results[kLtHeuristicResults] = {};
  int found = 0;
  if (s == CUBLAS_STATUS_SUCCESS) {
    s = Lt().MatmulAlgoGetHeuristic(
        handle, plan->op, plan->a, plan->b, plan->d, plan->d, pref,
        may_avoid ? kLtHeuristicResults : 1, results, &found);
  }
  Lt().MatmulPreferenceDestroy(pref);
  COALESCE_LT_RETURN_IF_ERROR(s);
  if (found == 0) {
    return absl::UnimplementedError(
        absl::StrCat(kName, ": cuBLASLt's heuristic found no algorithm"));
  }
  std::vector<LtOffer> offers(found);
  for (int i = 0; may_avoid && i < found; ++i) {
    offers[i] = {SplitKOf(results[i].algo), results[i].workspaceSize,
                 results[i].wavesCount};
  }
  const cublasLtMatmulHeuristicResult_t* pick = &results[PickLtAlgorithm(
      offers, LtAvoidsSplitK(key.dtype, key.tf32, key.k, offers[0]))];
  plan->algo = pick->algo;
  plan->workspace = pick->workspaceSize;
  return absl::OkStatus();
}

class GemmCublasLtVariant final
    : public TypedVariant<GemmProblem, OpKind::kGemm, BackendKind::kCuda> {
 public:
  ~GemmCublasLtVariant() override {
    absl::MutexLock lock(&mu_);
    plans_.Clear();
    for (auto& [where, ptr] : workspaces_) {
      cudaSetDevice(where.first);
      cudaFree(ptr);
    }
    for (auto& [device, handle] : handles_) Lt().Destroy(handle);
    cudaGetLastError();  // teardown must not leave an error behind
  }

  absl::string_view name() const override { return kName; }
  absl::string_view description() const override {
    return "cuBLASLt (heuristic's first algorithm; in float32 with K <= 128, "
           "or K <= 512 where that algorithm fills 0.2 waves or splits K into "
           "parts of under 2 steps, or where it splits K 256 ways or more, "
           "its first that does not split K, else its fewest splits), plans "
           "cached per shape, workspace per device and stream; the vendor "
           "baseline";
  }
  // 1: float32 plans with K <= 128 avoid split-K algorithms (LtAvoidsSplitK).
  // 2: and with K <= 512 where the first algorithm fills 0.2 waves or
  //    splits K into parts of under 2 steps.
  // 3: and at any K where the first algorithm splits K 256 ways or more;
  //    where every algorithm splits, the fewest splits, not the least
  //    workspace.
  int revision() const override { return 3; }
  std::optional<PlanCacheStats> plan_cache() const override {
    absl::MutexLock lock(&mu_);
    return PlanCacheStats{static_cast<int64_t>(plans_.size()),
                          static_cast<int64_t>(plans_.capacity()),
                          plans_.evictions()};
  }

 protected:
  // Any dtype (float32 computes in full float32 unless allow_tf32); m, n,
  // k and the batch within cuBLASLt's 32-bit sizes (CheckGemmCommon); C,
  // when read (has_c and beta != 0), in D's layout: dense batches
  // (stride_c == m*n) or a single matrix. Whether cuBLASLt has an
  // algorithm is known only at Run (UNIMPLEMENTED there if not).
  absl::Status CanImplementTyped(const GemmProblem& p,
                                 const DeviceInfo&) const override {
    COALESCE_RETURN_IF_ERROR(CublasLtAvailable());
    COALESCE_RETURN_IF_ERROR(CheckGemmCommon(kName, p, 0, 0));
    if (p.batch > INT32_MAX) {
      return absl::UnimplementedError(
          absl::StrCat(kName, ": the batch must fit cuBLASLt's int32 count"));
    }
    if (p.has_c && p.beta != 0.0f && p.batch > 1 && p.stride_c != p.m * p.n) {
      return absl::UnimplementedError(absl::StrCat(
          kName, ": C's batch stride must be D's (m*n = ", p.m * p.n, "), not ",
          p.stride_c, " (a broadcast C is left to the kernels)"));
    }
    return absl::OkStatus();
  }

  double Efficiency(const Problem& p, const DeviceInfo&) const override {
    const GemmProblem& g = std::get<GemmProblem>(p);
    if (g.dtype == DType::kFloat32 && !g.allow_tf32) return kEfficiency;
    return TensorEfficiency(g, kEfficiency) *
           (SlowUnalignedRows(g) ? kUnalignedRowsFactor : 1.0);
  }
  double EstimateSeconds(const Problem& p,
                         const DeviceInfo& dev) const override {
    const GemmProblem& g = std::get<GemmProblem>(p);
    if (g.dtype == DType::kFloat32 && !g.allow_tf32) {
      return Float32Seconds(g, dev);
    }
    // Tensor cores: the roofline and a call.
    return KernelVariant::EstimateSeconds(p, dev) + kCallSeconds +
           (Bf16OddRows(g) ? kBf16OddRowsSeconds : 0.0);
  }

  absl::Status RunTyped(const GemmProblem& p, const Operands& ops,
                        ExecContext& ctx) const override {
    const bool read_c = p.has_c && p.beta != 0.0f;
    const void* a = ops.inputs[kGemmA];
    const void* b = ops.inputs[kGemmB];
    void* d = ops.outputs[kGemmD];
    const void* c = read_c ? ops.inputs[kGemmC] : d;
    PlanKey key;
    COALESCE_CUDA_RETURN_IF_ERROR(cudaGetDevice(&key.device));
    key.dtype = p.dtype;
    key.m = p.m;
    key.n = p.n;
    key.k = p.k;
    key.batch = p.batch;
    key.stride_a = p.batch > 1 ? p.stride_a : 0;
    key.stride_b = p.batch > 1 ? p.stride_b : 0;
    key.trans_a = p.trans_a;
    key.trans_b = p.trans_b;
    key.tf32 = p.dtype == DType::kFloat32 && p.allow_tf32;
    key.alignment = std::min(
        {AlignmentOf(a), AlignmentOf(b), AlignmentOf(c), AlignmentOf(d)});
    cudaStream_t stream = StreamOf(ctx);
    cublasLtHandle_t handle;
    std::shared_ptr<const Plan> plan;
    void* workspace;
    {
      absl::MutexLock lock(&mu_);
      COALESCE_ASSIGN_OR_RETURN(handle, HandleLocked(key.device));
      COALESCE_ASSIGN_OR_RETURN(plan, PlanLocked(handle, key, ctx));
      COALESCE_ASSIGN_OR_RETURN(workspace, WorkspaceLocked(key.device, stream));
    }
    const float alpha = p.alpha;
    const float beta = read_c ? p.beta : 0.0f;
    // cuBLASLt's A is our B and its B our A (see the file comment).
    COALESCE_LT_RETURN_IF_ERROR(Lt().Matmul(
        handle, plan->op, &alpha, b, plan->a, a, plan->b, &beta, c, plan->d, d,
        plan->d, &plan->algo, workspace, plan->workspace, stream));
    // A library call, not a kernel of ours: LaunchInfo stays empty but for
    // cold (set by PlanLocked).
    COALESCE_CUDA_RETURN_IF_LAUNCH_ERROR();
    return absl::OkStatus();
  }

 private:
  absl::StatusOr<cublasLtHandle_t> HandleLocked(int device) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = handles_.find(device);
    if (it != handles_.end()) return it->second;
    cublasLtHandle_t h = nullptr;
    COALESCE_LT_RETURN_IF_ERROR(Lt().Create(&h));
    handles_[device] = h;
    return h;
  }

  // A plan built here (a shape's first call) makes the call cold.
  absl::StatusOr<std::shared_ptr<const Plan>> PlanLocked(
      cublasLtHandle_t handle, const PlanKey& key, ExecContext& ctx) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (std::shared_ptr<const Plan> found = plans_.Find(key)) return found;
    ctx.launch.cold = true;
    auto plan = std::make_shared<Plan>();
    COALESCE_RETURN_IF_ERROR(BuildPlan(handle, key, plan.get()));
    plans_.Put(key, plan);
    return plan;
  }

  absl::StatusOr<void*> WorkspaceLocked(int device, cudaStream_t stream) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const auto where = std::make_pair(device, stream);
    auto it = workspaces_.find(where);
    if (it != workspaces_.end()) return it->second;
    void* ptr = nullptr;
    COALESCE_CUDA_RETURN_IF_ERROR(cudaMalloc(&ptr, kWorkspaceBytes));
    workspaces_[where] = ptr;
    return ptr;
  }

  mutable absl::Mutex mu_;
  mutable std::map<int, cublasLtHandle_t> handles_ ABSL_GUARDED_BY(mu_);
  // Keyed by exact sizes, which clients choose: bounded, so that a stream of
  // distinct shapes costs heuristic calls but not memory without end. A
  // plan dropped while a call uses it lives until that call returns.
  mutable LruCache<PlanKey, const Plan> plans_ ABSL_GUARDED_BY(mu_){kMaxPlans};
  mutable std::map<std::pair<int, cudaStream_t>, void*> workspaces_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<KernelVariant> MakeGemmCublasLtVariant() {
  return std::make_unique<GemmCublasLtVariant>();
}

}  // namespace coalesce::cuda
