#include "kernels/cuda/gemm/cublaslt_pick.h"

#include <gtest/gtest.h>

#include <vector>

namespace coalesce::cuda {
namespace {

TEST(LtAvoidsSplitKTest, Float32WithoutTf32UpToTheBound) {
  EXPECT_TRUE(LtAvoidsSplitK(DType::kFloat32, false, 1));
  EXPECT_TRUE(LtAvoidsSplitK(DType::kFloat32, false, kLtNoSplitMaxK));
  EXPECT_FALSE(LtAvoidsSplitK(DType::kFloat32, false, kLtNoSplitMaxK + 1));
  EXPECT_FALSE(LtAvoidsSplitK(DType::kFloat32, true, 64));
  EXPECT_FALSE(LtAvoidsSplitK(DType::kFloat16, false, 64));
  EXPECT_FALSE(LtAvoidsSplitK(DType::kBFloat16, false, 64));
}

TEST(PickLtAlgorithmTest, TheFirstUnlessSplitsAreAvoided) {
  const std::vector<LtOffer> offers = {{264, 4326599}, {1, 0}, {33, 15008}};
  EXPECT_EQ(PickLtAlgorithm(offers, /*avoid_split=*/false), 0);
  EXPECT_EQ(PickLtAlgorithm({{1, 0}}, /*avoid_split=*/true), 0);
}

// 64x137x64 with B transposed on the H200: the unsplit algorithm was the
// heuristic's sixth, and the first unsplit one is taken even where a split
// one needs less workspace.
TEST(PickLtAlgorithmTest, TheFirstUnsplitOne) {
  const std::vector<LtOffer> offers = {
      {88, 4326603}, {16, 655859}, {44, 4326075}, {33, 697199},
      {9, 368999},   {1, 0},       {1, 0},        {33, 70144}};
  EXPECT_EQ(PickLtAlgorithm(offers, true), 5);
  EXPECT_EQ(PickLtAlgorithm({{33, 100}, {0, 5000}}, true), 1);
}

// 7x134x128 on the H200: every algorithm offered splits K; the first of the
// least workspace is taken.
TEST(PickLtAlgorithmTest, AllSplitTheFirstOfTheLeastWorkspace) {
  const std::vector<LtOffer> offers = {
      {264, 4326599}, {264, 3245787}, {132, 15008},  {105, 1086679},
      {33, 15008},    {528, 8653031}, {132, 1353179}};
  EXPECT_EQ(PickLtAlgorithm(offers, true), 2);
}

}  // namespace
}  // namespace coalesce::cuda
