// The CUDA variants' estimates on an H200 description, against winners the
// H200 selection sweep measured (deploy/tuning/nvidia-h200.txt, and
// bench/results/h200/gelu-layer-norm.txt): the heuristic is what a cold
// server uses for shapes the shipped table lacks. Estimates are pure
// functions of the problem and the device description: no GPU needed.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "kernels/core/select.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/testing/conformance.h"

namespace coalesce {
namespace {

// What ProbeDevice and the start-up copy probe read on the H200.
DeviceInfo H200() {
  DeviceInfo d;
  d.backend = BackendKind::kCuda;
  d.name = "NVIDIA H200";
  d.cc_major = 9;
  d.multiprocessors = 132;
  d.max_threads_per_multiprocessor = 2048;
  d.memory_bytes = int64_t{143} << 30;
  d.l2_cache_bytes = 60 << 20;
  d.shared_memory_per_block_bytes = 48 << 10;
  d.shared_memory_per_block_optin_bytes = 227 << 10;
  d.theoretical_bandwidth = 4.8e12;
  d.measured_copy_bandwidth = 4.2e12;
  d.peak_fp32_flops = 2.0 * 128 * 132 * 1.98e9;
  d.peak_tensor_flops = 2.0 * 2048 * 132 * 1.98e9;
  return d;
}

class SelectionEstimate : public ::testing::Test {
 protected:
  SelectionEstimate() { RegisterCudaVariants(registry_); }
  std::string Chosen(const Problem& p) {
    absl::StatusOr<Selection> s = SelectVariant(registry_, p, H200(), "");
    return s.ok() ? std::string(s->variant->name()) : s.status().ToString();
  }
  VariantRegistry registry_;
};

GemmProblem F32Gemm(int64_t m, int64_t n, int64_t k) {
  return Gemm(DType::kFloat32, 1, m, n, k, false, false);
}

// Tiny GEMMs with short K: naive 3.7-4.5 us against cuBLASLt's 6.2-7.4.
TEST_F(SelectionEstimate, TinyShortKGemmsGoToNaive) {
  EXPECT_EQ(Chosen(F32Gemm(64, 64, 8)), "gemm.cuda.naive");
  EXPECT_EQ(Chosen(F32Gemm(128, 512, 2)), "gemm.cuda.naive");
}

// Few outputs and a long K: the K loop's latency, 84.6 us in naive and
// 350 us in reg_tiled at K = 4096-8191, against 6.2 us in cuBLASLt.
TEST_F(SelectionEstimate, LongKGemmsGoToCublasLt) {
  EXPECT_EQ(Chosen(F32Gemm(64, 1, 6000)), "gemm.cuda.cublaslt");
  EXPECT_EQ(Chosen(F32Gemm(2, 64, 9000)), "gemm.cuda.cublaslt");
}

TEST_F(SelectionEstimate, LargeGemmsAvoidTheBaselines) {
  const std::string c = Chosen(F32Gemm(4096, 4096, 4096));
  EXPECT_NE(c, "gemm.cuda.naive");
  EXPECT_NE(c, "gemm.cuda.smem_tiled");
}

GeluLnProblem GeluLn(int64_t rows, int64_t hidden) {
  GeluLnProblem p;
  p.dtype = DType::kFloat32;
  p.rows = rows;
  p.hidden = hidden;
  p.has_bias = p.has_residual = p.has_gamma = p.has_beta = true;
  return p;
}

// Few rows: block_per_row 1.5-1.6x faster in the sweep, 4.8 against 6.5 us
// at [128,768] in the bench; many rows of 768: warp_per_row, 45.4 against
// 53.2 us at [16384,768].
TEST_F(SelectionEstimate, GeluLnRowsPickWarpOrBlock) {
  EXPECT_EQ(Chosen(GeluLn(64, 1024)), "gelu_layer_norm.cuda.block_per_row");
  EXPECT_EQ(Chosen(GeluLn(128, 768)), "gelu_layer_norm.cuda.block_per_row");
  EXPECT_EQ(Chosen(GeluLn(16384, 768)), "gelu_layer_norm.cuda.warp_per_row");
  // Few rows of a few dozen elements: warp_per_row, 3.8 against 4.3 us.
  EXPECT_EQ(Chosen(GeluLn(96, 13)), "gelu_layer_norm.cuda.warp_per_row");
}

// Every float32 GEMM entry of the shipped table: its key's log2 buckets of
// M, N and K (fields "m7", "n3", "k12"), every variant's measured time.
struct TableGemm {
  int64_t m = 0, n = 0, k = 0;
  std::map<std::string, double> seconds;
};

std::vector<TableGemm> ShippedFloat32Gemms() {
  std::vector<TableGemm> out;
  std::ifstream in(COALESCE_H200_TABLE);
  std::string line;
  // The middle of bucket b: sizes 2^b to 2^(b+1) - 1.
  auto mid = [](int b) -> int64_t {
    return b == 0 ? 1 : (int64_t{3} << b) / 2;
  };
  while (std::getline(in, line)) {
    if (line.rfind("entry gemm|float32|", 0) != 0) continue;
    const std::vector<std::string> cols = absl::StrSplit(line, '\t');
    if (cols.size() < 4) continue;
    TableGemm g;
    for (absl::string_view field : absl::StrSplit(cols[0], '|')) {
      int b = 0;
      if (field.size() < 2 || !absl::SimpleAtoi(field.substr(1), &b)) continue;
      if (field[0] == 'm') g.m = mid(b);
      if (field[0] == 'n') g.n = mid(b);
      if (field[0] == 'k') g.k = mid(b);
    }
    for (absl::string_view kv : absl::StrSplit(cols[3], ',')) {
      const std::vector<std::string> p = absl::StrSplit(kv, '=');
      double s = 0;
      if (p.size() == 2 && absl::SimpleAtod(p[1], &s)) g.seconds[p[0]] = s;
    }
    if (g.m > 0 && g.n > 0 && g.k > 0 && !g.seconds.empty()) out.push_back(g);
  }
  return out;
}

// The heuristic against the shipped table's measurements: for a shape in
// the middle of each entry's buckets, the variant with the lowest estimate
// ran within 10% of the entry's fastest. 170 of 190 when the estimates were
// fitted (the bar for the real sweep is 95%; shapes at the bucket
// middles are only near the ones measured).
TEST_F(SelectionEstimate, Float32GemmsAgreeWithTheShippedTable) {
  const std::vector<TableGemm> entries = ShippedFloat32Gemms();
  ASSERT_GE(entries.size(), 100u) << COALESCE_H200_TABLE;
  int good = 0;
  for (const TableGemm& e : entries) {
    const std::string c = Chosen(F32Gemm(e.m, e.n, e.k));
    double best = 1e30;
    for (const auto& [name, s] : e.seconds) best = std::min(best, s);
    const auto it = e.seconds.find(c);
    if (it != e.seconds.end() && it->second <= 1.1 * best) ++good;
  }
  EXPECT_GE(good, 0.85 * entries.size())
      << good << " of " << entries.size() << " within 10%";
}

}  // namespace
}  // namespace coalesce
