// coalesce-cublaslt-algos: which algorithms cuBLASLt's heuristic returns for
// a GEMM, and how fast each runs: what the gemm.cuda.cublaslt variant's
// plan takes (PickLtAlgorithm, kernels/cuda/gemm/cublaslt_pick.h) against
// the others it offered.
//
//   coalesce-cublaslt-algos --shape=M,N,K[,BATCH][,ta][,tb][:...]
//   coalesce-cublaslt-algos --shapes_file=FILE   (one such shape a line)
//
// Row-major operands as the variant passes them (cuBLASLt's A is our B),
// random inputs, beta 0, the variant's 32 MiB workspace, alignment 256.
// Each algorithm is captured once into a CUDA graph and the graph replayed:
// the median of --reps replays between two events, so that the host's time
// in cublasLtMatmul stays out of it. Per algorithm: its rank in the
// heuristic's list, algorithm id, tile id, split-K count, reduction scheme,
// stages id, workspace bytes, waves and the median; per shape, the first's
// and the variant's pick's time against the fastest offered. A progress line
// per shape goes to stderr.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/dtype.h"
#include "base/status_macros.h"
#include "kernels/cuda/gemm/cublaslt_api.h"
#include "kernels/cuda/gemm/cublaslt_pick.h"
#include "kernels/cuda/runtime/cuda_check.h"

ABSL_FLAG(std::string, shape, "",
          "GEMMs as M,N,K[,BATCH][,ta][,tb] (ta, tb: that operand "
          "transposed); shapes separated by ':'");
ABSL_FLAG(std::string, shapes_file, "",
          "a file of shapes, one M,N,K[,BATCH][,ta][,tb] a line ('#' starts "
          "a comment)");
ABSL_FLAG(std::string, dtype, "float32", "float32, float16 or bfloat16");
ABSL_FLAG(int, algos, 8, "how many of the heuristic's algorithms to time");
ABSL_FLAG(int, reps, 20, "graph replays timed per algorithm (median)");

namespace coalesce {
namespace {

using cuda::Lt;

struct Shape {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  bool ta = false, tb = false;
  std::string text;
};

absl::StatusOr<Shape> ParseShape(absl::string_view text) {
  Shape s;
  s.text = std::string(text);
  std::vector<int64_t> dims;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    part = absl::StripAsciiWhitespace(part);
    int64_t v = 0;
    if (part == "ta") {
      s.ta = true;
    } else if (part == "tb") {
      s.tb = true;
    } else if (absl::SimpleAtoi(part, &v) && v > 0 && v <= (1 << 20)) {
      dims.push_back(v);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("shape '", text, "': '", part,
                       "' is no dimension in 1..1048576, ta or tb"));
    }
  }
  if (dims.size() < 3 || dims.size() > 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("shape '", text, "': wants M,N,K[,BATCH][,ta][,tb]"));
  }
  s.m = dims[0];
  s.n = dims[1];
  s.k = dims[2];
  if (dims.size() == 4) s.batch = dims[3];
  return s;
}

absl::Status LtOk(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", Lt().GetStatusName(s)));
}

int32_t ConfigOf(const cublasLtMatmulAlgo_t& algo,
                 cublasLtMatmulAlgoConfigAttributes_t attr) {
  int32_t v = 0;
  size_t written = 0;
  Lt().MatmulAlgoConfigGetAttribute(&algo, attr, &v, sizeof(v), &written);
  return v;
}

// Owns one shape's descriptors.
struct Desc {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  ~Desc() {
    if (a) Lt().MatrixLayoutDestroy(a);
    if (b) Lt().MatrixLayoutDestroy(b);
    if (d) Lt().MatrixLayoutDestroy(d);
    if (op) Lt().MatmulDescDestroy(op);
  }
};

absl::Status Layout(cublasLtMatrixLayout_t* l, cudaDataType_t type,
                    int64_t rows, int64_t cols, int64_t batch, int64_t stride) {
  COALESCE_RETURN_IF_ERROR(
      LtOk(Lt().MatrixLayoutCreate(l, type, static_cast<uint64_t>(rows),
                                   static_cast<uint64_t>(cols), rows),
           "cublasLtMatrixLayoutCreate"));
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    COALESCE_RETURN_IF_ERROR(
        LtOk(Lt().MatrixLayoutSetAttribute(
                 *l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)),
             "batch count"));
    COALESCE_RETURN_IF_ERROR(
        LtOk(Lt().MatrixLayoutSetAttribute(
                 *l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                 sizeof(stride)),
             "batch stride"));
  }
  return absl::OkStatus();
}

// One handle, stream, pair of events and set of buffers for every shape;
// the process's exit frees them.
class Prober {
 public:
  static absl::StatusOr<Prober> Create(DType dtype, int64_t max_elements) {
    Prober p;
    p.dtype_ = dtype;
    p.type_ = dtype == DType::kFloat16    ? CUDA_R_16F
              : dtype == DType::kBFloat16 ? CUDA_R_16BF
                                          : CUDA_R_32F;
    COALESCE_RETURN_IF_ERROR(LtOk(Lt().Create(&p.handle_), "cublasLtCreate"));
    COALESCE_CUDA_RETURN_IF_ERROR(cudaStreamCreate(&p.stream_));
    COALESCE_CUDA_RETURN_IF_ERROR(cudaEventCreate(&p.start_));
    COALESCE_CUDA_RETURN_IF_ERROR(cudaEventCreate(&p.stop_));
    const size_t bytes = static_cast<size_t>(max_elements) * ElementSize(dtype);
    for (void** q : {&p.x_, &p.y_, &p.out_}) {
      COALESCE_CUDA_RETURN_IF_ERROR(cudaMalloc(q, bytes));
    }
    COALESCE_CUDA_RETURN_IF_ERROR(cudaMalloc(&p.workspace_, kWorkspace));
    // Random inputs in [-1, 1), converted to the dtype.
    std::vector<char> host(bytes);
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    for (int64_t i = 0; i < max_elements; ++i) {
      StoreFromFloat(host.data(), dtype, i, dist(rng));
    }
    for (void* q : {p.x_, p.y_}) {
      COALESCE_CUDA_RETURN_IF_ERROR(
          cudaMemcpy(q, host.data(), bytes, cudaMemcpyHostToDevice));
    }
    COALESCE_CUDA_RETURN_IF_ERROR(cudaMemset(p.out_, 0xff, bytes));
    return p;
  }

  // One line per algorithm, one summary line; returns the summary.
  absl::StatusOr<std::string> Probe(const Shape& s, int algos, int reps) {
    Desc desc;
    COALESCE_RETURN_IF_ERROR(
        LtOk(Lt().MatmulDescCreate(&desc.op, CUBLAS_COMPUTE_32F, CUDA_R_32F),
             "cublasLtMatmulDescCreate"));
    const cublasOperation_t op_a = s.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_b = s.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    COALESCE_RETURN_IF_ERROR(
        LtOk(Lt().MatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_TRANSA,
                                         &op_a, sizeof(op_a)),
             "transa"));
    COALESCE_RETURN_IF_ERROR(
        LtOk(Lt().MatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_TRANSB,
                                         &op_b, sizeof(op_b)),
             "transb"));
    const int64_t batch = s.batch;
    COALESCE_RETURN_IF_ERROR(Layout(&desc.a, type_, s.tb ? s.k : s.n,
                                    s.tb ? s.n : s.k, batch, s.k * s.n));
    COALESCE_RETURN_IF_ERROR(Layout(&desc.b, type_, s.ta ? s.m : s.k,
                                    s.ta ? s.k : s.m, batch, s.m * s.k));
    COALESCE_RETURN_IF_ERROR(
        Layout(&desc.d, type_, s.n, s.m, batch, s.m * s.n));
    cublasLtMatmulPreference_t pref = nullptr;
    COALESCE_RETURN_IF_ERROR(LtOk(Lt().MatmulPreferenceCreate(&pref),
                                  "cublasLtMatmulPreferenceCreate"));
    const uint64_t max_workspace = kWorkspace;
    Lt().MatmulPreferenceSetAttribute(pref,
                                      CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                      &max_workspace, sizeof(max_workspace));
    const uint32_t alignment = 256;
    for (cublasLtMatmulPreferenceAttributes_t attr :
         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
      Lt().MatmulPreferenceSetAttribute(pref, attr, &alignment,
                                        sizeof(alignment));
    }
    std::vector<cublasLtMatmulHeuristicResult_t> results(algos);
    int found = 0;
    const cublasStatus_t h = Lt().MatmulAlgoGetHeuristic(
        handle_, desc.op, desc.a, desc.b, desc.d, desc.d, pref, algos,
        results.data(), &found);
    Lt().MatmulPreferenceDestroy(pref);
    COALESCE_RETURN_IF_ERROR(LtOk(h, "cublasLtMatmulAlgoGetHeuristic"));
    if (found == 0) return std::string("no algorithm");
    std::vector<double> times(found);
    std::vector<cuda::LtOffer> offers(found);
    int best_rank = 0;
    for (int r = 0; r < found; ++r) {
      const cublasLtMatmulHeuristicResult_t& res = results[r];
      COALESCE_ASSIGN_OR_RETURN(const double us, Time(desc, res, reps));
      times[r] = us;
      offers[r] = {ConfigOf(res.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
                   res.workspaceSize, res.wavesCount};
      if (us < times[best_rank]) best_rank = r;
      absl::PrintF(
          "%-22s rank %d algo %3d tile %3d splitk %4d reduction %d stages "
          "%3d workspace %9d waves %6.2f  %9.2f us\n",
          s.text, r, ConfigOf(res.algo, CUBLASLT_ALGO_CONFIG_ID),
          ConfigOf(res.algo, CUBLASLT_ALGO_CONFIG_TILE_ID),
          ConfigOf(res.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
          ConfigOf(res.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
          ConfigOf(res.algo, CUBLASLT_ALGO_CONFIG_STAGES_ID), res.workspaceSize,
          res.wavesCount, us);
    }
    // The variant's pick among the algorithms offered here (its plan asks
    // for kLtHeuristicResults where it avoids split K).
    const int pick = cuda::PickLtAlgorithm(
        offers, cuda::LtAvoidsSplitK(dtype_, /*tf32=*/false, s.k, offers[0]));
    const double best = times[best_rank];
    return absl::StrFormat(
        "%-22s first %.2f us, fastest rank %d %.2f us (first %.2fx it), "
        "variant's pick rank %d %.2f us (%.2fx)",
        s.text, times[0], best_rank, best, times[0] / best, pick, times[pick],
        times[pick] / best);
  }

 private:
  static constexpr size_t kWorkspace = size_t{32} << 20;

  absl::StatusOr<double> Time(const Desc& desc,
                              const cublasLtMatmulHeuristicResult_t& res,
                              int reps) {
    const float alpha = 1.f, beta = 0.f;
    cudaGraph_t graph = nullptr;
    COALESCE_CUDA_RETURN_IF_ERROR(
        cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    const cublasStatus_t m = Lt().Matmul(
        handle_, desc.op, &alpha, y_, desc.a, x_, desc.b, &beta, out_, desc.d,
        out_, desc.d, &res.algo, workspace_, res.workspaceSize, stream_);
    COALESCE_CUDA_RETURN_IF_ERROR(cudaStreamEndCapture(stream_, &graph));
    COALESCE_RETURN_IF_ERROR(LtOk(m, "cublasLtMatmul"));
    cudaGraphExec_t exec = nullptr;
    const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    COALESCE_CUDA_RETURN_IF_ERROR(inst);
    std::vector<double> t;
    absl::Status s;
    for (int i = 0; i < reps + 2 && s.ok(); ++i) {
      float ms = 0;
      s = cuda::CudaStatus(cudaEventRecord(start_, stream_), "record", __FILE__,
                           __LINE__);
      if (s.ok()) {
        s = cuda::CudaStatus(cudaGraphLaunch(exec, stream_), "cudaGraphLaunch",
                             __FILE__, __LINE__);
      }
      if (s.ok()) {
        s = cuda::CudaStatus(cudaEventRecord(stop_, stream_), "record",
                             __FILE__, __LINE__);
      }
      if (s.ok()) {
        s = cuda::CudaStatus(cudaEventSynchronize(stop_), "sync", __FILE__,
                             __LINE__);
      }
      if (s.ok()) {
        s = cuda::CudaStatus(cudaEventElapsedTime(&ms, start_, stop_),
                             "elapsed", __FILE__, __LINE__);
      }
      if (i >= 2) t.push_back(ms * 1e3);  // two warm-up replays
    }
    cudaGraphExecDestroy(exec);
    COALESCE_RETURN_IF_ERROR(s);
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  }

  DType dtype_ = DType::kFloat32;
  cudaDataType_t type_ = CUDA_R_32F;
  cublasLtHandle_t handle_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  void *x_ = nullptr, *y_ = nullptr, *out_ = nullptr, *workspace_ = nullptr;
};

absl::Status Main() {
  std::vector<Shape> shapes;
  const std::string shape_flag = absl::GetFlag(FLAGS_shape);
  for (absl::string_view text :
       absl::StrSplit(shape_flag, ':', absl::SkipEmpty())) {
    COALESCE_ASSIGN_OR_RETURN(Shape s, ParseShape(text));
    shapes.push_back(std::move(s));
  }
  if (const std::string file = absl::GetFlag(FLAGS_shapes_file);
      !file.empty()) {
    std::ifstream in(file);
    if (!in) return absl::NotFoundError(absl::StrCat("--shapes_file: ", file));
    std::string line;
    while (std::getline(in, line)) {
      absl::string_view text = absl::StripAsciiWhitespace(
          absl::string_view(line).substr(0, line.find('#')));
      if (text.empty()) continue;
      COALESCE_ASSIGN_OR_RETURN(Shape s, ParseShape(text));
      shapes.push_back(std::move(s));
    }
  }
  if (shapes.empty()) {
    return absl::InvalidArgumentError(
        "no shape: give --shape or --shapes_file");
  }
  const std::string name = absl::GetFlag(FLAGS_dtype);
  DType dtype;
  if (!ParseDType(name, &dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--dtype: '", name, "' is none of float32, float16, bfloat16"));
  }
  const int algos = absl::GetFlag(FLAGS_algos);
  const int reps = absl::GetFlag(FLAGS_reps);
  if (algos < 1 || algos > 64 || reps < 1 || reps > 10000) {
    return absl::InvalidArgumentError(
        "--algos wants 1..64 and --reps 1..10000");
  }
  int64_t max_elements = 1;
  for (const Shape& s : shapes) {
    max_elements = std::max({max_elements, s.batch * s.m * s.k,
                             s.batch * s.k * s.n, s.batch * s.m * s.n});
  }
  if (max_elements >
      (int64_t{1} << 30) / static_cast<int64_t>(ElementSize(dtype))) {
    return absl::InvalidArgumentError(
        "a shape's operand exceeds 1 GiB: this tool times small GEMMs");
  }
  COALESCE_RETURN_IF_ERROR(cuda::CublasLtAvailable());
  COALESCE_ASSIGN_OR_RETURN(Prober prober, Prober::Create(dtype, max_elements));
  std::vector<std::string> summary;
  for (size_t i = 0; i < shapes.size(); ++i) {
    absl::FPrintF(stderr, "[%zu/%zu] %s\n", i + 1, shapes.size(),
                  shapes[i].text);
    COALESCE_ASSIGN_OR_RETURN(std::string line,
                              prober.Probe(shapes[i], algos, reps));
    summary.push_back(std::move(line));
  }
  absl::PrintF("\n");
  for (const std::string& line : summary) absl::PrintF("%s\n", line);
  return absl::OkStatus();
}

}  // namespace
}  // namespace coalesce

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "cuBLASLt's heuristic algorithms for GEMM shapes, each timed");
  absl::ParseCommandLine(argc, argv);
  const absl::Status s = coalesce::Main();
  if (!s.ok()) {
    std::fprintf(stderr, "coalesce-cublaslt-algos: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
