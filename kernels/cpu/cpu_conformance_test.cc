// Every CPU variant x every dtype x every conformance problem it accepts,
// generated from the registry: a new variant is covered with no edits here.
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/testing/conformance.h"

namespace coalesce {
namespace {

// Two threads, so the parallel paths run as on a 2-core CI machine. Built
// once: test parameters are generated before main runs.
Backend& CpuBackend() {
  static Backend* const backend = CreateCpuBackend(2).release();
  return *backend;
}

std::vector<std::string> VariantNames() {
  std::vector<std::string> names;
  for (const KernelVariant* v : CpuBackend().registry().All()) {
    names.emplace_back(v->name());
  }
  return names;
}

class CpuConformanceTest
    : public ::testing::TestWithParam<std::tuple<std::string, DType>> {};

TEST_P(CpuConformanceTest, MatchesReference) {
  const auto& [name, dtype] = GetParam();
  Backend& backend = CpuBackend();
  const KernelVariant* v = backend.registry().Find(name);
  ASSERT_NE(v, nullptr);
  int ran = 0;
  uint64_t seed = 0;
  for (const Problem& p : ConformanceProblems(v->op(), dtype)) {
    ++seed;
    if (!v->CanImplement(p, backend.device()).ok()) continue;
    ++ran;
    const absl::Status s = CheckVariant(backend, *v, p, seed);
    EXPECT_TRUE(s.ok()) << s;
  }
  EXPECT_GT(ran, 0) << name << " accepts none of the conformance problems";
}

INSTANTIATE_TEST_SUITE_P(AllCpuVariants, CpuConformanceTest,
                         ::testing::Combine(::testing::ValuesIn(VariantNames()),
                                            ::testing::ValuesIn(kAllDTypes)),
                         [](const auto& info) {
                           return absl::StrCat(
                               absl::StrReplaceAll(std::get<0>(info.param),
                                                   {{".", "_"}}),
                               "_", DTypeName(std::get<1>(info.param)));
                         });

// Every bandwidth fraction the CPU backend reports divides by this.
TEST(CpuConformance, CopyPeakIsMeasured) {
  EXPECT_GT(CpuBackend().device().measured_copy_bandwidth, 1e8);
}

TEST(CpuConformance, EveryOpHasACpuVariant) {
  for (OpKind op : kAllOps) {
    EXPECT_FALSE(CpuBackend().registry().ForOp(op).empty()) << OpName(op);
  }
}

// The CPU backend is the fallback: some CPU variant must run every problem.
TEST(CpuConformance, EveryProblemHasACpuVariant) {
  Backend& backend = CpuBackend();
  for (OpKind op : kAllOps) {
    for (DType t : kAllDTypes) {
      for (const Problem& p : ConformanceProblems(op, t)) {
        bool any = false;
        for (const KernelVariant* v : backend.registry().ForOp(op)) {
          any = any || v->CanImplement(p, backend.device()).ok();
        }
        EXPECT_TRUE(any) << Describe(p);
      }
    }
  }
}

}  // namespace
}  // namespace coalesce
