#include "server/metrics/span_union.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <utility>
#include <vector>

namespace coalesce::metrics {
namespace {

// The union's length by sorting all spans at once.
double UnionLength(std::vector<std::pair<double, double>> spans) {
  std::sort(spans.begin(), spans.end());
  double total = 0, begin = 0, end = 0;
  bool open = false;
  for (const auto& [b, e] : spans) {
    if (!(e > b)) continue;
    if (open && b <= end) {
      end = std::max(end, e);
      continue;
    }
    if (open) total += end - begin;
    begin = b;
    end = e;
    open = true;
  }
  return open ? total + end - begin : total;
}

TEST(SpanUnionTest, CountsEachMomentOnce) {
  SpanUnion u(100);
  EXPECT_DOUBLE_EQ(u.Add(0, 4), 4);
  EXPECT_DOUBLE_EQ(u.Add(2, 6), 2);    // overlaps the first by 2
  EXPECT_DOUBLE_EQ(u.Add(1, 3), 0);    // inside
  EXPECT_DOUBLE_EQ(u.Add(8, 9), 1);    // apart
  EXPECT_DOUBLE_EQ(u.Add(-1, 10), 4);  // covers both, fills the gaps
  EXPECT_EQ(u.kept(), 1u);
  EXPECT_DOUBLE_EQ(u.Add(5, 5), 0);
  EXPECT_DOUBLE_EQ(u.Add(7, 6), 0);
}

// Spans from several streams, overlapping, arriving out of order by less
// than the horizon: the sum of what Add returns is the union's length.
TEST(SpanUnionTest, RandomOverlappingSpansOutOfOrder) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    std::uniform_real_distribution<double> gap(0, 20e-6), length(1e-6, 40e-6);
    std::vector<std::pair<double, double>> spans;
    double t = 1000.0 + trial;  // seconds on some device's clock
    for (int i = 0; i < 5000; ++i) {
      t += gap(rng);
      spans.emplace_back(t, t + length(rng));
    }
    // Arrival order: by end, then shuffled within windows of 16.
    std::vector<std::pair<double, double>> arrivals = spans;
    std::sort(arrivals.begin(), arrivals.end(),
              [](const auto& a, const auto& b) { return a.second < b.second; });
    for (size_t i = 0; i < arrivals.size(); i += 16) {
      std::shuffle(arrivals.begin() + i,
                   arrivals.begin() + std::min(arrivals.size(), i + 16), rng);
    }
    SpanUnion u(0.01);
    double sum = 0, added = 0;
    for (const auto& [b, e] : arrivals) {
      sum += e - b;
      added += u.Add(b, e);
    }
    const double want = UnionLength(spans);
    EXPECT_NEAR(added, want, 1e-9) << "trial " << trial;
    EXPECT_LT(want, sum) << "trial " << trial;  // the spans do overlap
    // Only the horizon's worth of spans is kept.
    EXPECT_LT(u.kept(), 1000u);
  }
}

// Past the horizon nothing is kept to compare with: a very late span counts
// whole.
TEST(SpanUnionTest, SpansBehindTheHorizonAreForgotten) {
  SpanUnion u(0.1);
  EXPECT_DOUBLE_EQ(u.Add(0, 1), 1);
  EXPECT_DOUBLE_EQ(u.Add(2, 3), 1);
  EXPECT_EQ(u.kept(), 1u);
  EXPECT_DOUBLE_EQ(u.Add(0.5, 0.75), 0.25);
}

}  // namespace
}  // namespace coalesce::metrics
