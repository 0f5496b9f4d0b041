#include "kernels/core/permute.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace coalesce {
namespace {

using ::testing::ElementsAre;

TEST(CollapsePermutation, NchwToNhwcIsABatchedTranspose) {
  const CollapsedPermutation c =
      CollapsePermutation({2, 3, 5, 7}, {0, 2, 3, 1});
  EXPECT_THAT(c.in_shape, ElementsAre(2, 3, 35));
  EXPECT_THAT(c.perm, ElementsAre(0, 2, 1));
  int64_t batch, rows, cols;
  ASSERT_TRUE(AsBatchedTranspose(c, &batch, &rows, &cols));
  EXPECT_EQ(batch, 2);
  EXPECT_EQ(rows, 3);
  EXPECT_EQ(cols, 35);
}

TEST(CollapsePermutation, NhwcToNchwIsABatchedTranspose) {
  const CollapsedPermutation c =
      CollapsePermutation({2, 5, 7, 3}, {0, 3, 1, 2});
  EXPECT_THAT(c.in_shape, ElementsAre(2, 35, 3));
  EXPECT_THAT(c.perm, ElementsAre(0, 2, 1));
}

TEST(CollapsePermutation, IdentityCollapsesToRankOne) {
  const CollapsedPermutation c =
      CollapsePermutation({2, 3, 4, 5}, {0, 1, 2, 3});
  EXPECT_THAT(c.in_shape, ElementsAre(120));
  EXPECT_THAT(c.perm, ElementsAre(0));
  int64_t batch, rows, cols;
  EXPECT_FALSE(AsBatchedTranspose(c, &batch, &rows, &cols));
}

TEST(CollapsePermutation, AllOnesCollapsesToRankOne) {
  const CollapsedPermutation c = CollapsePermutation({1, 1, 1}, {2, 0, 1});
  EXPECT_THAT(c.in_shape, ElementsAre(1));
  EXPECT_THAT(c.perm, ElementsAre(0));
}

TEST(CollapsePermutation, SizeOneDimsAreDropped) {
  // [1, 7, 1, 5] -> [5, 1, 7, 1]: only 7 and 5 matter, and they swap.
  const CollapsedPermutation c =
      CollapsePermutation({1, 7, 1, 5}, {3, 2, 1, 0});
  EXPECT_THAT(c.in_shape, ElementsAre(7, 5));
  EXPECT_THAT(c.perm, ElementsAre(1, 0));
  // A transpose with a unit side is a copy.
  const CollapsedPermutation copy = CollapsePermutation({1, 7}, {1, 0});
  EXPECT_THAT(copy.in_shape, ElementsAre(7));
  EXPECT_THAT(copy.perm, ElementsAre(0));
}

TEST(CollapsePermutation, AosToSoaIsATranspose) {
  const CollapsedPermutation c = CollapsePermutation({1000, 3}, {1, 0});
  EXPECT_THAT(c.in_shape, ElementsAre(1000, 3));
  EXPECT_THAT(c.perm, ElementsAre(1, 0));
  int64_t batch, rows, cols;
  ASSERT_TRUE(AsBatchedTranspose(c, &batch, &rows, &cols));
  EXPECT_EQ(batch, 1);
  EXPECT_EQ(rows, 1000);
  EXPECT_EQ(cols, 3);
}

TEST(CollapsePermutation, KeepsInnermostRunsTogether) {
  // [a, b, c, d] -> [b, c, a, d]: (b c) stays adjacent; d stays innermost.
  const CollapsedPermutation c =
      CollapsePermutation({2, 3, 4, 5}, {1, 2, 0, 3});
  EXPECT_THAT(c.in_shape, ElementsAre(2, 12, 5));
  EXPECT_THAT(c.perm, ElementsAre(1, 0, 2));
}

TEST(CollapsePermutation, IrreduciblePermutationIsUnchanged) {
  const CollapsedPermutation c =
      CollapsePermutation({2, 3, 4, 5, 6}, {4, 1, 3, 0, 2});
  EXPECT_THAT(c.in_shape, ElementsAre(2, 3, 4, 5, 6));
  EXPECT_THAT(c.perm, ElementsAre(4, 1, 3, 0, 2));
}

TEST(PermutedShape, FollowsPerm) {
  EXPECT_THAT(PermutedShape({2, 3, 5, 7}, {0, 2, 3, 1}),
              ElementsAre(2, 5, 7, 3));
}

}  // namespace
}  // namespace coalesce
