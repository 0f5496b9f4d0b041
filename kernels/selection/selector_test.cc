// Selection sources (cache, table, heuristic), autotuning modes, the tuning
// file format and its failure modes, on the CPU backend (two transpose
// variants to choose between).
#include "kernels/selection/selector.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/selection/selection_key.h"

namespace coalesce {
namespace {

Problem Transpose(int64_t m, int64_t n, DType t = DType::kFloat32) {
  TransposeProblem p;
  p.dtype = t;
  p.rows = m;
  p.cols = n;
  return p;
}

std::string TempPath(absl::string_view name) {
  return absl::StrCat(::testing::TempDir(), "/", name, ".", getpid());
}

class SelectorTest : public ::testing::Test {
 protected:
  void SetUp() override { backend_ = CreateCpuBackend(1); }
  SelectorOptions Options() {
    SelectorOptions o;
    o.build_id = "test-build";
    return o;
  }
  std::unique_ptr<Backend> backend_;
};

TEST(SelectionKeyTest, BucketsShapesAndSeparatesAlignment) {
  // 1000 and 1010 share the log2 bucket and the alignment class (8, 2)...
  EXPECT_EQ(ShapeKey(Transpose(1000, 512)), ShapeKey(Transpose(1016, 512)));
  // ...but alignment decides 16-byte eligibility, so it splits keys.
  EXPECT_NE(ShapeKey(Transpose(1000, 512)), ShapeKey(Transpose(1001, 512)));
  EXPECT_NE(ShapeKey(Transpose(1000, 512)), ShapeKey(Transpose(2000, 512)));
  EXPECT_NE(ShapeKey(Transpose(1000, 512, DType::kFloat32)),
            ShapeKey(Transpose(1000, 512, DType::kBFloat16)));
  PermuteProblem nchw;
  nchw.in_shape = {8, 3, 224, 224};
  nchw.perm = {0, 2, 3, 1};
  PermuteProblem nchw64 = nchw;
  nchw64.in_shape = {8, 64, 224, 224};
  EXPECT_NE(ShapeKey(nchw), ShapeKey(nchw64));  // short dims stay exact
  EXPECT_EQ(Log2Bucket(1), 0);
  EXPECT_EQ(Log2Bucket(4096), 12);
  EXPECT_EQ(Log2Bucket(4097), 13);
}

TEST(TuningStoreTest, RoundTripsAndRejectsForeignFiles) {
  TuningStore a({"b1", "dev|9.0", "v1"});
  a.Put("k1",
        {"x.cuda.fast", 1e-5, {{"x.cuda.fast", 1e-5}, {"x.cuda.slow", 3e-5}}});
  TuningStore b({"b1", "dev|9.0", "v1"});
  ASSERT_TRUE(b.Parse(a.Serialize()).ok());
  auto c = b.Lookup("k1");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->winner, "x.cuda.fast");
  EXPECT_EQ(c->measured.size(), 2u);
  EXPECT_DOUBLE_EQ(c->measured[1].second, 3e-5);

  TuningStore other_build({"b2", "dev|9.0", "v1"});
  EXPECT_EQ(other_build.Parse(a.Serialize()).code(),
            absl::StatusCode::kFailedPrecondition);
  TuningStore other_device({"b1", "gpu|8.0", "v1"});
  EXPECT_EQ(other_device.Parse(a.Serialize()).code(),
            absl::StatusCode::kFailedPrecondition);
  // The variants line is a record: keys carry each op's version.
  TuningStore other_variants({"b1", "dev|9.0", "v2"});
  EXPECT_TRUE(other_variants.Parse(a.Serialize()).ok());
  EXPECT_EQ(b.Parse("garbage").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(b.Parse(absl::StrCat(a.Serialize(), "entry broken\n")).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(other_device.size(), 0u);  // failed parses change nothing
}

TEST(TuningStoreTest, SavesAtomicallyAndLoadsMissingAsEmpty) {
  const std::string path = TempPath("store");
  std::remove(path.c_str());
  TuningStore a({"b", "d", "v"});
  EXPECT_TRUE(a.Load(path).ok());
  a.Put("k", {"w", 2e-6, {{"w", 2e-6}}});
  ASSERT_TRUE(a.Save(path).ok());
  EXPECT_NE(access((path + ".tmp").c_str(), F_OK), 0);  // renamed away
  TuningStore b({"b", "d", "v"});
  ASSERT_TRUE(b.Load(path).ok());
  EXPECT_EQ(b.Lookup("k")->winner, "w");
  std::remove(path.c_str());
}

// A folder of shipped tables: the one written for this device loads, the
// others (and files not named *.txt) are passed over; a broken file is
// reported only when no table loads.
TEST(TuningStoreTest, LoadsTheTableOfItsDeviceFromAFolder) {
  const std::string dir = TempPath("tables");
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(std::filesystem::create_directory(dir));
  const auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(absl::StrCat(dir, "/", name)) << text;
  };
  TuningStore h100({"any", "NVIDIA H100|9.0", "v"});
  h100.Put("k", {"w.h100", 1e-6, {{"w.h100", 1e-6}}});
  TuningStore h200({"any", "NVIDIA H200|9.0", "v"});
  h200.Put("k", {"w.h200", 1e-6, {{"w.h200", 1e-6}}});
  write("nvidia-h100.txt", h100.Serialize());
  write("nvidia-h200.txt", h200.Serialize());
  write("nvidia-h200.json", "not a table");

  TuningStore on_h200({"any", "NVIDIA H200|9.0", "v"});
  ASSERT_TRUE(on_h200.Load(dir).ok());
  EXPECT_EQ(on_h200.Lookup("k")->winner, "w.h200");
  TuningStore on_h100({"any", "NVIDIA H100|9.0", "v"});
  ASSERT_TRUE(on_h100.Load(dir).ok());
  EXPECT_EQ(on_h100.Lookup("k")->winner, "w.h100");

  TuningStore on_a100({"any", "NVIDIA A100|8.0", "v"});
  const absl::Status none = on_a100.Load(dir);
  EXPECT_EQ(none.code(), absl::StatusCode::kFailedPrecondition) << none;
  EXPECT_TRUE(
      absl::StrContains(none.message(), "no table there (*.txt, 2 found)"))
      << none;
  EXPECT_EQ(on_a100.size(), 0u);

  write("broken.txt", "garbage");
  TuningStore still({"any", "NVIDIA H200|9.0", "v"});
  EXPECT_TRUE(still.Load(dir).ok());
  EXPECT_EQ(on_a100.Load(dir).code(), absl::StatusCode::kInvalidArgument);
  std::filesystem::remove_all(dir);
}

TEST_F(SelectorTest, HeuristicThenTunedCache) {
  Selector s(backend_.get(), Options());
  const Problem p = Transpose(512, 384);
  absl::StatusOr<Selection> first = s.Select(p, "");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->source, "heuristic");
  absl::StatusOr<TunedChoice> t = s.Tune(p);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->measured.size(), 2u);  // blocked and naive both timed
  absl::StatusOr<Selection> second = s.Select(p, "");
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->source, "cache");
  EXPECT_EQ(second->variant->name(), t->winner);
  // A forced name still wins over every source.
  absl::StatusOr<Selection> forced = s.Select(p, "transpose.cpu.naive");
  ASSERT_TRUE(forced.ok());
  EXPECT_EQ(forced->source, "forced");
}

// Remembered answers are the answers: interleaved problems (two sharing a
// selection key, another dtype) get what a selector without history gives
// them, before and after a cache entry for their key appears.
TEST_F(SelectorTest, RemembersEachExactProblemUntilTheCacheChanges) {
  Selector s(backend_.get(), Options());
  const std::vector<Problem> problems = {
      Transpose(1000, 512), Transpose(1016, 512),
      Transpose(1000, 512, DType::kBFloat16)};
  ASSERT_EQ(s.KeyOf(problems[0]), s.KeyOf(problems[1]));
  auto expect_fresh_answers = [&](const std::string& round) {
    Selector fresh(backend_.get(), Options());
    if (auto c = s.cache().Lookup(s.KeyOf(problems[0]))) {
      const_cast<TuningStore&>(fresh.cache()).Put(s.KeyOf(problems[0]), *c);
    }
    for (int pass = 0; pass < 2; ++pass) {
      for (const Problem& p : problems) {
        SCOPED_TRACE(absl::StrCat(round, ", pass ", pass, ": ", Describe(p)));
        absl::StatusOr<Selection> got = s.Select(p, "");
        absl::StatusOr<Selection> want = fresh.Select(p, "");
        ASSERT_TRUE(got.ok() && want.ok());
        EXPECT_EQ(got->variant, want->variant);
        EXPECT_EQ(got->source, want->source);
        EXPECT_EQ(got->reason, want->reason);
      }
    }
  };
  expect_fresh_answers("heuristic");
  EXPECT_EQ(s.Select(problems[0], "")->source, "heuristic");
  // A tuned winner that the heuristic does not pick.
  const std::string other =
      s.Select(problems[0], "")->variant->name() == "transpose.cpu.naive"
          ? "transpose.cpu.blocked"
          : "transpose.cpu.naive";
  const_cast<TuningStore&>(s.cache()).Put(s.KeyOf(problems[0]),
                                          {other, 1e-6, {{other, 1e-6}}});
  expect_fresh_answers("tuned");
  EXPECT_EQ(s.Select(problems[1], "")->variant->name(), other);
  EXPECT_EQ(s.Select(problems[1], "")->source, "cache");
}

// Measure asks its caller between runs: once the caller is gone (deadline,
// cancellation, shutdown) the timing stops with CANCELLED, after the run in
// flight; a caller that stays gets every eligible variant timed.
TEST_F(SelectorTest, MeasureStopsOnceItsCallerIsCancelled) {
  Selector s(backend_.get(), Options());
  const Problem p = Transpose(512, 384);
  int asked = 0;
  absl::StatusOr<TunedChoice> stopped =
      s.Measure(p, [&asked] { return ++asked > 3; });
  EXPECT_EQ(stopped.status().code(), absl::StatusCode::kCancelled)
      << stopped.status();
  EXPECT_EQ(asked, 4);
  absl::StatusOr<TunedChoice> whole = s.Measure(p, [] { return false; });
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->measured.size(), 2u);
}

// The table answers when the cache has nothing. Keys carry their op's
// variant set version: entries of an op whose variants changed are
// reported and never match, while the other ops' entries still serve.
TEST_F(SelectorTest, TableAnswersAndItsEntriesOfAChangedOpAreReported) {
  const std::string path = TempPath("table");
  const Problem p = Transpose(256, 256);
  Selector probe(backend_.get(), Options());
  TuningStore table({"any", DeviceKey(backend_->device()),
                     VariantSetVersions(backend_->registry())});
  table.Put(probe.KeyOf(p),
            {"transpose.cpu.naive", 1e-6, {{"transpose.cpu.naive", 1e-6}}});
  const auto check = [&](size_t expected_warnings) {
    ASSERT_TRUE(table.Save(path).ok());
    SelectorOptions o = Options();
    o.table_path = path;
    Selector s(backend_.get(), o);
    std::vector<std::string> warnings;
    s.Init(&warnings);
    ASSERT_EQ(warnings.size(), expected_warnings);
    if (expected_warnings > 0) {
      EXPECT_TRUE(absl::StrContains(warnings[0], "1 of 2")) << warnings[0];
      EXPECT_TRUE(absl::StrContains(warnings[0], "gemm")) << warnings[0];
      EXPECT_FALSE(absl::StrContains(warnings[0], "transpose")) << warnings[0];
    }
    absl::StatusOr<Selection> sel = s.Select(p, "");
    ASSERT_TRUE(sel.ok());
    EXPECT_EQ(sel->source, "table");
    EXPECT_EQ(sel->variant->name(), "transpose.cpu.naive");
  };
  check(0);
  table.Put(absl::StrCat("gemm|float32|b0|m6|n6|k6|",
                         DeviceKey(backend_->device()), "|v00000000"),
            {"gemm.cpu.naive", 1e-6, {{"gemm.cpu.naive", 1e-6}}});
  check(1);
  std::remove(path.c_str());
}

TEST(SelectionKeyTest, KeysSplitIntoOpDeviceAndVersion) {
  DeviceInfo d;
  d.name = "NVIDIA H200";
  d.cc_major = 9;
  d.cc_minor = 0;
  const std::string key = SelectionKey(Transpose(1000, 512), d, "v1234abcd");
  EXPECT_EQ(OpOfKey(key), OpKind::kTranspose);
  EXPECT_EQ(DeviceOfKey(key), DeviceKey(d));
  EXPECT_EQ(DeviceOfKey(key), "NVIDIA H200|9.0");
  EXPECT_EQ(VersionOfKey(key), "v1234abcd");
  EXPECT_EQ(DeviceOfKey("transpose|v1"), "");
  EXPECT_EQ(DeviceOfKey("a|b|v1"), "");
  EXPECT_EQ(OpOfKey("nonsense|x|y|v1"), std::nullopt);
}

TEST(SelectionKeyTest, VersionsArePerOp) {
  VariantRegistry r;
  RegisterCpuVariants(r);
  EXPECT_NE(VariantSetVersion(r, OpKind::kTranspose),
            VariantSetVersion(r, OpKind::kGemm));
  EXPECT_TRUE(absl::StrContains(
      VariantSetVersions(r),
      absl::StrCat("gemm=", VariantSetVersion(r, OpKind::kGemm))));
}

// A CPU transpose variant at a given revision; it never runs.
class RevisedTranspose final
    : public TypedVariant<TransposeProblem, OpKind::kTranspose,
                          BackendKind::kCpu> {
 public:
  explicit RevisedTranspose(int revision) : revision_(revision) {}
  absl::string_view name() const override { return "transpose.cpu.revised"; }
  absl::string_view description() const override { return "test only"; }
  int revision() const override { return revision_; }

 protected:
  absl::Status CanImplementTyped(const TransposeProblem&,
                                 const DeviceInfo&) const override {
    return absl::OkStatus();
  }
  absl::Status RunTyped(const TransposeProblem&, const Operands&,
                        ExecContext&) const override {
    return absl::UnimplementedError("test only");
  }

 private:
  int revision_;
};

TEST(SelectionKeyTest, ARevisionChangesItsOpsVersionOnly) {
  std::vector<VariantRegistry> at(3);
  for (int rev = 0; rev < 3; ++rev) {
    RegisterCpuVariants(at[rev]);
    at[rev].Add(std::make_unique<RevisedTranspose>(rev));
  }
  const auto version = [&](int rev, OpKind op) {
    return VariantSetVersion(at[rev], op);
  };
  EXPECT_NE(version(0, OpKind::kTranspose), version(1, OpKind::kTranspose));
  EXPECT_NE(version(1, OpKind::kTranspose), version(2, OpKind::kTranspose));
  EXPECT_NE(version(0, OpKind::kTranspose), version(2, OpKind::kTranspose));
  for (OpKind op :
       {OpKind::kGemm, OpKind::kConvertLayout, OpKind::kGeluLayerNorm}) {
    EXPECT_EQ(version(0, op), version(1, op)) << OpName(op);
    EXPECT_EQ(version(0, op), version(2, op)) << OpName(op);
  }
}

TEST_F(SelectorTest, IneligibleCachedWinnerFallsThrough) {
  Selector s(backend_.get(), Options());
  const Problem p = Transpose(64, 64);
  // A winner that no longer exists (or cannot run this exact shape).
  const_cast<TuningStore&>(s.cache()).Put(s.KeyOf(p),
                                          {"transpose.cpu.gone", 1e-6, {}});
  absl::StatusOr<Selection> sel = s.Select(p, "");
  ASSERT_TRUE(sel.ok());
  EXPECT_EQ(sel->source, "heuristic");
}

TEST_F(SelectorTest, CorruptOrForeignCacheFileIsIgnoredWithAWarning) {
  const std::string path = TempPath("corrupt");
  {
    std::ofstream f(path);
    f << "coalesce-tuning 1\nbuild test-build\ndevice elsewhere|1.0\n"
         "variants v0\n";
  }
  SelectorOptions o = Options();
  o.cache_path = path;
  Selector s(backend_.get(), o);
  std::vector<std::string> warnings;
  s.Init(&warnings);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_TRUE(absl::StrContains(warnings[0], "elsewhere")) << warnings[0];
  {
    std::ofstream f(path);
    f << "\x01\x02 not a file";
  }
  Selector s2(backend_.get(), o);
  warnings.clear();
  s2.Init(&warnings);
  EXPECT_EQ(warnings.size(), 1u);
  EXPECT_TRUE(s2.Select(Transpose(8, 8), "").ok());
  std::remove(path.c_str());
}

TEST_F(SelectorTest, EagerTunesInlineAndPersists) {
  const std::string path = TempPath("eager");
  std::remove(path.c_str());
  SelectorOptions o = Options();
  o.autotune = AutotuneMode::kEager;
  o.cache_path = path;
  const Problem p = Transpose(300, 200);
  {
    Selector s(backend_.get(), o);
    absl::StatusOr<Selection> sel = s.Select(p, "");
    ASSERT_TRUE(sel.ok());
    EXPECT_EQ(sel->source, "cache");
    EXPECT_EQ(s.tunings(), 1);
  }
  // A new server process with the same build reads the file back.
  o.autotune = AutotuneMode::kOff;
  Selector again(backend_.get(), o);
  std::vector<std::string> warnings;
  again.Init(&warnings);
  EXPECT_TRUE(warnings.empty());
  EXPECT_EQ(again.Select(p, "")->source, "cache");
  // A new build does not trust it.
  o.build_id = "next-build";
  Selector rebuilt(backend_.get(), o);
  warnings.clear();
  rebuilt.Init(&warnings);
  EXPECT_EQ(warnings.size(), 1u);
  EXPECT_EQ(rebuilt.Select(p, "")->source, "heuristic");
  std::remove(path.c_str());
}

TEST_F(SelectorTest, OnMissTunesOnceInTheBackground) {
  SelectorOptions o = Options();
  o.autotune = AutotuneMode::kOnMiss;
  Selector s(backend_.get(), o);
  const Problem p = Transpose(640, 480);
  // Many concurrent first requests: all get an answer at once, one tuning.
  std::vector<std::thread> threads;
  std::atomic<int> heuristic{0};
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      absl::StatusOr<Selection> sel = s.Select(p, "");
      if (sel.ok() && sel->source == "heuristic") ++heuristic;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_GE(heuristic.load(), 1);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (s.Select(p, "")->source != "cache" &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(s.Select(p, "")->source, "cache");
  EXPECT_EQ(s.tunings(), 1);
}

TEST_F(SelectorTest, ExplainListsEveryVariantWithItsSource) {
  Selector s(backend_.get(), Options());
  const Problem p = Transpose(256, 320);
  ASSERT_TRUE(s.Tune(p).ok());
  Explanation e = s.Explain(p);
  EXPECT_EQ(e.chosen.source, "cache");
  ASSERT_EQ(e.candidates.size(), 2u);
  for (const Candidate& c : e.candidates) {
    EXPECT_TRUE(c.eligible) << c.variant;
    EXPECT_GT(c.estimate_seconds, 0);
    EXPECT_GT(c.measured_seconds, 0) << c.variant;
  }
}

}  // namespace
}  // namespace coalesce
