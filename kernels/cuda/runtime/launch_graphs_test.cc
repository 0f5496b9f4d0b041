#include "kernels/cuda/runtime/launch_graphs.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace coalesce::cuda {
namespace {

// Stand-ins: distinct addresses, never dereferenced. The graphs are null
// (no GPU here); destroying one is a harmless error.
const KernelVariant* Variant(uintptr_t i) {
  return reinterpret_cast<const KernelVariant*>(64 * (i + 1));
}
const void* Address(uintptr_t i) {
  return reinterpret_cast<const void*>(4096 * (i + 1));
}

LaunchKey Key(uintptr_t variant, int64_t rows, uintptr_t in, uintptr_t out) {
  return {Variant(variant),
          TransposeProblem{DType::kFloat32, 1, rows, 32},
          {Address(in), Address(out)}};
}

LaunchInfo Launch(int launches) {
  LaunchInfo l;
  l.launches = launches;
  return l;
}

TEST(LaunchGraphsTest, TheSecondSightingCaptures) {
  LaunchGraphs graphs(4);
  EXPECT_FALSE(graphs.ShouldCapture(Key(0, 8, 1, 2)));
  EXPECT_TRUE(graphs.ShouldCapture(Key(0, 8, 1, 2)));
  EXPECT_EQ(graphs.Find(Key(0, 8, 1, 2)), nullptr);
  // Another key is a first sighting of its own.
  EXPECT_FALSE(graphs.ShouldCapture(Key(0, 8, 1, 3)));
}

TEST(LaunchGraphsTest, AGraphServesOnlyItsVariantProblemAndAddresses) {
  LaunchGraphs graphs(4);
  graphs.Put(Key(0, 8, 1, 2), nullptr, Launch(3));
  const LaunchGraphs::Graph* g = graphs.Find(Key(0, 8, 1, 2));
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->launch.launches, 3);
  EXPECT_EQ(graphs.Find(Key(1, 8, 1, 2)), nullptr);  // variant
  EXPECT_EQ(graphs.Find(Key(0, 9, 1, 2)), nullptr);  // problem
  EXPECT_EQ(graphs.Find(Key(0, 8, 5, 2)), nullptr);  // an input
  EXPECT_EQ(graphs.Find(Key(0, 8, 1, 5)), nullptr);  // an output
  LaunchKey gelu = Key(0, 8, 1, 2);
  gelu.problem = GeluLnProblem{DType::kFloat32, 8, 32};
  EXPECT_EQ(graphs.Find(gelu), nullptr);
  GeluLnProblem other_eps{DType::kFloat32, 8, 32};
  other_eps.eps = 1e-6f;
  graphs.Put(gelu, nullptr, Launch(1));
  gelu.problem = other_eps;
  EXPECT_EQ(graphs.Find(gelu), nullptr);
}

TEST(LaunchGraphsTest, TheLeastRecentlyUsedGraphMakesRoom) {
  LaunchGraphs graphs(2);
  graphs.Put(Key(0, 1, 1, 2), nullptr, Launch(1));
  graphs.Put(Key(0, 2, 1, 2), nullptr, Launch(2));
  ASSERT_NE(graphs.Find(Key(0, 1, 1, 2)), nullptr);  // now the most recent
  graphs.Put(Key(0, 3, 1, 2), nullptr, Launch(3));
  EXPECT_EQ(graphs.size(), 2u);
  EXPECT_NE(graphs.Find(Key(0, 1, 1, 2)), nullptr);
  EXPECT_EQ(graphs.Find(Key(0, 2, 1, 2)), nullptr);
  EXPECT_NE(graphs.Find(Key(0, 3, 1, 2)), nullptr);
  // Put again on a key replaces its graph.
  graphs.Put(Key(0, 3, 1, 2), nullptr, Launch(7));
  EXPECT_EQ(graphs.size(), 2u);
  EXPECT_EQ(graphs.Find(Key(0, 3, 1, 2))->launch.launches, 7);
}

TEST(LaunchGraphsTest, ARefusedCallIsNotCapturedAgain) {
  LaunchGraphs graphs(4);
  EXPECT_FALSE(graphs.ShouldCapture(Key(0, 8, 1, 2)));
  ASSERT_TRUE(graphs.ShouldCapture(Key(0, 8, 1, 2)));
  graphs.Refuse(Key(0, 8, 1, 2));
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(graphs.ShouldCapture(Key(0, 8, 1, 2)));
  }
}

TEST(LaunchGraphsTest, SightingsAreForgottenPastFourTimesTheCapacity) {
  LaunchGraphs graphs(2);
  EXPECT_FALSE(graphs.ShouldCapture(Key(0, 100, 1, 2)));
  for (int64_t rows = 1; rows <= 8; ++rows) {
    EXPECT_FALSE(graphs.ShouldCapture(Key(0, rows, 1, 2)));
  }
  // Eight later keys pushed the first out: a first sighting again.
  EXPECT_FALSE(graphs.ShouldCapture(Key(0, 100, 1, 2)));
  EXPECT_TRUE(graphs.ShouldCapture(Key(0, 100, 1, 2)));
}

}  // namespace
}  // namespace coalesce::cuda
