#include "kernels/cuda/gemm/cublaslt_pick.h"

#include <gtest/gtest.h>

#include <vector>

namespace coalesce::cuda {
namespace {

TEST(LtAvoidsSplitKTest, Float32WithoutTf32UpToTheBound) {
  const LtOffer narrow{18, 100, 0.1f};
  EXPECT_TRUE(LtAvoidsSplitK(DType::kFloat32, false, 1, narrow));
  EXPECT_TRUE(LtAvoidsSplitK(DType::kFloat32, false, kLtNoSplitMaxK, narrow));
  EXPECT_FALSE(
      LtAvoidsSplitK(DType::kFloat32, false, kLtNoSplitMaxK + 1, narrow));
  EXPECT_FALSE(LtAvoidsSplitK(DType::kFloat32, true, 64, narrow));
  EXPECT_FALSE(LtAvoidsSplitK(DType::kFloat16, false, 64, narrow));
  EXPECT_FALSE(LtAvoidsSplitK(DType::kBFloat16, false, 64, narrow));
}

// 4755x2x137 on an H100: the first algorithm splits K 18 times into 3.4
// waves (24.6 us) where an unsplit one took 8.1 us.
TEST(LtAvoidsSplitKTest, UpToTheWideBoundWhereTheFirstFillsWaves) {
  const LtOffer wide{18, 684720, 3.39f};
  const LtOffer at_bound{18, 684720, kLtNoSplitMinWaves};
  const LtOffer narrow{18, 684720, 0.1f};
  EXPECT_TRUE(LtAvoidsSplitK(DType::kFloat32, false, 137, wide));
  EXPECT_TRUE(LtAvoidsSplitK(DType::kFloat32, false, 137, at_bound));
  EXPECT_FALSE(LtAvoidsSplitK(DType::kFloat32, false, 137, narrow));
  EXPECT_TRUE(LtAvoidsSplitK(DType::kFloat32, false, kLtWideNoSplitMaxK, wide));
  EXPECT_FALSE(
      LtAvoidsSplitK(DType::kFloat32, false, kLtWideNoSplitMaxK + 1, wide));
  EXPECT_FALSE(LtAvoidsSplitK(DType::kFloat32, true, 137, wide));
  EXPECT_FALSE(LtAvoidsSplitK(DType::kBFloat16, false, 137, wide));
}

// 64x168x136 with B transposed on an H100: the first algorithm splits K 88
// times (under 2 steps each) in 0.12 waves, 28.9 us against 6.8 unsplit.
TEST(LtAvoidsSplitKTest, UpToTheWideBoundWhereSplitsGetUnderTwoSteps) {
  EXPECT_TRUE(
      LtAvoidsSplitK(DType::kFloat32, false, 136, {88, 4326603, 0.12f}));
  EXPECT_TRUE(
      LtAvoidsSplitK(DType::kFloat32, false, 175, {88, 4326603, 0.12f}));
  EXPECT_FALSE(
      LtAvoidsSplitK(DType::kFloat32, false, 176, {88, 4326603, 0.12f}));
  EXPECT_FALSE(LtAvoidsSplitK(DType::kFloat32, false, 136, {1, 0, 0.0f}));
  EXPECT_FALSE(LtAvoidsSplitK(DType::kFloat32, false, 1000, {200, 0, 0.0f}));
}

// 7x96x2048 on an H100: the first algorithm splits K 264 ways (53.4 us)
// where the 33-split one took 9.0 us; 264 splits come at every K.
TEST(LtAvoidsSplitKTest, AtAnyKWhereTheFirstSplitsPastTheBound) {
  const LtOffer absurd{264, 2163379, 0.15f};
  EXPECT_TRUE(LtAvoidsSplitK(DType::kFloat32, false, 2048, absurd));
  EXPECT_TRUE(LtAvoidsSplitK(DType::kFloat32, false, 100000, absurd));
  EXPECT_TRUE(LtAvoidsSplitK(DType::kFloat32, false, 2048,
                             {kLtNoSplitMinFirstSplits, 0, 0.0f}));
  EXPECT_FALSE(LtAvoidsSplitK(DType::kFloat32, false, 2048,
                              {kLtNoSplitMinFirstSplits - 1, 0, 0.0f}));
  EXPECT_FALSE(LtAvoidsSplitK(DType::kFloat32, true, 2048, absurd));
  EXPECT_FALSE(LtAvoidsSplitK(DType::kBFloat16, false, 2048, absurd));
}

TEST(LtMayAvoidSplitKTest, AsksForSeveralAlgorithmsInFloat32WithoutTf32) {
  EXPECT_TRUE(LtMayAvoidSplitK(DType::kFloat32, false));
  EXPECT_FALSE(LtMayAvoidSplitK(DType::kFloat32, true));
  EXPECT_FALSE(LtMayAvoidSplitK(DType::kFloat16, false));
  EXPECT_FALSE(LtMayAvoidSplitK(DType::kBFloat16, false));
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

// 7x134x128 on the H200 (the H100 offers the same): every algorithm offered
// splits K; the first of the fewest splits is taken (on an H100: 7.07 us,
// the fastest, against 55.6 for the first).
TEST(PickLtAlgorithmTest, AllSplitTheFirstOfTheFewestSplits) {
  const std::vector<LtOffer> offers = {
      {264, 4326599}, {264, 3245787}, {132, 15008},  {105, 1086679},
      {33, 15008},    {528, 8653031}, {132, 1353179}};
  EXPECT_EQ(PickLtAlgorithm(offers, true), 4);
  EXPECT_EQ(PickLtAlgorithm({{8, 10}, {4, 900}, {4, 5}}, true), 1);
}

// 16x192x512 on an H100: the least workspace (48 bytes) is a 264-split
// algorithm that took 110.5 us; the 33-split one took 7.7.
TEST(PickLtAlgorithmTest, NotTheLeastWorkspace) {
  const std::vector<LtOffer> offers = {
      {264, 4326599}, {264, 3245787}, {132, 196608}, {105, 1303983},
      {33, 196608},   {528, 8653031}, {264, 48},     {132, 1623783}};
  EXPECT_EQ(PickLtAlgorithm(offers, true), 4);
}

}  // namespace
}  // namespace coalesce::cuda
