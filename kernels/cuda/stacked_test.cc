// Backend::ExecuteStacked on the CUDA backend: for every variant that runs
// the stacked problem, one launch over parts of different leading extents,
// each part's operands in host or resident memory, must give each part what
// the same variant's Execute gives it alone (bit-exact for data movement).
// Also BatchCopy, which gathers and scatters the resident slices. Skips,
// with the reason, where no CUDA device is visible.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/core/stacking.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_test_fixture.h"
#include "kernels/cuda/runtime/batch_copy.h"
#include "kernels/cuda/runtime/lane_pool.h"
#include "kernels/testing/conformance.h"

namespace coalesce {
namespace {

class CudaStacked : public CudaBackendTest {};

using Bytes = std::vector<unsigned char>;

// Where the parts' operands live: all host, all resident (every slice
// gathered and scattered on the device), or each operand of each part
// drawn at random (host slices with resident ones between them).
enum class Spaces { kHost, kResident, kMixed };

std::string SpacesName(Spaces s) {
  switch (s) {
    case Spaces::kHost:
      return "host";
    case Spaces::kResident:
      return "resident";
    case Spaces::kMixed:
      break;
  }
  return "mixed";
}

// Per-element bound on |stacked - alone| for the arithmetic ops; empty
// for bit-exact outputs. The same variant on the same rows may still
// differ in order of summation where its launch shape follows the leading
// extent, so the bounds are the conformance test's, doubled (each side may
// be off the exact result by one).
std::vector<double> Tolerance(const Problem& p, const Bytes& want,
                              size_t output) {
  const DType t = DTypeOf(p);
  const int64_t n = static_cast<int64_t>(want.size() / ElementSize(t));
  const double u_out = UnitRoundoff(t);
  const double u32 = UnitRoundoff(DType::kFloat32);
  std::vector<double> tol;
  if (const auto* g = std::get_if<GemmProblem>(&p)) {
    // Inputs lie in [-2, 2]: sum |a||b| <= 4k, |c| <= 2.
    const double u_acc = g->allow_tf32 ? 0x1p-11 : u32;
    const double magnitude = std::fabs(g->alpha) * 4.0 * g->k +
                             (g->has_c ? std::fabs(g->beta) * 2.0 : 0.0);
    const double abs =
        2 * 4 * std::sqrt(static_cast<double>(g->k)) * u_acc * magnitude;
    for (int64_t i = 0; i < n; ++i) {
      tol.push_back(abs +
                    2 * u_out * std::fabs(LoadAsFloat(want.data(), t, i)));
    }
  } else if (const auto* ln = std::get_if<GeluLnProblem>(&p)) {
    const double rtol =
        t == DType::kBFloat16 ? 1.6e-2 : (t == DType::kFloat16 ? 1e-3 : 1e-5);
    // y's conditioning: |h| / sigma stays small for inputs in [-2, 2];
    // gamma <= 2.
    const double cond =
        output == kLnY ? (2 * std::sqrt(static_cast<double>(ln->hidden)) + 8) *
                             u32 * 16 * 2
                       : 0.0;
    for (int64_t i = 0; i < n; ++i) {
      tol.push_back(2 * (1e-5 + std::max(rtol, 2 * u_out) *
                                    std::fabs(LoadAsFloat(want.data(), t, i))) +
                    cond);
    }
  }
  return tol;
}

// The first element of got off want by more than tol (bit-exact when tol
// is empty), or an empty string.
std::string Mismatch(const Problem& p, const Bytes& got, const Bytes& want,
                     const std::vector<double>& tol) {
  if (got.size() != want.size()) return "sizes differ";
  if (tol.empty()) {
    const auto diff = std::mismatch(got.begin(), got.end(), want.begin());
    if (diff.first == got.end()) return "";
    return absl::StrCat("byte ", diff.first - got.begin(), " differs");
  }
  const DType t = DTypeOf(p);
  for (size_t i = 0; i < tol.size(); ++i) {
    const double g = LoadAsFloat(got.data(), t, i);
    const double w = LoadAsFloat(want.data(), t, i);
    if (!(std::fabs(g - w) <= tol[i])) {  // false for NaN: an unwritten one
      return absl::StrCat("element ", i, ": ", g, " vs ", w, " (tolerance ",
                          tol[i], ")");
    }
  }
  return "";
}

Bytes RandomBytes(const Problem& p, int64_t bytes, uint64_t seed) {
  Bytes b(bytes);
  const DType t = DTypeOf(p);
  FillRandom(b.data(), t, bytes / static_cast<int64_t>(ElementSize(t)), seed,
             -2.0f, 2.0f);
  return b;
}

Bytes Poisoned(int64_t bytes) {
  Bytes b(bytes);
  Poison(b.data(), b.size());
  return b;
}

// Runs v on the stacked parts once per Spaces and compares every wanted
// output with v's Execute on that part alone. unwanted: (part, output)
// pairs the caller passes no pointer for. Returns the runs made.
int CheckStacked(Backend& backend, const KernelVariant& v,
                 const std::vector<Problem>& parts,
                 const std::set<std::pair<size_t, size_t>>& unwanted,
                 uint64_t seed) {
  const Problem merged = Stacked(parts);
  const std::optional<StackInfo> info = StackInfoOf(merged);
  if (!info.has_value()) {
    ADD_FAILURE() << Describe(merged) << " does not stack";
    return 0;
  }
  const DeviceInfo& dev = backend.device();
  if (!v.CanImplement(merged, dev).ok()) return 0;
  for (const Problem& p : parts) {
    if (!v.CanImplement(p, dev).ok()) return 0;
  }
  std::vector<OperandSizes> sizes;
  for (const Problem& p : parts) sizes.push_back(OperandBytes(p));
  const size_t n_in = sizes[0].inputs.size();
  const size_t n_out = sizes[0].outputs.size();

  // Inputs: each part's stacked ones, and one set of shared ones (part 0's).
  std::vector<std::vector<Bytes>> in(parts.size(), std::vector<Bytes>(n_in));
  for (size_t j = 0; j < parts.size(); ++j) {
    for (size_t i = 0; i < n_in; ++i) {
      if (j == 0 || info->input_stacked[i]) {
        in[j][i] =
            RandomBytes(parts[j], sizes[j].inputs[i], seed * 1000 + j * 10 + i);
      }
    }
  }
  const auto host_input = [&](size_t j, size_t i) -> const void* {
    const Bytes& b = info->input_stacked[i] ? in[j][i] : in[0][i];
    return b.empty() ? nullptr : b.data();
  };

  // Each part alone, host operands.
  std::vector<std::vector<Bytes>> want(parts.size());
  for (size_t j = 0; j < parts.size(); ++j) {
    Operands ops;
    for (size_t i = 0; i < n_in; ++i) ops.inputs.push_back(host_input(j, i));
    for (size_t o = 0; o < n_out; ++o) {
      want[j].push_back(Poisoned(sizes[j].outputs[o]));
      ops.outputs.push_back(want[j][o].empty() ? nullptr : want[j][o].data());
    }
    const absl::Status s = backend.Execute(v, parts[j], ops, nullptr);
    if (!s.ok()) {
      ADD_FAILURE() << "Execute of part " << j << ": " << s;
      return 0;
    }
  }

  int runs = 0;
  std::mt19937_64 rng(seed);
  for (Spaces spaces :
       {Spaces::kHost, Spaces::kResident, Spaces::kMixed, Spaces::kMixed}) {
    SCOPED_TRACE(SpacesName(spaces));
    const auto resident = [&] {
      return spaces == Spaces::kResident ||
             (spaces == Spaces::kMixed && (rng() & 1));
    };
    std::vector<std::shared_ptr<void>> keep;
    // Host outputs, or the resident allocation's bytes after the run.
    std::vector<std::vector<Bytes>> got(parts.size(),
                                        std::vector<Bytes>(n_out));
    std::vector<std::vector<void*>> resident_out(
        parts.size(), std::vector<void*>(n_out, nullptr));
    std::vector<Operands> ops(parts.size());
    for (size_t j = 0; j < parts.size(); ++j) {
      for (size_t i = 0; i < n_in; ++i) {
        const int64_t n = sizes[j].inputs[i];
        // Shared inputs come from part 0 only: the others pass none.
        if (n == 0 || (j > 0 && !info->input_stacked[i])) {
          ops[j].inputs.push_back(nullptr);
          ops[j].input_spaces.push_back(MemorySpace::kHost);
          continue;
        }
        if (resident()) {
          absl::StatusOr<std::shared_ptr<void>> r = backend.AllocateResident(n);
          EXPECT_TRUE(r.ok()) << r.status();
          if (!r.ok()) return runs;
          EXPECT_TRUE(
              backend.CopyToResident(r->get(), n, 0, host_input(j, i), n).ok());
          ops[j].inputs.push_back(r->get());
          ops[j].input_spaces.push_back(MemorySpace::kResident);
          keep.push_back(*std::move(r));
        } else {
          ops[j].inputs.push_back(host_input(j, i));
          ops[j].input_spaces.push_back(MemorySpace::kHost);
        }
      }
      for (size_t o = 0; o < n_out; ++o) {
        const int64_t n = sizes[j].outputs[o];
        if (n == 0 || unwanted.count({j, o}) > 0) {
          ops[j].outputs.push_back(nullptr);
          ops[j].output_spaces.push_back(MemorySpace::kHost);
          continue;
        }
        got[j][o] = Poisoned(n);
        if (resident()) {
          absl::StatusOr<std::shared_ptr<void>> r = backend.AllocateResident(n);
          EXPECT_TRUE(r.ok()) << r.status();
          if (!r.ok()) return runs;
          EXPECT_TRUE(
              backend.CopyToResident(r->get(), n, 0, got[j][o].data(), n).ok());
          resident_out[j][o] = r->get();
          ops[j].outputs.push_back(r->get());
          ops[j].output_spaces.push_back(MemorySpace::kResident);
          keep.push_back(*std::move(r));
        } else {
          ops[j].outputs.push_back(got[j][o].data());
          ops[j].output_spaces.push_back(MemorySpace::kHost);
        }
      }
    }
    RunResult rr;
    const absl::Status s = backend.ExecuteStacked(v, merged, parts, ops, &rr);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) continue;
    ++runs;
    EXPECT_GE(rr.kernel_seconds, 0);
    EXPECT_GE(rr.h2d_seconds, 0);
    EXPECT_GE(rr.d2h_seconds, 0);
    for (size_t j = 0; j < parts.size(); ++j) {
      for (size_t o = 0; o < n_out; ++o) {
        if (ops[j].outputs[o] == nullptr) continue;
        if (resident_out[j][o] != nullptr) {
          const int64_t n = sizes[j].outputs[o];
          EXPECT_TRUE(backend
                          .CopyFromResident(resident_out[j][o], n, 0,
                                            got[j][o].data(), n)
                          .ok());
        }
        const std::string bad = Mismatch(parts[j], got[j][o], want[j][o],
                                         Tolerance(parts[j], want[j][o], o));
        EXPECT_EQ(bad, "") << "part " << j << " output " << o << " ("
                           << (resident_out[j][o] != nullptr ? "resident"
                                                             : "host")
                           << ")";
      }
    }
  }
  return runs;
}

// Runs every variant of parts' op on them; at least one must run.
void CheckEveryVariant(Backend& backend, const std::vector<Problem>& parts,
                       const std::set<std::pair<size_t, size_t>>& unwanted,
                       uint64_t seed) {
  const Problem merged = Stacked(parts);
  int ran = 0;
  for (const KernelVariant* v : backend.registry().ForOp(OpOf(merged))) {
    SCOPED_TRACE(absl::StrCat(v->name(), " ", Describe(merged)));
    const int runs = CheckStacked(backend, *v, parts, unwanted, ++seed);
    if (runs > 0) {
      std::fprintf(stderr, "  %s on %s: %d runs\n",
                   std::string(v->name()).c_str(), Describe(merged).c_str(),
                   runs);
    }
    ran += runs;
  }
  EXPECT_GT(ran, 0) << "no variant runs " << Describe(merged);
}

std::vector<Problem> WithLeadings(const Problem& p,
                                  std::initializer_list<int64_t> leadings) {
  std::vector<Problem> parts;
  for (int64_t l : leadings) parts.push_back(WithLeading(p, l));
  return parts;
}

constexpr std::initializer_list<int64_t> kLeadings = {1, 3, 2, 5};

TEST_F(CudaStacked, Transpose2D) {
  for (DType t : {DType::kFloat32, DType::kBFloat16}) {
    // 33x47: parts of sizes no multiple of 16 bytes (unaligned slices).
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{33, 47}, {64, 128}}) {
      const TransposeProblem p{t, 1, rows, cols};
      CheckEveryVariant(*backend_, WithLeadings(p, {1, 1, 1, 1}), {}, 11);
    }
  }
}

TEST_F(CudaStacked, TransposeBatched) {
  for (DType t : {DType::kFloat32, DType::kBFloat16}) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{33, 47}, {96, 64}}) {
      const TransposeProblem p{t, 1, rows, cols};
      CheckEveryVariant(*backend_, WithLeadings(p, kLeadings), {}, 23);
    }
  }
}

TEST_F(CudaStacked, GemmSharingB) {
  for (DType t : {DType::kFloat32, DType::kBFloat16}) {
    // Rows of A stack (m per part: 1, 3, 2, 5 times 8, and plain), B shared.
    CheckEveryVariant(
        *backend_,
        WithLeadings(WithC(Gemm(t, 1, 1, 72, 64, false, false), 1.5f, -0.5f),
                     {8, 24, 16, 40}),
        {}, 37);
    CheckEveryVariant(
        *backend_, WithLeadings(Gemm(t, 1, 1, 40, 24, false, true), kLeadings),
        {}, 41);
  }
}

TEST_F(CudaStacked, ConvertLayoutNchwToNhwc) {
  for (DType t : {DType::kFloat32, DType::kBFloat16}) {
    for (const Shape& chw : {Shape{3, 17, 19}, Shape{64, 8, 8}}) {
      PermuteProblem p;
      p.dtype = t;
      p.in_shape = {1, chw[0], chw[1], chw[2]};
      p.perm = {0, 2, 3, 1};
      p.kind = LayoutKind::kNchwToNhwc;
      CheckEveryVariant(*backend_, WithLeadings(p, kLeadings), {}, 53);
    }
  }
}

TEST_F(CudaStacked, GeluLayerNorm) {
  for (DType t : {DType::kFloat32, DType::kBFloat16}) {
    for (int64_t hidden : {768, 1000}) {
      GeluLnProblem p;
      p.dtype = t;
      p.hidden = hidden;
      p.has_bias = p.has_residual = p.has_gamma = p.has_beta = true;
      p.return_pre_norm = true;
      // Part 2 does not want h: its slice is skipped.
      CheckEveryVariant(*backend_, WithLeadings(p, kLeadings), {{2, kLnH}}, 67);
    }
  }
}

// 3 x 4 MiB each way: more than one staging buffer holds, so the host
// slices are staged one by one (a mixed run may fit, through the bounce
// buffer, when one part is resident).
TEST_F(CudaStacked, HostBytesBeyondOneStagingBuffer) {
  const TransposeProblem p{DType::kFloat32, 1, 1024, 1024};
  ASSERT_GT(3 * 1024 * 1024 * 4,
            static_cast<int64_t>(cuda::kStagingChunkBytes));
  CheckEveryVariant(*backend_, WithLeadings(p, {1, 1, 1}), {}, 79);
}

TEST_F(CudaStacked, RejectsWhatDoesNotStack) {
  const KernelVariant* v =
      backend_->registry().ForOp(OpKind::kTranspose).front();
  const TransposeProblem p{DType::kFloat32, 1, 8, 8};
  const std::vector<Problem> parts = {p, p};
  RunResult rr;
  // One operand set for two parts.
  Operands one;
  one.inputs = {nullptr};
  one.outputs = {nullptr};
  EXPECT_EQ(
      backend_->ExecuteStacked(*v, Stacked(parts), parts, {one}, &rr).code(),
      absl::StatusCode::kInvalidArgument);
  // No parts.
  EXPECT_EQ(backend_->ExecuteStacked(*v, Stacked(parts), {}, {}, &rr).code(),
            absl::StatusCode::kInvalidArgument);
  // A merged problem that does not stack (a batched GEMM).
  const Problem batched = Gemm(DType::kFloat32, 2, 8, 8, 8, false, false);
  EXPECT_EQ(
      backend_->ExecuteStacked(*v, batched, parts, {one, one}, &rr).code(),
      absl::StatusCode::kInvalidArgument);
  // Parts that do not add up to merged.
  EXPECT_EQ(
      backend_->ExecuteStacked(*v, WithLeading(p, 3), parts, {one, one}, &rr)
          .code(),
      absl::StatusCode::kInvalidArgument);
}

// BatchCopy alone: more segments than one launch takes, of every
// alignment, empty ones and large ones, into disjoint destinations; every
// byte in place and nothing else written.
TEST_F(CudaStacked, BatchCopyCopiesEverySegment) {
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
            cudaSuccess);
  std::mt19937_64 rng(5);
  const int64_t pool = int64_t{16} << 20;
  Bytes src(pool);
  for (auto& b : src) b = static_cast<unsigned char>(rng());
  void* d_src = nullptr;
  void* d_dst = nullptr;
  ASSERT_EQ(cudaMalloc(&d_src, pool), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_dst, pool), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_src, src.data(), pool, cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_EQ(cudaMemset(d_dst, 0xff, pool), cudaSuccess);
  Bytes want(pool, 0xff);
  std::vector<cuda::CopySegment> segments;
  int64_t at = 0;
  for (int s = 0; s < 3 * cuda::kBatchCopySegmentsPerLaunch + 7; ++s) {
    int64_t bytes = static_cast<int64_t>(rng() % 20000);
    if (s % 50 == 0)
      bytes = (int64_t{1} << 20) + static_cast<int64_t>(rng() % 64);
    if (s % 17 == 0) bytes = 0;
    // Every alignment mod 16 on both sides, aligned ones half the time.
    const int64_t gap =
        (rng() & 1) ? (16 - at % 16) % 16 : static_cast<int64_t>(rng() % 16);
    at += gap;
    int64_t from = static_cast<int64_t>(rng() % (pool - bytes));
    if (rng() & 1) from -= from % 16;
    if (at + bytes > pool) break;
    segments.push_back({static_cast<const char*>(d_src) + from,
                        static_cast<char*>(d_dst) + at, bytes});
    std::memcpy(want.data() + at, src.data() + from, bytes);
    at += bytes;
  }
  ASSERT_GT(segments.size(), size_t{2 * cuda::kBatchCopySegmentsPerLaunch});
  ASSERT_TRUE(cuda::BatchCopy(segments, stream).ok());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  Bytes got(pool);
  ASSERT_EQ(cudaMemcpy(got.data(), d_dst, pool, cudaMemcpyDeviceToHost),
            cudaSuccess);
  const auto diff = std::mismatch(got.begin(), got.end(), want.begin());
  EXPECT_TRUE(diff.first == got.end())
      << "byte " << (diff.first - got.begin()) << " differs";
  EXPECT_TRUE(cuda::BatchCopy({}, stream).ok());
  const cuda::CopySegment negative = {d_src, d_dst, -1};
  EXPECT_EQ(cuda::BatchCopy({negative}, stream).code(),
            absl::StatusCode::kInvalidArgument);
  const cuda::CopySegment null_src = {nullptr, d_dst, 16};
  EXPECT_EQ(cuda::BatchCopy({null_src}, stream).code(),
            absl::StatusCode::kInvalidArgument);
  cudaFree(d_src);
  cudaFree(d_dst);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace coalesce
