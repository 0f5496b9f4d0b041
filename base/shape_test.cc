#include "base/shape.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "absl/strings/str_cat.h"

namespace coalesce {
namespace {

TEST(ShapeStringTest, ShortShapesInFull) {
  EXPECT_EQ(ShapeString({}), "[]");
  EXPECT_EQ(ShapeString({2, 3, 4}), "[2,3,4]");
}

TEST(ShapeStringTest, LongShapesAreBounded) {
  std::mt19937_64 rng(3);
  std::vector<int64_t> dims(2000);
  for (int64_t& d : dims) d = static_cast<int64_t>(rng() >> 1);
  const std::string s = ShapeString(dims);
  EXPECT_LT(s.size(), 200u);
  EXPECT_EQ(s.substr(s.size() - 11), "(rank 2000)");
  EXPECT_EQ(s.rfind(absl::StrCat("[", dims[0], ","), 0), 0u);
}

}  // namespace
}  // namespace coalesce
