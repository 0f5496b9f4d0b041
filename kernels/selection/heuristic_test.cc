#include "kernels/selection/heuristic.h"

#include <memory>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

namespace coalesce {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

// A transpose variant that only takes float32, to exercise CanImplement.
template <BackendKind kBackend>
class Float32OnlyTranspose final
    : public TypedVariant<TransposeProblem, OpKind::kTranspose, kBackend> {
 public:
  absl::string_view name() const override { return "transpose.test.f32"; }
  absl::string_view description() const override { return "test double"; }

 protected:
  absl::Status CanImplementTyped(const TransposeProblem& p,
                                 const DeviceInfo&) const override {
    if (p.dtype != DType::kFloat32) {
      return absl::UnimplementedError("float32 only");
    }
    return absl::OkStatus();
  }
  absl::Status RunTyped(const TransposeProblem&, const Operands&,
                        ExecContext&) const override {
    return absl::OkStatus();
  }
};

Problem Transpose(DType t, int64_t rows, int64_t cols) {
  return TransposeProblem{t, 1, rows, cols};
}

class SelectCpuTest : public ::testing::Test {
 protected:
  SelectCpuTest() : dev_(CpuDeviceInfo(2)) { RegisterCpuVariants(registry_); }
  VariantRegistry registry_;
  DeviceInfo dev_;
};

TEST_F(SelectCpuTest, ForcedUnknownNameListsEligibleVariants) {
  const absl::StatusOr<Selection> s = SelectVariant(
      registry_, Transpose(DType::kFloat32, 64, 64), dev_, "transpose.cpu.no");
  ASSERT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), AllOf(HasSubstr("transpose.cpu.no"),
                                          HasSubstr("transpose.cpu.blocked"),
                                          HasSubstr("transpose.cpu.naive"),
                                          Not(HasSubstr("gemm.cpu.openblas"))));
}

TEST_F(SelectCpuTest, ForcedVariantOfAnotherOpIsInvalidArgument) {
  const absl::StatusOr<Selection> s = SelectVariant(
      registry_, Transpose(DType::kFloat32, 64, 64), dev_, "gemm.cpu.openblas");
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(SelectCpuTest, ForcedValidNameIsUsed) {
  const absl::StatusOr<Selection> s =
      SelectVariant(registry_, Transpose(DType::kFloat16, 4096, 4096), dev_,
                    "transpose.cpu.naive");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->variant->name(), "transpose.cpu.naive");
  EXPECT_EQ(s->source, "forced");
}

TEST_F(SelectCpuTest, HeuristicPicksBlockedOverNaive) {
  for (DType t : kAllDTypes) {
    for (int64_t n : {64, 1000, 4096}) {
      const Problem p = Transpose(t, n, n);
      const absl::StatusOr<Selection> s = SelectVariant(registry_, p, dev_, "");
      ASSERT_TRUE(s.ok()) << s.status();
      EXPECT_EQ(s->variant->name(), "transpose.cpu.blocked") << Describe(p);
      EXPECT_EQ(s->source, "heuristic");
    }
  }
}

TEST_F(SelectCpuTest, EveryOpHasADefault) {
  const Problem problems[] = {
      Transpose(DType::kFloat32, 7, 9),
      GemmProblem{DType::kBFloat16, 1, 8, 8, 8},
      PermuteProblem{
          DType::kFloat16, {2, 3, 5, 7}, {0, 2, 3, 1}, LayoutKind::kNchwToNhwc},
      GeluLnProblem{DType::kFloat32, 4, 768},
  };
  for (const Problem& p : problems) {
    const absl::StatusOr<Selection> s = SelectVariant(registry_, p, dev_, "");
    ASSERT_TRUE(s.ok()) << Describe(p) << ": " << s.status();
    EXPECT_EQ(s->variant->op(), OpOf(p));
  }
}

TEST(Select, EmptyRegistryIsUnimplemented) {
  const VariantRegistry empty;
  const absl::StatusOr<Selection> s = SelectVariant(
      empty, Transpose(DType::kFloat32, 8, 8), CpuDeviceInfo(2), "");
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnimplemented);
}

TEST(Select, IneligibleVariantsAreSkipped) {
  VariantRegistry registry;
  registry.Add(std::make_unique<Float32OnlyTranspose<BackendKind::kCpu>>());
  const DeviceInfo dev = CpuDeviceInfo(2);
  EXPECT_EQ(SelectVariant(registry, Transpose(DType::kFloat16, 8, 8), dev, "")
                .status()
                .code(),
            absl::StatusCode::kUnimplemented);
  const absl::StatusOr<Selection> forced = SelectVariant(
      registry, Transpose(DType::kFloat16, 8, 8), dev, "transpose.test.f32");
  ASSERT_EQ(forced.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(forced.status().message(), HasSubstr("float32 only"));
  EXPECT_TRUE(
      SelectVariant(registry, Transpose(DType::kFloat32, 8, 8), dev, "").ok());
}

TEST(Select, VariantsOfAnotherBackendAreNotChosen) {
  VariantRegistry registry;
  registry.Add(std::make_unique<Float32OnlyTranspose<BackendKind::kCuda>>());
  const DeviceInfo dev = CpuDeviceInfo(2);
  EXPECT_EQ(SelectVariant(registry, Transpose(DType::kFloat32, 8, 8), dev, "")
                .status()
                .code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(SelectVariant(registry, Transpose(DType::kFloat32, 8, 8), dev,
                          "transpose.test.f32")
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace coalesce
