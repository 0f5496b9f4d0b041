// The GPU conformance suite, generated from the CUDA registry: every variant
// x every conformance problem it accepts x every dtype, against the float64
// CPU reference (bit-exact for data movement). Skips, with the reason, where
// no CUDA device is visible.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/core/permute.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_test_fixture.h"
#include "kernels/cuda/runtime/block_cache.h"
#include "kernels/cuda/runtime/device_util.h"
#include "kernels/cuda/transpose/internal.h"
#include "kernels/testing/conformance.h"

namespace coalesce {
namespace {

class CudaConformance : public CudaBackendTest {};

// n bytes of a linear congruential sequence continued from state.
std::string RandomBytes(int64_t n, uint32_t& state) {
  std::string out(n, '\0');
  for (char& c : out) {
    state = state * 1664525u + 1013904223u;
    c = static_cast<char>(state >> 24);
  }
  return out;
}

// GPU GEMM cases on top of the shared ones (which hold 1x1x1 and
// 7x13x5 with every transpose): 257x129x65, one past tile multiples, with
// every transpose; edges whose rows are whole 16-byte chunks so that the
// cp.async and TMA variants run them too (264x136x72 with every transpose,
// and 257x129x72 / 4097x4095x136 with B transposed: odd m and n, k-tails);
// skinny panels; batches with a broadcast A; TF32 for float32; and the
// large 4097x4095x129 for the 16-bit types only (its float64 reference is
// the slow part of this suite).
std::vector<Problem> GemmExtraProblems(DType t) {
  auto gemm = [t](int64_t batch, int64_t m, int64_t n, int64_t k, bool ta,
                  bool tb) { return Gemm(t, batch, m, n, k, ta, tb); };
  auto with_c = WithC;
  auto tf32 = [](GemmProblem g) {
    g.allow_tf32 = true;
    return g;
  };
  const bool f32 = t == DType::kFloat32;
  std::vector<Problem> out;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      GemmProblem odd = gemm(1, 257, 129, 65, ta, tb);
      odd.alpha = -0.75f;
      out.push_back(odd);
      out.push_back(with_c(gemm(1, 264, 136, 72, ta, tb), 1.5f, -0.5f));
      if (f32) out.push_back(tf32(with_c(gemm(1, 264, 136, 72, ta, tb), 1, 1)));
    }
  }
  out.push_back(with_c(gemm(1, 257, 129, 72, false, true), 0.5f, 2.0f));
  out.push_back(gemm(1, 16, 4096, 512, false, false));
  out.push_back(with_c(gemm(1, 4096, 16, 512, false, false), 1.0f, 1.0f));
  GemmProblem bcast_a =
      with_c(gemm(3, 100, 136, 72, false, false), 1.25f, 0.75f);
  bcast_a.stride_a = 0;
  out.push_back(bcast_a);
  out.push_back(gemm(3, 64, 72, 128, true, false));
  if (f32) {
    out.push_back(tf32(gemm(1, 257, 129, 65, false, false)));
    out.push_back(tf32(gemm(1, 16, 4096, 512, false, false)));
  } else {
    out.push_back(gemm(1, 4097, 4095, 129, false, false));
    out.push_back(with_c(gemm(1, 4097, 4095, 136, false, true), 1.0f, -1.0f));
  }
  return out;
}

// GPU shapes on top of the shared edge cases: 4097 (one past a tile
// multiple), C = 3 images, batched odd sizes; GELU-LN rows from 1 to 16384
// wide.
std::vector<Problem> ExtraProblems(OpKind op, DType t) {
  std::vector<Problem> out;
  if (op == OpKind::kTranspose) {
    for (auto [b, m, n] :
         std::vector<std::tuple<int64_t, int64_t, int64_t>>{{1, 4097, 33},
                                                            {1, 33, 4097},
                                                            {2, 1000, 1000},
                                                            {3, 128, 256},
                                                            {1, 256, 1024},
                                                            {5, 7, 4096},
                                                            {1, 4096, 3},
                                                            {7, 3, 1000}}) {
      TransposeProblem p;
      p.dtype = t;
      p.batch = b;
      p.rows = m;
      p.cols = n;
      out.push_back(p);
    }
  }
  if (op == OpKind::kConvertLayout) {
    auto add = [&](Shape s, Perm perm, LayoutKind k) {
      PermuteProblem p;
      p.dtype = t;
      p.in_shape = std::move(s);
      p.perm = std::move(perm);
      p.kind = k;
      out.push_back(p);
    };
    add({4, 3, 224, 224}, {0, 2, 3, 1}, LayoutKind::kNchwToNhwc);
    add({4, 224, 224, 3}, {0, 3, 1, 2}, LayoutKind::kNhwcToNchw);
    add({2, 64, 56, 56}, {0, 2, 3, 1}, LayoutKind::kNchwToNhwc);
    add({2, 56, 56, 64}, {0, 3, 1, 2}, LayoutKind::kNhwcToNchw);
    add({2, 512, 28, 28}, {0, 2, 3, 1}, LayoutKind::kNchwToNhwc);
    add({4097, 3}, {1, 0}, LayoutKind::kAosToSoa);
    add({3, 4097}, {1, 0}, LayoutKind::kSoaToAos);
    add({100003, 8}, {1, 0}, LayoutKind::kAosToSoa);
    add({16, 65536}, {1, 0}, LayoutKind::kSoaToAos);
    add({6, 10, 12, 14, 16}, {4, 1, 3, 0, 2}, LayoutKind::kPermute);
    add({3, 5, 7, 64, 2, 3}, {5, 4, 3, 2, 1, 0}, LayoutKind::kPermute);
    add({8, 33, 40}, {1, 0, 2}, LayoutKind::kPermute);
    // The run copy's paths: rows of 6 and 3 elements (8-, 4-byte or
    // single-element pieces), rows long enough for a block per chunk, and a
    // size-1 axis moved (a plain copy).
    add({5, 7, 6}, {1, 0, 2}, LayoutKind::kPermute);
    add({5, 7, 3}, {1, 0, 2}, LayoutKind::kPermute);
    add({3, 2, 8192}, {1, 0, 2}, LayoutKind::kPermute);
    add({1, 64, 100}, {1, 0, 2}, LayoutKind::kPermute);
  }
  if (op == OpKind::kGemm) {
    for (Problem& p : GemmExtraProblems(t)) out.push_back(std::move(p));
  }
  if (op == OpKind::kGeluLayerNorm) {
    // Widths at the kernels' edges: 1023/1024 (warp_per_row's
    // largest rows, scalar and vector), 2049, 6144, 16383/16384
    // (block_per_row's capacity buckets, scalar and 16-byte packs), 8191
    // and 7 (tails). Eight flag sets per width that turn each of the six
    // flags (bias, residual, gamma, beta, tanh, return_pre_norm) both on
    // and off; a few rows each (a row index = 3 mod 4 gets the large mean)
    // so the float64 reference stays fast.
    constexpr int kFlagSets[] = {0b000000, 0b111111, 0b010101, 0b101010,
                                 0b001111, 0b110000, 0b100110, 0b011001};
    constexpr int64_t kRows[] = {3, 5, 17, 33, 65, 4, 64, 7};
    constexpr int64_t kHiddens[] = {1,    7,    768,  1000,  1023,  1024, 2049,
                                    4096, 6144, 8191, 12288, 16383, 16384};
    for (size_t w = 0; w < std::size(kHiddens); ++w) {
      for (size_t f = 0; f < std::size(kFlagSets); ++f) {
        const int flags = kFlagSets[f];
        GeluLnProblem p;
        p.dtype = t;
        p.hidden = kHiddens[w];
        p.rows = kRows[(w + f) % std::size(kRows)];
        p.has_bias = flags & 1;
        p.has_residual = flags & 2;
        p.has_gamma = flags & 4;
        p.has_beta = flags & 8;
        p.approx = (flags & 16) ? GeluApprox::kTanh : GeluApprox::kExact;
        p.return_pre_norm = flags & 32;
        out.push_back(p);
      }
    }
    // Rows enough that each block of the persistent (pipelined) instances
    // takes three or more on the H200 (a few hundred to ~8,500 blocks or
    // warps resident), so their loop's later rows, prefetch buffers and
    // shared-memory reuse run too: with the few rows above each block took
    // one. Every operand, h returned.
    constexpr std::pair<int64_t, int64_t> kManyRows[] = {
        {26000, 256}, {6000, 1024}, {3000, 2048}, {1300, 4096}, {400, 8192}};
    for (const auto& [rows, hidden] : kManyRows) {
      GeluLnProblem p;
      p.dtype = t;
      p.rows = rows;
      p.hidden = hidden;
      p.has_bias = p.has_residual = p.has_gamma = p.has_beta = true;
      p.return_pre_norm = true;
      out.push_back(p);
    }
  }
  return out;
}

// For the sanitizer runs, which are 10-100x slower and must fit one call:
// COALESCE_CONFORMANCE_OPS=gemm,gelu_layer_norm keeps those ops only,
// COALESCE_CONFORMANCE_VARIANTS=gelu_layer_norm.cuda.block_per_row,... those
// variants only, and COALESCE_CONFORMANCE_MAX_BYTES=N skips problems moving
// more than N bytes.
bool Listed(const char* variable, absl::string_view name) {
  const char* env = std::getenv(variable);
  if (env == nullptr || *env == '\0') return true;
  const std::string list = std::string(",") + env + ",";
  return list.find(absl::StrCat(",", name, ",")) != std::string::npos;
}
bool Selected(const KernelVariant& v) {
  return Listed("COALESCE_CONFORMANCE_OPS", OpName(v.op())) &&
         Listed("COALESCE_CONFORMANCE_VARIANTS", v.name());
}
bool SizeSelected(const Problem& p) {
  const char* env = std::getenv("COALESCE_CONFORMANCE_MAX_BYTES");
  if (env == nullptr || *env == '\0') return true;
  return MinBytesMoved(p) <= std::atoll(env);
}

TEST_F(CudaConformance, EveryVariantMatchesTheReference) {
  int checked = 0;
  uint64_t seed = 7;
  for (const KernelVariant* v : backend_->registry().All()) {
    if (!Selected(*v)) continue;
    const int before = checked;
    for (DType t : kAllDTypes) {
      std::vector<Problem> problems = ConformanceProblems(v->op(), t);
      for (Problem& p : ExtraProblems(v->op(), t)) problems.push_back(p);
      for (const Problem& p : problems) {
        if (!SizeSelected(p)) continue;
        if (!v->CanImplement(p, backend_->device()).ok()) continue;
        SCOPED_TRACE(std::string(v->name()) + " " + Describe(p));
        absl::Status s = CheckVariant(*backend_, *v, p, ++seed);
        EXPECT_TRUE(s.ok()) << s;
        ++checked;
      }
    }
    // A progress line per variant (the sanitizer runs take minutes).
    std::fprintf(stderr, "  %s: %d problems\n", std::string(v->name()).c_str(),
                 checked - before);
  }
  EXPECT_GT(checked, 0);
  std::printf("checked %d (variant, problem) pairs on %s\n", checked,
              backend_->device().name.c_str());
}

// Stored operands, the same addresses three times: the first call runs on
// the stream, the second is captured and replayed as a graph, the third
// replays it; each run's outputs, poisoned before, must match the
// reference. Two problems per variant and dtype.
TEST_F(CudaConformance, EveryVariantReplaysRepeatedCallsAsAGraph) {
  int checked = 0;
  uint64_t seed = 1000;
  for (const KernelVariant* v : backend_->registry().All()) {
    if (!Selected(*v)) continue;
    for (DType t : kAllDTypes) {
      int taken = 0;
      for (const Problem& p : ConformanceProblems(v->op(), t)) {
        if (taken == 2) break;
        if (!SizeSelected(p)) continue;
        if (!v->CanImplement(p, backend_->device()).ok()) continue;
        ++taken;
        SCOPED_TRACE(std::string(v->name()) + " " + Describe(p));
        int replays = -1;
        const absl::Status s =
            CheckVariantResident(*backend_, *v, p, ++seed, 3, &replays);
        EXPECT_TRUE(s.ok()) << s;
        EXPECT_EQ(replays, 2);
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 0);
  std::printf("replayed %d (variant, problem) pairs as graphs\n", checked);
}

TEST_F(CudaConformance, EveryOpHasACudaVariant) {
  for (OpKind op : {OpKind::kTranspose, OpKind::kConvertLayout, OpKind::kGemm,
                    OpKind::kGeluLayerNorm}) {
    EXPECT_FALSE(backend_->registry().ForOp(op).empty()) << OpName(op);
  }
}

TEST_F(CudaConformance, CopyPeakIsMeasured) {
  const DeviceInfo& d = backend_->device();
  EXPECT_GT(d.measured_copy_bandwidth, 0);
  EXPECT_GT(d.theoretical_bandwidth, 0);
  // A measured copy cannot beat the memory's theoretical rate.
  EXPECT_LT(d.measured_copy_bandwidth, 1.05 * d.theoretical_bandwidth);
}

// An empty launch's span between the events: 3.3-3.4 us on an H100; tens of
// microseconds would mean the gate let host launch calls into the span.
TEST_F(CudaConformance, EventOverheadIsMeasured) {
  const double overhead = backend_->device().event_overhead_seconds;
  EXPECT_GT(overhead, 0);
  EXPECT_LT(overhead, 10e-6);
  // The same between a graph's event nodes.
  const double graph = backend_->device().graph_event_overhead_seconds;
  EXPECT_GT(graph, 0);
  EXPECT_LT(graph, 10e-6);
  std::printf("event overhead: %.2f us gated, %.2f us in a graph\n",
              overhead * 1e6, graph * 1e6);
}

// The same-size copy ceiling, timed as a variant is, with a tail of 7 bytes
// past the 16-byte vectors: no faster back to back than the start-up peak,
// but for 20% of slack (for what L2 still holds between rotated buffer sets
// and for the peak's own run-to-run noise).
TEST_F(CudaConformance, SameSizeCopyIsTimedBothWays) {
  const int64_t bytes = (int64_t{24} << 20) + 7;
  BenchmarkOptions opts;
  opts.reps = 10;
  absl::StatusOr<BenchmarkResult> r = backend_->BenchmarkCopy(bytes, opts);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->median_seconds, 0);
  ASSERT_GT(r->back_to_back_seconds, 0);
  const double b2b_bandwidth = 2.0 * bytes / r->back_to_back_seconds;
  EXPECT_LE(b2b_bandwidth, 1.2 * backend_->device().measured_copy_bandwidth);
  EXPECT_EQ(backend_->BenchmarkCopy(0, opts).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Every copy kernel the ceilings are taken from copies every byte, tails of
// 1-15 bytes included, and chained back to back (a -> b -> a ..., configs
// 2 and 3 programmatic dependent launches that prefetch before they wait)
// each copy reads what the one before it wrote.
TEST_F(CudaConformance, CopyKernelsCopyEveryByteBackToBack) {
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
            cudaSuccess);
  uint32_t state = 4242;
  for (int64_t bytes : {int64_t{1}, int64_t{15}, int64_t{16},
                        int64_t{4096 * 16 + 7}, (int64_t{24} << 20) + 5}) {
    const std::string want = RandomBytes(bytes, state);
    for (int config = 0; config < cuda::kCopyConfigs; ++config) {
      SCOPED_TRACE(absl::StrCat("config ", config, ", ", bytes, " bytes"));
      void* buf[2] = {};
      for (void*& b : buf) ASSERT_EQ(cudaMalloc(&b, bytes), cudaSuccess);
      ASSERT_EQ(cudaMemcpyAsync(buf[0], want.data(), bytes,
                                cudaMemcpyHostToDevice, stream),
                cudaSuccess);
      ASSERT_EQ(cudaMemsetAsync(buf[1], 0xff, bytes, stream), cudaSuccess);
      for (int i = 0; i < 8; ++i) {
        ASSERT_TRUE(
            cuda::LaunchCopy(config, buf[i % 2], buf[1 - i % 2], bytes, stream)
                .ok());
        if (i == 0) {
          // Poison the source once it is copied: the chain's later copies
          // must read what the copies before them wrote.
          ASSERT_EQ(cudaMemsetAsync(buf[0], 0x5a, bytes, stream), cudaSuccess);
        }
      }
      std::string got(bytes, '\0');
      ASSERT_EQ(cudaMemcpyAsync(got.data(), buf[0], bytes,
                                cudaMemcpyDeviceToHost, stream),
                cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      EXPECT_TRUE(got == want);
      for (void* b : buf) cudaFree(b);
    }
  }
  EXPECT_EQ(
      cuda::LaunchCopy(cuda::kCopyConfigs, nullptr, nullptr, 16, stream).code(),
      absl::StatusCode::kInvalidArgument);
  cudaStreamDestroy(stream);
}

// The kernel-boundary probes (coalesce-kernel-gap): the stamped copy copies
// every byte, chained, and every launch's every block writes its three
// readings in order, each boundary after the previous launch's exits where
// the launch waits for it.
TEST_F(CudaConformance, StampedLaunchesCopyAndStampInOrder) {
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
            cudaSuccess);
  absl::StatusOr<int> blocks = cuda::StampedBlocks();
  ASSERT_TRUE(blocks.ok()) << blocks.status();
  const int64_t bytes = (int64_t{5} << 20) + 48;
  uint32_t state = 99;
  const std::string want = RandomBytes(bytes, state);
  constexpr int kChain = 6;  // copy, copy, empty early, copy, empty, copy
  const int64_t words = int64_t{kChain} * *blocks * cuda::kStampsPerBlock;
  void* buf[2] = {};
  for (void*& b : buf) ASSERT_EQ(cudaMalloc(&b, bytes), cudaSuccess);
  uint64_t* stamps = nullptr;
  ASSERT_EQ(cudaMalloc(&stamps, words * sizeof(uint64_t)), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(stamps, 0, words * sizeof(uint64_t), stream),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(buf[0], want.data(), bytes, cudaMemcpyHostToDevice,
                            stream),
            cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(buf[1], 0xff, bytes, stream), cudaSuccess);
  int copies = 0;
  for (int k = 0; k < kChain; ++k) {
    uint64_t* s = stamps + int64_t{k} * *blocks * cuda::kStampsPerBlock;
    if (k == 2 || k == 4) {
      ASSERT_TRUE(cuda::LaunchStampedEmpty(k == 2, s, stream).ok());
      continue;
    }
    ASSERT_TRUE(cuda::LaunchStampedCopy(buf[copies % 2], buf[1 - copies % 2],
                                        bytes, s, stream)
                    .ok());
    if (copies++ == 0) {
      ASSERT_EQ(cudaMemsetAsync(buf[0], 0x5a, bytes, stream), cudaSuccess);
    }
  }
  std::string got(bytes, '\0');
  ASSERT_EQ(cudaMemcpyAsync(got.data(), buf[copies % 2], bytes,
                            cudaMemcpyDeviceToHost, stream),
            cudaSuccess);
  std::vector<uint64_t> host(words);
  ASSERT_EQ(cudaMemcpyAsync(host.data(), stamps, words * sizeof(uint64_t),
                            cudaMemcpyDeviceToHost, stream),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_TRUE(got == want);
  uint64_t prev_last_exit = 0;
  for (int k = 0; k < kChain; ++k) {
    uint64_t last_exit = 0;
    for (int b = 0; b < *blocks; ++b) {
      const uint64_t* s =
          &host[(int64_t{k} * *blocks + b) * cuda::kStampsPerBlock];
      SCOPED_TRACE(absl::StrCat("launch ", k, ", block ", b));
      ASSERT_GT(s[0], 0u);
      ASSERT_LE(s[0], s[1]);
      ASSERT_LE(s[1], s[2]);
      // Past its wait (or launched plainly), a block runs after every block
      // of the launch before it has exited.
      ASSERT_GE(s[1], prev_last_exit);
      last_exit = std::max(last_exit, s[2]);
    }
    prev_last_exit = last_exit;
  }
  EXPECT_FALSE(
      cuda::LaunchStampedCopy(buf[0], buf[1], 17, stamps, stream).ok());
  for (void* b : buf) cudaFree(b);
  cudaFree(stamps);
  cudaStreamDestroy(stream);
}

// Resident (device) memory: a tensor larger than two staging chunks copied
// in and out by uneven pieces at offsets, and every transpose variant run
// on it in place, output resident or host, bit-exact against the host.
// PutTensor's path: pieces written through a ResidentWriter, out of order,
// each source buffer overwritten as soon as Write returns (the writer must
// have staged it), land exactly once Finish returns.
TEST_F(CudaConformance, ResidentWriterLandsEveryPiece) {
  const int64_t n = (int64_t{18} << 20) + 5;
  uint32_t state = 777;
  const std::string want = RandomBytes(n, state);
  absl::StatusOr<std::shared_ptr<void>> r = backend_->AllocateResident(n);
  ASSERT_TRUE(r.ok()) << r.status();
  std::unique_ptr<ResidentWriter> w = backend_->OpenResidentWriter(r->get(), n);
  const int64_t piece = (int64_t{3} << 20) + 7;  // several per staging chunk
  std::string src;
  for (int64_t off = (n - 1) / piece * piece; off >= 0; off -= piece) {
    src = want.substr(off, piece);
    ASSERT_TRUE(w->Write(off, src.data(), src.size()).ok()) << off;
    src.assign(src.size(), '\x7f');
  }
  EXPECT_EQ(w->Write(n - 1, want.data(), 2).code(),
            absl::StatusCode::kOutOfRange);
  ASSERT_TRUE(w->Finish().ok());
  std::string got(n, '\0');
  ASSERT_TRUE(backend_->CopyFromResident(r->get(), n, 0, got.data(), n).ok());
  EXPECT_TRUE(got == want);
}

// A released resident block serves the next tensor of its size (within the
// cache's granule) without a new allocation, counts in Memory() while it
// waits, and holds the new tensor's bytes once they are written.
TEST_F(CudaConformance, ReleasedResidentBlocksAreReusedAndCounted) {
  const int64_t n = (int64_t{1} << 20) + 3;
  const int64_t block = static_cast<int64_t>(cuda::BlockCache::BlockBytes(n));
  const int64_t before = backend_->Memory().block_cache_bytes;
  ASSERT_GE(before, 0);
  void* released = nullptr;
  {
    absl::StatusOr<std::shared_ptr<void>> r = backend_->AllocateResident(n);
    ASSERT_TRUE(r.ok()) << r.status();
    released = r->get();
  }
  EXPECT_EQ(backend_->Memory().block_cache_bytes, before + block);
  absl::StatusOr<std::shared_ptr<void>> again =
      backend_->AllocateResident(n + 100);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->get(), released);
  EXPECT_EQ(backend_->Memory().block_cache_bytes, before);
  uint32_t state = 4242;
  const std::string want = RandomBytes(n + 100, state);
  ASSERT_TRUE(
      backend_->CopyToResident(again->get(), n + 100, 0, want.data(), n + 100)
          .ok());
  std::string got(n + 100, '\x7f');
  ASSERT_TRUE(
      backend_->CopyFromResident(again->get(), n + 100, 0, got.data(), n + 100)
          .ok());
  EXPECT_TRUE(got == want);
}

TEST_F(CudaConformance, ResidentOperandsAreUsedInPlace) {
  EXPECT_FALSE(backend_->resident_is_host_addressable());
  const int64_t rows = 3001, cols = 1537, n = rows * cols * 4;  // ~18 MiB
  uint32_t state = 12345;
  const std::string in = RandomBytes(n, state);
  std::string want(n, '\0');
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      std::memcpy(&want[(c * rows + r) * 4], &in[(r * cols + c) * 4], 4);
    }
  }
  absl::StatusOr<std::shared_ptr<void>> rin = backend_->AllocateResident(n);
  ASSERT_TRUE(rin.ok()) << rin.status();
  const int64_t piece = (int64_t{5} << 20) + 3;  // not a chunk multiple
  for (int64_t off = 0; off < n; off += piece) {
    ASSERT_TRUE(backend_
                    ->CopyToResident(rin->get(), n, off, in.data() + off,
                                     std::min(piece, n - off))
                    .ok());
  }
  EXPECT_EQ(backend_->CopyToResident(rin->get(), n, n - 1, in.data(), 2).code(),
            absl::StatusCode::kOutOfRange);

  TransposeProblem tp;
  tp.rows = rows;
  tp.cols = cols;
  const Problem p = tp;
  int ran = 0;
  for (const KernelVariant* v :
       backend_->registry().ForOp(OpKind::kTranspose)) {
    if (!v->CanImplement(p, backend_->device()).ok()) continue;
    ++ran;
    absl::StatusOr<std::shared_ptr<void>> rout = backend_->AllocateResident(n);
    ASSERT_TRUE(rout.ok()) << rout.status();
    Operands resident;
    resident.inputs = {rin->get()};
    resident.outputs = {rout->get()};
    resident.input_spaces = {MemorySpace::kResident};
    resident.output_spaces = {MemorySpace::kResident};
    RunResult run;
    ASSERT_TRUE(backend_->Execute(*v, p, resident, &run).ok()) << v->name();
    std::string got(n, '\0');
    for (int64_t off = 0; off < n; off += piece) {
      ASSERT_TRUE(backend_
                      ->CopyFromResident(rout->get(), n, off, got.data() + off,
                                         std::min(piece, n - off))
                      .ok());
    }
    EXPECT_TRUE(got == want) << v->name() << ": resident output differs";

    // Resident input, host output: staged out as before.
    std::string host_out(n, '\0');
    Operands mixed = resident;
    mixed.outputs = {host_out.data()};
    mixed.output_spaces = {MemorySpace::kHost};
    ASSERT_TRUE(backend_->Execute(*v, p, mixed, &run).ok()) << v->name();
    EXPECT_TRUE(host_out == want) << v->name() << ": host output differs";
  }
  EXPECT_GT(ran, 0);
}

// Transposes there and back, back to back in one stream with no host wait
// between them, each reading what the one before wrote: the variants
// launched to overlap the previous kernel (LaunchAfterPriorGrid) must still
// wait for its writes, and must not overwrite what it still reads. Every
// transpose variant, float32 and bfloat16, a tiled shape, a small_dim one
// (3 rows) and one whose input is past 1.5x the L2, where tma's blocks
// prefetch every stage's tile before the wait, not only the first
// (TmaPrefetchesEveryStage); 16 runs, then the last output against the
// first input. The variants and the
// large shape obey COALESCE_CONFORMANCE_VARIANTS and _MAX_BYTES.
TEST_F(CudaConformance, BackToBackRunsReadTheRunBefore) {
  const DeviceInfo& dev = backend_->device();
  const std::vector<const KernelVariant*> transposes =
      backend_->registry().ForOp(OpKind::kTranspose);
  if (std::none_of(transposes.begin(), transposes.end(),
                   [](const KernelVariant* v) { return Selected(*v); })) {
    GTEST_SKIP() << "COALESCE_CONFORMANCE_OPS/_VARIANTS select no transpose";
  }
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
            cudaSuccess);
  ExecContext ctx;
  ctx.stream = stream;
  ctx.device = &dev;
  int ran = 0;
  uint64_t seed = 99;
  for (DType t : {DType::kFloat32, DType::kBFloat16}) {
    const int64_t large_cols =
        (3 * dev.l2_cache_bytes / 2 / (4096 * ElementSize(t)) / 256 + 1) * 256;
    for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{2048, 1536},
                                     {3, int64_t{1} << 20},
                                     {4096, large_cols}}) {
      TransposeProblem there;
      there.dtype = t;
      there.rows = rows;
      there.cols = cols;
      TransposeProblem back = there;
      back.rows = cols;
      back.cols = rows;
      if (rows == 4096) {
        if (!SizeSelected(there)) continue;
        // The shape this test keeps past tma's threshold.
        ASSERT_TRUE(cuda::TmaPrefetchesEveryStage(
            {static_cast<int>(ElementSize(t)), 1, rows, cols}, ctx));
      }
      const int64_t n = rows * cols;
      const size_t bytes = n * ElementSize(t);
      for (const KernelVariant* v : transposes) {
        if (!Selected(*v) || !v->CanImplement(there, dev).ok() ||
            !v->CanImplement(back, dev).ok()) {
          continue;
        }
        SCOPED_TRACE(
            absl::StrCat(v->name(), " ", DTypeName(t), " ", rows, "x", cols));
        void* buf[3] = {};
        for (void*& b : buf) ASSERT_EQ(cudaMalloc(&b, bytes), cudaSuccess);
        ASSERT_TRUE(cuda::FillRandomDevice(buf[0], t, n, ++seed, stream).ok());
        ASSERT_EQ(cudaMemsetAsync(buf[1], 0xff, bytes, stream), cudaSuccess);
        ASSERT_EQ(cudaMemsetAsync(buf[2], 0xff, bytes, stream), cudaSuccess);
        for (int i = 0; i < 8; ++i) {
          Operands ops;
          ops.inputs = {buf[i == 0 ? 0 : 2]};
          ops.outputs = {buf[1]};
          ASSERT_TRUE(v->Run(there, ops, ctx).ok());
          ops.inputs = {buf[1]};
          ops.outputs = {buf[2]};
          ASSERT_TRUE(v->Run(back, ops, ctx).ok());
        }
        std::string first(bytes, '\0'), last(bytes, '\0');
        ASSERT_EQ(cudaMemcpyAsync(first.data(), buf[0], bytes,
                                  cudaMemcpyDeviceToHost, stream),
                  cudaSuccess);
        ASSERT_EQ(cudaMemcpyAsync(last.data(), buf[2], bytes,
                                  cudaMemcpyDeviceToHost, stream),
                  cudaSuccess);
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        EXPECT_TRUE(first == last) << "16 transposes did not give the input";
        for (void* b : buf) cudaFree(b);
        ++ran;
      }
    }
  }
  cudaStreamDestroy(stream);
  EXPECT_GT(ran, 0);
}

// The launch gate the backend times kernels behind: work queued after a
// closed gate waits for Open (the timeout here is far longer than the
// test), every round; a gate nobody opens passes after its timeout.
TEST_F(CudaConformance, LaunchGateHoldsTheStreamUntilOpened) {
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  cudaEvent_t e = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaSuccess);
  {
    absl::StatusOr<std::unique_ptr<cuda::LaunchGate>> gate =
        cuda::LaunchGate::Create(/*timeout_ns=*/uint64_t{60} * 1000000000);
    ASSERT_TRUE(gate.ok()) << gate.status();
    for (int round = 0; round < 3; ++round) {
      ASSERT_TRUE((*gate)->Close(s).ok());
      ASSERT_EQ(cudaEventRecord(e, s), cudaSuccess);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      EXPECT_EQ(cudaEventQuery(e), cudaErrorNotReady) << "round " << round;
      (*gate)->Open();
      EXPECT_EQ(cudaEventSynchronize(e), cudaSuccess) << "round " << round;
    }
    absl::StatusOr<std::unique_ptr<cuda::LaunchGate>> never =
        cuda::LaunchGate::Create(/*timeout_ns=*/1000000);
    ASSERT_TRUE(never.ok()) << never.status();
    ASSERT_TRUE((*never)->Close(s).ok());
    EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  }
  cudaEventDestroy(e);
  cudaStreamDestroy(s);
}

}  // namespace
}  // namespace coalesce
