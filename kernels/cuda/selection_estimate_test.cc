// The CUDA variants' estimates on an H200 description, against winners the
// H200 selection sweep measured (deploy/tuning/nvidia-h200.txt and the
// sweeps' exact shapes in kernels/cuda/testdata, from `scripts/gpu-check.sh
// OUT tune`) and GELU-LayerNorm times of `coalesce-bench kernels
// --ops=gelu_layer_norm`: the heuristic is what a cold server uses for
// shapes the shipped table lacks. Estimates are pure
// functions of the problem and the device description: no GPU needed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/dtype.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/gemm/common.h"
#include "kernels/selection/heuristic.h"
#include "kernels/selection/selection_key.h"
#include "kernels/selection/tuning_store.h"
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
  // What a cold server chooses: the shipped table's entry for p's key,
  // else the heuristic.
  std::string ChosenCold(const Problem& p) {
    if (shipped_ == nullptr) {
      shipped_ = std::make_unique<TuningStore>(
          TuningIdentity{"any", DeviceKey(H200()), ""});
      EXPECT_TRUE(shipped_->Load(COALESCE_H200_TABLE).ok());
    }
    const std::shared_ptr<const TunedChoice> c = shipped_->Lookup(
        SelectionKey(p, H200(), VariantSetVersion(registry_, OpOf(p))));
    last_from_table_ = c != nullptr;
    return c != nullptr ? c->winner : Chosen(p);
  }
  // Every key of a shipped table: of device, live, of registered variants.
  void ExpectLiveEntries(const TuningStore& table, const std::string& device);
  std::unique_ptr<TuningStore> shipped_;
  bool last_from_table_ = false;  // ChosenCold's last answer: the table's
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

// 16-bit GEMMs whose 128x256-tile grid leaves SMs idle: cuBLASLt ran them
// faster than wgmma and tensor_core in every dtype the bench measured
// (bench/results/h200/gemm.md: 1000^3 10.8 against 19.4 and 26 us in
// bfloat16; 8 x 1024^3 27.9 against 40.8 us), and 3-4.3x faster where M or
// N was tens to a few hundred on the held-out bfloat16 sweep.
TEST_F(SelectionEstimate, SixteenBitGemmsThatLeaveSmsIdleGoToCublasLt) {
  for (DType t : {DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(DTypeName(t));
    EXPECT_EQ(Chosen(Gemm(t, 1, 1000, 1000, 1000, false, false)),
              "gemm.cuda.cublaslt");
    EXPECT_EQ(Chosen(Gemm(t, 8, 1024, 1024, 1024, false, false)),
              "gemm.cuda.cublaslt");
    EXPECT_EQ(Chosen(Gemm(t, 1, 48, 3072, 1024, false, false)),
              "gemm.cuda.cublaslt");
    EXPECT_EQ(Chosen(Gemm(t, 1, 2048, 96, 2048, false, false)),
              "gemm.cuda.cublaslt");
  }
}

// B transposed and N not a multiple of 8 in 16 bits: cuBLASLt 1.6-3.6x
// slower than wgmma on large problems in the H200 sweeps, at par on small.
TEST_F(SelectionEstimate, SixteenBitUnalignedRowsAvoidCublasLtWhenLarge) {
  for (DType t : {DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(DTypeName(t));
    EXPECT_NE(Chosen(Gemm(t, 1, 889, 6826, 3008, false, true)),
              "gemm.cuda.cublaslt");
    EXPECT_NE(Chosen(Gemm(t, 1, 1088, 6567, 1280, false, true)),
              "gemm.cuda.cublaslt");
    EXPECT_EQ(Chosen(Gemm(t, 1, 128, 1806, 7168, false, true)),
              "gemm.cuda.cublaslt");
  }
}

// The tile fill: a 1000^3 GEMM fills 32 of a 128x256 kernel's 132 CTA
// slots on the H200; 4096^3 fills 512 of 528 (four waves).
TEST(TiledGemmFill, CountsPaddedTilesAndIdleSlots) {
  DeviceInfo h200;
  h200.multiprocessors = 132;
  const GemmProblem small =
      Gemm(DType::kBFloat16, 1, 1000, 1000, 1000, false, false);
  EXPECT_NEAR(cuda::TiledGemmFill(small, h200, 128, 256, 1),
              (1e6 / (1024.0 * 1024.0)) * 32.0 / 132.0, 1e-12);
  const GemmProblem large =
      Gemm(DType::kBFloat16, 1, 4096, 4096, 4096, false, false);
  EXPECT_NEAR(cuda::TiledGemmFill(large, h200, 128, 256, 1), 512.0 / 528.0,
              1e-12);
  DeviceInfo unknown;  // no SM count: the padding alone
  EXPECT_NEAR(cuda::TiledGemmFill(small, unknown, 128, 256, 1),
              1e6 / (1024.0 * 1024.0), 1e-12);
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

// How many of shapes (TableGemm or SweepShape) ran within 10% of their
// fastest variant in the one chosen(shape) names.
template <typename Shape, typename Chooser>
int WithinTenPercent(const std::vector<Shape>& shapes, Chooser chosen) {
  int good = 0;
  for (const Shape& g : shapes) {
    double best = 1e30;
    for (const auto& [name, s] : g.seconds) best = std::min(best, s);
    const auto it = g.seconds.find(chosen(g));
    if (it != g.seconds.end() && it->second <= 1.1 * best) ++good;
  }
  return good;
}

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

// The heuristic against the shipped table's measurements: for a shape in the
// middle of each entry's buckets, the variant with the lowest estimate ran
// within 10% of the entry's fastest: 163 of 190 with the estimates fitted to
// the sweep's exact shapes (below). Shapes at the bucket middles are only near
// the ones measured (the middle of m's bucket 6 is 48, the shapes there had m =
// 64), and the fitted estimates tell apart regimes (cuBLASLt's split K under
// 32K outputs, a few rows of short K) that a bucket's middle may not share with
// its shape.
TEST_F(SelectionEstimate, Float32GemmsAgreeWithTheShippedTable) {
  const std::vector<TableGemm> entries = ShippedFloat32Gemms();
  ASSERT_GE(entries.size(), 100u) << COALESCE_H200_TABLE;
  const int good = WithinTenPercent(entries, [this](const TableGemm& e) {
    return Chosen(F32Gemm(e.m, e.n, e.k));
  });
  EXPECT_GE(good, 0.85 * entries.size())
      << good << " of " << entries.size() << " within 10%";
}

// The shipped tables are live for this build: each loads for the device its
// header names, every entry's key names that device and ends with its op's
// current variant set version (else the server would skip it with a
// warning), and names only registered variants. Adding, removing or
// renaming a variant of an op fails here until that op is re-swept
// (scripts/gpu-check.sh OUT tune) or its entries are taken out of the
// tables.
TEST_F(SelectionEstimate, ShippedTablesMatchTheRegisteredVariants) {
  int tables = 0;
  for (const auto& file :
       std::filesystem::directory_iterator(COALESCE_TUNING_DIR)) {
    if (file.path().extension() != ".txt") continue;
    ++tables;
    const std::string path = file.path().string();
    std::ifstream in(path);
    std::string line, device;
    while (std::getline(in, line) && device.empty()) {
      if (absl::StartsWith(line, "device ")) device = line.substr(7);
    }
    SCOPED_TRACE(path);
    TuningStore table({"any", device, ""});
    ASSERT_TRUE(table.Load(path).ok()) << path;
    ExpectLiveEntries(table, device);
  }
  EXPECT_GE(tables, 2);
}

void SelectionEstimate::ExpectLiveEntries(const TuningStore& table,
                                          const std::string& device) {
  const std::vector<std::string> keys = table.Keys();
  EXPECT_GE(keys.size(), 100u);
  for (const std::string& key : keys) {
    EXPECT_TRUE(absl::StrContains(key, absl::StrCat("|", device, "|"))) << key;
    const std::optional<OpKind> op = OpOfKey(key);
    EXPECT_TRUE(op.has_value()) << key;
    if (op.has_value()) {
      EXPECT_EQ(VersionOfKey(key), VariantSetVersion(registry_, *op))
          << OpName(*op)
          << " entries predate a change to its variants: " << key;
    }
    const std::shared_ptr<const TunedChoice> c = table.Lookup(key);
    EXPECT_NE(registry_.Find(c->winner), nullptr) << c->winner;
    for (const auto& [name, seconds] : c->measured) {
      EXPECT_NE(registry_.Find(name), nullptr) << name << " in " << key;
    }
  }
}

// A sweep's exact shapes with every eligible variant's measured seconds,
// one "D0,D1,...<TAB>variant=seconds,..." line each (kernels/cuda/testdata,
// written by bench/gemm_selection_fit.py and
// bench/transpose_selection_data.py from the H200 sweeps' tables); lines
// whose shape has not `rank` dimensions are skipped.
struct SweepShape {
  std::vector<int64_t> dims;
  std::map<std::string, double> seconds;
};

std::vector<SweepShape> ReadSweep(const std::string& file, size_t rank) {
  std::vector<SweepShape> out;
  std::ifstream in(std::string(COALESCE_GEMM_SWEEP_DIR) + "/" + file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const std::vector<std::string> cols = absl::StrSplit(line, '\t');
    if (cols.size() != 2) continue;
    SweepShape s;
    for (absl::string_view d : absl::StrSplit(cols[0], ',')) {
      int64_t v = 0;
      if (!absl::SimpleAtoi(d, &v)) break;
      s.dims.push_back(v);
    }
    if (s.dims.size() != rank) continue;
    for (absl::string_view kv : absl::StrSplit(cols[1], ',')) {
      const std::vector<std::string> p = absl::StrSplit(kv, '=');
      double sec = 0;
      if (p.size() == 2 && absl::SimpleAtod(p[1], &sec)) s.seconds[p[0]] = sec;
    }
    if (!s.seconds.empty()) out.push_back(std::move(s));
  }
  return out;
}

// The GEMM sweep (RandomShapes("gemm", 200, seed, 64 MiB), float32) as
// TableGemm.
std::vector<TableGemm> SweepGemms(const std::string& file) {
  std::vector<TableGemm> out;
  for (SweepShape& s : ReadSweep(file, 3)) {
    out.push_back({s.dims[0], s.dims[1], s.dims[2], std::move(s.seconds)});
  }
  return out;
}

// The target for the heuristic alone on the sweep's exact shapes: the choice
// within 10% of the fastest for >= 95% of them. The estimates' constants were
// fitted on seed 7: 190 of its 190 shapes with their own measurement. Seed 8
// was only evaluated: 185 of 189. The misses left are between naive and
// cuBLASLt: cuBLASLt 7.1x slower than naive on 7x134x128 (measured before its
// plan avoided split K when all of the heuristic's first algorithms split)
// and 1.24x on 1x4797x97, naive 1.11-1.12x slower (64x3136x3, 64x3740x2).
TEST_F(SelectionEstimate, Float32GemmsOfTheSweepWithinTenPercent) {
  auto within_ten_percent = [this](const std::vector<TableGemm>& shapes) {
    return WithinTenPercent(shapes, [this](const TableGemm& g) {
      return Chosen(F32Gemm(g.m, g.n, g.k));
    });
  };
  const std::vector<TableGemm> train = SweepGemms("gemm_selection_seed7.txt");
  const std::vector<TableGemm> held_out =
      SweepGemms("gemm_selection_seed8.txt");
  ASSERT_EQ(train.size(), 190u);
  ASSERT_EQ(held_out.size(), 189u);
  const int train_good = within_ten_percent(train);
  const int held_out_good = within_ten_percent(held_out);
  EXPECT_GE(train_good, 190) << train_good << " of " << train.size();
  EXPECT_GE(held_out_good, 185) << held_out_good << " of " << held_out.size();
  EXPECT_GE(held_out_good, 0.95 * held_out.size());
}

// An empty side reaches the estimates (small_dim's block count divides by
// the short side): a choice, no crash.
TEST_F(SelectionEstimate, EmptyTransposesAreEstimated) {
  for (const auto& [rows, cols] :
       {std::pair<int64_t, int64_t>{0, 5}, {9000, 0}, {0, 0}}) {
    TransposeProblem p;
    p.rows = rows;
    p.cols = cols;
    EXPECT_FALSE(Chosen(p).empty()) << rows << "x" << cols;
  }
}

// The transpose heuristic alone on the sweep's exact shapes (the tables keep
// the last shape of each key), both seeds measured on the H200: within 10% of
// the fastest for 146 of 148 seed-7 shapes, whose medians under 1 MB set the
// call costs (transpose/*_variant.cc), and 156 of 159 seed-8 shapes, never
// fitted on. The misses left: smem_padded chosen over vec16 at 2700x288 and
// 64x11264 (1.11-1.13x) and over naive at 8655x7 (1.14x), small_dim over naive
// at 384x13 and 14x448 (1.10-1.16x).
TEST_F(SelectionEstimate, Float32TransposesOfTheSweepWithinTenPercent) {
  // RandomShapes("transpose", 200, seed, 256 MiB), float32.
  auto within_ten_percent = [this](const std::vector<SweepShape>& shapes) {
    return WithinTenPercent(shapes, [this](const SweepShape& t) {
      TransposeProblem p;
      p.rows = t.dims[0];
      p.cols = t.dims[1];
      return Chosen(p);
    });
  };
  const std::vector<SweepShape> train =
      ReadSweep("transpose_selection_seed7.txt", 2);
  const std::vector<SweepShape> held_out =
      ReadSweep("transpose_selection_seed8.txt", 2);
  ASSERT_EQ(train.size(), 148u);
  ASSERT_EQ(held_out.size(), 159u);
  const int train_good = within_ten_percent(train);
  const int held_out_good = within_ten_percent(held_out);
  EXPECT_GE(train_good, 146) << train_good << " of " << train.size();
  EXPECT_GE(held_out_good, 156) << held_out_good << " of " << held_out.size();
  EXPECT_GE(held_out_good, 0.95 * held_out.size());
}

// The layout heuristic alone on the H200 sweep of float32 NCHW -> NHWC
// layouts (every shape, both seeds, convert_layout.cuda.tma included):
// within 10% of the fastest for 190 of the 200 seed-7 shapes and 188 of the
// 200 seed-8 ones. The misses left are tiny: naive 1.1-1.75x faster than
// tiled on identity-like layouts of 4-5 us (C or HW of 1), vec16
// 1.1-1.25x faster than tiled at 5-6 us, tiled or naive 1.1-1.2x faster than
// small_dim at 4-6 us.
TEST_F(SelectionEstimate, Float32LayoutsOfTheSweepWithinTenPercent) {
  // RandomShapes("layout", 200, seed, 256 MiB), float32.
  auto within_ten_percent = [this](const std::vector<SweepShape>& shapes) {
    return WithinTenPercent(shapes, [this](const SweepShape& t) {
      PermuteProblem p;
      p.in_shape.assign(t.dims.begin(), t.dims.end());
      p.perm = {0, 2, 3, 1};
      return Chosen(p);
    });
  };
  const std::vector<SweepShape> train =
      ReadSweep("layout_selection_seed7.txt", 4);
  const std::vector<SweepShape> held_out =
      ReadSweep("layout_selection_seed8.txt", 4);
  ASSERT_EQ(train.size(), 200u);
  ASSERT_EQ(held_out.size(), 200u);
  const int train_good = within_ten_percent(train);
  const int held_out_good = within_ten_percent(held_out);
  EXPECT_GE(train_good, 190) << train_good << " of " << train.size();
  EXPECT_GE(held_out_good, 188) << held_out_good << " of " << held_out.size();
}

// The H200 tune sweeps with TUNE_CLASSES=all in every dtype, packed by
// bench/sweep_data.py: seed 7 fits, seed 8 scores. One shape each, with its
// class and every eligible variant's measured seconds (full names).
struct MeasuredShape {
  Problem problem;
  std::string cls;
  std::map<std::string, double> seconds;
};

// The lines of a sweep_data.py file: the tab-separated columns before the
// last, and the last parsed as variant=seconds under op's variant prefix.
std::vector<std::pair<std::vector<std::string>, std::map<std::string, double>>>
ReadSweepData(const std::string& file, absl::string_view op) {
  std::vector<
      std::pair<std::vector<std::string>, std::map<std::string, double>>>
      out;
  std::ifstream in(std::string(COALESCE_GEMM_SWEEP_DIR) + "/" + file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> cols = absl::StrSplit(line, '\t');
    std::map<std::string, double> seconds;
    for (absl::string_view kv : absl::StrSplit(cols.back(), ',')) {
      const std::vector<std::string> f = absl::StrSplit(kv, '=');
      double sec = 0;
      if (f.size() == 2 && absl::SimpleAtod(f[1], &sec)) {
        seconds[absl::StrCat(op, ".cuda.", f[0])] = sec;
      }
    }
    cols.pop_back();
    out.emplace_back(std::move(cols), std::move(seconds));
  }
  return out;
}

template <typename T>
std::vector<T> Numbers(absl::string_view csv) {
  std::vector<T> out;
  for (absl::string_view v : absl::StrSplit(csv, ',')) {
    int64_t x = 0;
    if (absl::SimpleAtoi(v, &x)) out.push_back(static_cast<T>(x));
  }
  return out;
}

// DTYPE, M,N,K,BATCH,TRANS_A,TRANS_B: classes plain, transposed, batched.
std::vector<MeasuredShape> ReadClassGemms(const std::string& file) {
  std::vector<MeasuredShape> out;
  for (auto& [cols, seconds] : ReadSweepData(file, "gemm")) {
    DType dtype = DType::kFloat32;
    const std::vector<int64_t> d = Numbers<int64_t>(cols.at(1));
    if (!ParseDType(cols[0], &dtype) || d.size() != 6) continue;
    out.push_back({Gemm(dtype, d[3], d[0], d[1], d[2], d[4] != 0, d[5] != 0),
                   d[3] > 1         ? "batched"
                   : (d[4] || d[5]) ? "transposed"
                                    : "plain",
                   std::move(seconds)});
  }
  return out;
}

// DTYPE, CLASS, IN_SHAPE, PERM.
std::vector<MeasuredShape> ReadClassLayouts(const std::string& file) {
  const std::map<std::string, LayoutKind> kinds = {
      {"nchw_nhwc", LayoutKind::kNchwToNhwc},
      {"nhwc_nchw", LayoutKind::kNhwcToNchw},
      {"permutation", LayoutKind::kPermute},
      {"aos_soa", LayoutKind::kAosToSoa},
      {"soa_aos", LayoutKind::kSoaToAos}};
  std::vector<MeasuredShape> out;
  for (auto& [cols, seconds] : ReadSweepData(file, "convert_layout")) {
    PermuteProblem p;
    if (cols.size() != 4 || kinds.count(cols[1]) == 0 ||
        !ParseDType(cols[0], &p.dtype)) {
      continue;
    }
    p.kind = kinds.at(cols[1]);
    for (int64_t x : Numbers<int64_t>(cols[2])) p.in_shape.push_back(x);
    for (int x : Numbers<int>(cols[3])) p.perm.push_back(x);
    out.push_back({p, cols[1], std::move(seconds)});
  }
  return out;
}

// DTYPE, BATCH,ROWS,COLS: classes 2d (batch 1) and batched.
std::vector<MeasuredShape> ReadClassTransposes(const std::string& file) {
  std::vector<MeasuredShape> out;
  for (auto& [cols, seconds] : ReadSweepData(file, "transpose")) {
    TransposeProblem p;
    const std::vector<int64_t> d = Numbers<int64_t>(cols.at(1));
    if (!ParseDType(cols[0], &p.dtype) || d.size() != 3) continue;
    p.batch = d[0];
    p.rows = d[1];
    p.cols = d[2];
    out.push_back({p, p.batch > 1 ? "batched" : "2d", std::move(seconds)});
  }
  return out;
}

// Per "DTYPE CLASS" and "DTYPE all": shapes, the choice within 10% and
// within 5% of the fastest, and the worst ratio (choice / fastest).
struct ReplayScore {
  int shapes = 0, good = 0, close = 0;
  double worst = 1;
};

// list_over > 0: prints each shape whose choice is slower than list_over
// times the fastest, with every variant's measured time and, from
// estimate (when set), its estimate: "name=measured/estimate" in us;
// "(table)" when *from_table says the shipped table chose.
template <typename Chooser>
std::map<std::string, ReplayScore> Replay(
    const std::vector<MeasuredShape>& shapes, Chooser chosen,
    double list_over = 0,
    std::function<double(const Problem&, const std::string&)> estimate = {},
    const bool* from_table = nullptr) {
  std::map<std::string, ReplayScore> by;
  for (const MeasuredShape& m : shapes) {
    double best = 1e30;
    for (const auto& [name, s] : m.seconds) best = std::min(best, s);
    const std::string choice = chosen(m.problem);
    const auto it = m.seconds.find(choice);
    const double ratio = it == m.seconds.end() ? 1e30 : it->second / best;
    if (list_over > 0 && ratio > list_over) {
      std::string times;
      for (const auto& [name, s] : m.seconds) {
        absl::StrAppend(&times, " ", name.substr(name.rfind('.') + 1), "=",
                        absl::SixDigits(s * 1e6));
        if (estimate) {
          absl::StrAppend(&times, "/",
                          absl::SixDigits(estimate(m.problem, name) * 1e6));
        }
      }
      std::printf("  miss %.2fx %s: %s%s, us%s\n", ratio,
                  Describe(m.problem).c_str(),
                  choice.substr(choice.rfind('.') + 1).c_str(),
                  from_table != nullptr && *from_table ? " (table)" : "",
                  times.c_str());
    }
    const std::string dtype(DTypeName(DTypeOf(m.problem)));
    for (const std::string& k : {dtype + " " + m.cls, dtype + " all"}) {
      ReplayScore& s = by[k];
      ++s.shapes;
      if (ratio <= 1.1) ++s.good;
      if (ratio <= 1.05) ++s.close;
      s.worst = std::max(s.worst, ratio);
    }
  }
  return by;
}

// The heuristic alone within 10% of the fastest, per dtype and class, on
// the fit shapes (seed 7) and the held-out ones (seed 8): at least `floor`
// (seed 7, seed 8), the figures the current model reaches. Also prints a
// cold server's choices on seed 8 (the shipped table, then the heuristic).
class SelectionReplay : public SelectionEstimate {
 protected:
  void Check(std::vector<MeasuredShape> (*read)(const std::string&),
             const std::string& name,
             const std::map<std::string, std::pair<int, int>>& floor) {
    const std::vector<MeasuredShape> fit = read(name + "_seed7.txt");
    const std::vector<MeasuredShape> held_out = read(name + "_seed8.txt");
    const auto alone = [this](const Problem& p) { return Chosen(p); };
    const auto cold = [this](const Problem& p) { return ChosenCold(p); };
    const auto t = Replay(fit, alone);
    const auto h = Replay(held_out, alone);
    // COALESCE_REPLAY_MISSES=R lists the cold choices slower than R times
    // the fastest (1 for 1.1), for whoever tunes a model.
    const char* list = std::getenv("COALESCE_REPLAY_MISSES");
    double over = 0;
    if (list != nullptr && (!absl::SimpleAtod(list, &over) || over <= 1)) {
      over = 1.1;
    }
    const auto estimate = [this](const Problem& p, const std::string& v) {
      const KernelVariant* variant = registry_.Find(v);
      return variant == nullptr ? 0.0 : variant->EstimateSeconds(p, H200());
    };
    const auto c = Replay(held_out, cold, over, estimate, &last_from_table_);
    // COALESCE_REPLAY_DUMP=DIR writes DIR/NAME.tsv: every shape of both
    // seeds with each variant's measured time and estimate, for fitting.
    if (const char* dir = std::getenv("COALESCE_REPLAY_DUMP")) {
      std::ofstream out(absl::StrCat(dir, "/", name, ".tsv"));
      out << "seed\tclass\tdtype\tproblem\tvariant\tmeasured_us\testimate_us\n";
      for (const auto& [seed, shapes] : {std::pair{7, &fit}, {8, &held_out}}) {
        for (const MeasuredShape& m : *shapes) {
          for (const auto& [v, seconds] : m.seconds) {
            out << seed << "\t" << m.cls << "\t"
                << DTypeName(DTypeOf(m.problem)) << "\t" << Describe(m.problem)
                << "\t" << v.substr(v.rfind('.') + 1) << "\t" << seconds * 1e6
                << "\t" << estimate(m.problem, v) * 1e6 << "\n";
          }
        }
      }
    }
    ASSERT_EQ(h.size(), floor.size()) << name;
    for (const auto& [key, f] : floor) {
      ASSERT_TRUE(t.count(key) && h.count(key)) << name << " lacks " << key;
      std::printf(
          "%-22s seed 7: %4d (%4d within 5%%) of %4d; seed 8: %4d (%4d) of "
          "%4d, worst %.2fx; with the table: %4d (%4d), worst %.2fx\n",
          key.c_str(), t.at(key).good, t.at(key).close, t.at(key).shapes,
          h.at(key).good, h.at(key).close, h.at(key).shapes, h.at(key).worst,
          c.at(key).good, c.at(key).close, c.at(key).worst);
      EXPECT_GE(t.at(key).good, f.first) << key;
      EXPECT_GE(h.at(key).good, f.second) << key;
    }
  }
};

// smem_tiled's per-block cost took the batched rows from 180-190 to 185-198
// of 200 and their worst ratio from 2.96-3.17x to 1.72-1.93x; the
// tensor-core kernels' waves took the 16-bit rows up by 1-3 more and their
// plain and batched worst ratios to 1.16-1.38x; cuBLASLt's rate on
// unaligned rows took the 16-bit transposed rows up 1-2 more and their
// worst to 1.23-1.43x (from 3.30-3.56x); its cost on bfloat16 rows of odd
// length took bfloat16 from 581 to 589 on seed 7, 579 to 582 on seed 8
// (transposed 192 -> 189 there, plain 190 -> 196); reg_tiled's model
// re-fitted with D's stores took float32 from 563 to 574 on seed 7, 570 to
// 573 on seed 8 (batched worst 1.93x -> 1.30x); naive's cost with B
// transposed took seed 7 from 1749 to 1758 of 1800 over the three dtypes,
// seed 8 from 1745 to 1748 (16 bits +6, float32 -3), and its share for N
// under 16 seed 7 to 1759, seed 8 to 1754 (float32 575).
TEST_F(SelectionReplay, GemmsOfEveryClassAndDtype) {
  Check(&ReadClassGemms, "gemm_classes",
        {
            {"float32 all", {597, 591}},
            {"float32 plain", {200, 196}},
            {"float32 transposed", {200, 197}},
            {"float32 batched", {197, 198}},
            {"float16 all", {593, 589}},
            {"float16 plain", {197, 194}},
            {"float16 transposed", {199, 197}},
            {"float16 batched", {197, 198}},
            {"bfloat16 all", {589, 587}},
            {"bfloat16 plain", {196, 196}},
            {"bfloat16 transposed", {195, 194}},
            {"bfloat16 batched", {198, 197}},
        });
}

// Measured with the run copy's thread per piece for short rows and its
// model (pieces per SM and second by width), the tile's idle threads on
// dims under 32 (and its rate by element size) and small_dim's cost off
// its register path on 2-D layouts: permutations within 10% on seed 8 at
// 195-198 of 200 (the old kernel and models: 147-153, worst 113-115x),
// every class's worst ratio 1.13-1.46x; tma's call cost took the 16-bit
// layouts from 965 to 975-976 of 1000 (seed 7: 978-980 to 979-981);
// small_dim's shared path at its register path's cost up to 512 elements
// took seed 7 to 992-994 and seed 8 to 987-992.
TEST_F(SelectionReplay, LayoutsOfEveryClassAndDtype) {
  Check(&ReadClassLayouts, "layout_classes",
        {
            {"float32 all", {994, 992}},
            {"float32 nchw_nhwc", {198, 197}},
            {"float32 nhwc_nchw", {200, 198}},
            {"float32 permutation", {198, 199}},
            {"float32 aos_soa", {198, 200}},
            {"float32 soa_aos", {200, 198}},
            {"float16 all", {993, 988}},
            {"float16 nchw_nhwc", {197, 198}},
            {"float16 nhwc_nchw", {197, 198}},
            {"float16 permutation", {200, 199}},
            {"float16 aos_soa", {199, 197}},
            {"float16 soa_aos", {200, 196}},
            {"bfloat16 all", {992, 987}},
            {"bfloat16 nchw_nhwc", {197, 198}},
            {"bfloat16 nhwc_nchw", {197, 197}},
            {"bfloat16 permutation", {200, 199}},
            {"bfloat16 aos_soa", {198, 197}},
            {"bfloat16 soa_aos", {200, 196}},
        });
}

// The 16-bit call costs of naive and vec16_wide took the 16-bit rows from
// 368-373 to 393 of 400 on seed 8 (fitted on seed 7: 370-372 to 389-390);
// vec16's (0.39 us, now 0.15 in float32 and 0.05 in 16 bits) took the
// share within 5% on seed 8 from 350-359 to 382-386 of 400.
TEST_F(SelectionReplay, TransposesOfEveryClassAndDtype) {
  Check(&ReadClassTransposes, "transpose_classes",
        {
            {"float32 all", {396, 398}},
            {"float32 2d", {199, 199}},
            {"float32 batched", {197, 199}},
            {"float16 all", {394, 395}},
            {"float16 2d", {200, 199}},
            {"float16 batched", {194, 196}},
            {"bfloat16 all", {395, 396}},
            {"bfloat16 2d", {200, 200}},
            {"bfloat16 batched", {195, 196}},
        });
}

}  // namespace
}  // namespace coalesce
