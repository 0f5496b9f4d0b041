// The metrics registry: exposition format (golden), escaping, histogram
// bucketing, and observations racing each other and a scrape.
#include "server/metrics/registry.h"

#include <atomic>
#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace coalesce::metrics {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(RegistryTest, GoldenExposition) {
  Registry registry;
  Family<Counter>& requests = registry.AddCounter(
      "test_requests_total", "Requests by op.\nSecond line \\ here.",
      {"op", "code"});
  requests.Add({"transpose", "OK"}).Increment(3);
  requests.Add({"gemm", "INVALID_ARGUMENT"}).Increment();
  registry.AddGauge("test_temperature_celsius", "A gauge without labels.", {})
      .Add({})
      .Set(-2.5);
  registry.AddGauge("test_unused", "A family with no children.", {"x"});
  Family<Histogram>& latency = registry.AddHistogram(
      "test_latency_seconds", "Latency.", {"op"}, {0.1, 1, 10});
  Histogram& h = latency.Add({"gemm"});
  h.Observe(0.1);  // upper bounds are inclusive
  h.Observe(0.5);
  h.Observe(20);
  registry.AddHistogram("test_bare_seconds", "Unlabelled.", {}, {1})
      .Add({})
      .Observe(0.25);

  EXPECT_EQ(registry.Serialize(),
            "# HELP test_requests_total Requests by op.\\nSecond line \\\\ "
            "here.\n"
            "# TYPE test_requests_total counter\n"
            "test_requests_total{op=\"gemm\",code=\"INVALID_ARGUMENT\"} 1\n"
            "test_requests_total{op=\"transpose\",code=\"OK\"} 3\n"
            "# HELP test_temperature_celsius A gauge without labels.\n"
            "# TYPE test_temperature_celsius gauge\n"
            "test_temperature_celsius -2.5\n"
            "# HELP test_latency_seconds Latency.\n"
            "# TYPE test_latency_seconds histogram\n"
            "test_latency_seconds_bucket{op=\"gemm\",le=\"0.1\"} 1\n"
            "test_latency_seconds_bucket{op=\"gemm\",le=\"1\"} 2\n"
            "test_latency_seconds_bucket{op=\"gemm\",le=\"10\"} 2\n"
            "test_latency_seconds_bucket{op=\"gemm\",le=\"+Inf\"} 3\n"
            "test_latency_seconds_sum{op=\"gemm\"} 20.6\n"
            "test_latency_seconds_count{op=\"gemm\"} 3\n"
            "# HELP test_bare_seconds Unlabelled.\n"
            "# TYPE test_bare_seconds histogram\n"
            "test_bare_seconds_bucket{le=\"1\"} 1\n"
            "test_bare_seconds_bucket{le=\"+Inf\"} 1\n"
            "test_bare_seconds_sum 0.25\n"
            "test_bare_seconds_count 1\n");
}

TEST(RegistryTest, LabelValuesAreEscaped) {
  Registry registry;
  registry.AddGauge("test_info", "Escaping.", {"device"})
      .Add({"a \"quoted\" back\\slash\nnewline"})
      .Set(1);
  EXPECT_THAT(registry.Serialize(),
              HasSubstr("test_info{device=\"a \\\"quoted\\\" back\\\\slash"
                        "\\nnewline\"} 1\n"));
  EXPECT_EQ(EscapeLabelValue("plain"), "plain");
}

TEST(RegistryTest, ValuesFormatAsPrometheusParsesThem) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(1), "1");
  EXPECT_EQ(FormatValue(0.1), "0.1");
  // Laid out as Go's strconv.FormatFloat(v, 'g', -1, 64).
  EXPECT_EQ(FormatValue(1e-4), "0.0001");
  EXPECT_EQ(FormatValue(2.5e-4), "0.00025");
  EXPECT_EQ(FormatValue(1e-5), "1e-05");
  EXPECT_EQ(FormatValue(-0.5), "-0.5");
  EXPECT_EQ(FormatValue(999999), "999999");
  EXPECT_EQ(FormatValue(1e6), "1e+06");
  EXPECT_EQ(FormatValue(4.8e12), "4.8e+12");
  EXPECT_EQ(FormatValue(123456789), "1.23456789e+08");
  EXPECT_EQ(FormatValue(1.5e300), "1.5e+300");
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
  // Round trip: the shortest form still parses back exactly.
  const double third = 1.0 / 3;
  EXPECT_EQ(std::stod(FormatValue(third)), third);
}

TEST(RegistryTest, AddReturnsTheSameChild) {
  Registry registry;
  Family<Counter>& f = registry.AddCounter("test_total", "T.", {"a"});
  Counter& first = f.Add({"x"});
  EXPECT_EQ(&f.Add({"x"}), &first);
  EXPECT_NE(&f.Add({"y"}), &first);
}

TEST(RegistryTest, CounterNeverFalls) {
  Registry registry;
  Counter& c = registry.AddCounter("test_total", "T.", {}).Add({});
  c.Increment(2);
  c.Increment(-1);
  c.Increment(std::nan(""));
  EXPECT_EQ(c.Value(), 2);
}

TEST(RegistryTest, GaugeMovesBothWays) {
  Registry registry;
  Gauge& g = registry.AddGauge("test_gauge", "T.", {}).Add({});
  g.Increment(3);
  g.Decrement();
  EXPECT_EQ(g.Value(), 2);
  g.Set(-7);
  EXPECT_EQ(g.Value(), -7);
}

TEST(RegistryTest, HistogramBuckets) {
  Histogram h(Histogram::Options{{1, 2, 4}});
  for (double v : {0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0,
                   std::numeric_limits<double>::infinity(), std::nan("")}) {
    h.Observe(v);
  }
  const Histogram::Snapshot s = h.Collect();
  EXPECT_THAT(s.cumulative, ::testing::ElementsAre(2, 4, 6, 8));
  EXPECT_EQ(s.count, 8u);  // NaN ignored
  EXPECT_TRUE(std::isinf(s.sum));
}

TEST(RegistryTest, ExponentialBuckets) {
  EXPECT_THAT(ExponentialBuckets(1, 10, 4),
              ::testing::ElementsAre(1, 10, 100, 1000));
}

TEST(RegistryTest, CollectHooksRunOnEveryScrape) {
  Registry registry;
  Gauge& g = registry.AddGauge("test_scrapes", "Scrapes.", {}).Add({});
  registry.AddCollectHook([&g] { g.Increment(); });
  EXPECT_THAT(registry.Serialize(), HasSubstr("test_scrapes 1\n"));
  EXPECT_THAT(registry.Serialize(), HasSubstr("test_scrapes 2\n"));
}

TEST(RegistryTest, EmptyFamiliesAreOmitted) {
  Registry registry;
  registry.AddCounter("test_total", "T.", {"a"});
  EXPECT_THAT(registry.Serialize(), Not(HasSubstr("test_total")));
}

// Observations from many threads lose nothing, and a scrape racing them
// always sees a consistent histogram (+Inf bucket == _count).
TEST(RegistryTest, ConcurrentObservationsAndScrapes) {
  Registry registry;
  Counter& counter = registry.AddCounter("test_total", "T.", {}).Add({});
  Gauge& gauge = registry.AddGauge("test_in_flight", "T.", {}).Add({});
  Family<Histogram>& family =
      registry.AddHistogram("test_seconds", "T.", {"t"}, {0.5, 1.5, 2.5});
  Histogram& shared = family.Add({"shared"});
  constexpr int kThreads = 8;
  constexpr int kPerThread = 50000;
  std::atomic<bool> done{false};
  std::thread scraper([&] {
    while (!done.load()) {
      const std::string text = registry.Serialize();
      // Cumulative buckets never decrease and end at the count.
      const size_t inf =
          text.find("test_seconds_bucket{t=\"shared\",le=\"+Inf\"}");
      const size_t count = text.find("test_seconds_count{t=\"shared\"}");
      if (inf == std::string::npos) continue;
      const std::string inf_value =
          text.substr(text.find(' ', inf) + 1,
                      text.find('\n', inf) - text.find(' ', inf) - 1);
      const std::string count_value =
          text.substr(text.find(' ', count) + 1,
                      text.find('\n', count) - text.find(' ', count) - 1);
      ASSERT_EQ(inf_value, count_value);
    }
  });
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      // Each thread also creates its own child while others observe.
      Histogram& own = family.Add({absl::StrCat("thread", t)});
      for (int i = 0; i < kPerThread; ++i) {
        gauge.Increment();
        counter.Increment();
        shared.Observe(i % 3);  // 0, 1, 2: one per finite bucket
        own.Observe(1);
        gauge.Decrement();
      }
    });
  }
  for (std::thread& w : workers) w.join();
  done.store(true);
  scraper.join();

  EXPECT_EQ(counter.Value(), kThreads * kPerThread);
  EXPECT_EQ(gauge.Value(), 0);
  const Histogram::Snapshot s = shared.Collect();
  EXPECT_EQ(s.count, uint64_t{kThreads} * kPerThread);
  // Sums of small integers are exact in a double.
  double want_sum = 0;
  for (int i = 0; i < kPerThread; ++i) want_sum += i % 3;
  EXPECT_EQ(s.sum, want_sum * kThreads);
  uint64_t want_cumulative[3] = {0, 0, 0};
  for (int i = 0; i < kPerThread; ++i) {
    for (int b = i % 3; b < 3; ++b) want_cumulative[b] += kThreads;
  }
  EXPECT_THAT(s.cumulative,
              ::testing::ElementsAre(want_cumulative[0], want_cumulative[1],
                                     want_cumulative[2], s.count));
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(family.Add({absl::StrCat("thread", t)}).Collect().count,
              uint64_t{kPerThread});
  }
}

TEST(RegistryDeathTest, RejectsBadNames) {
  Registry registry;
  EXPECT_DEATH(registry.AddGauge("bad-name", "T.", {}), "invalid metric name");
  EXPECT_DEATH(registry.AddCounter("test_requests", "T.", {}),
               "must end in _total");
  EXPECT_DEATH(registry.AddGauge("test_g", "T.", {"__reserved"}),
               "invalid label name");
  EXPECT_DEATH(registry.AddHistogram("test_h", "T.", {"le"}, {1}), "reserved");
  EXPECT_DEATH(registry.AddHistogram("test_h", "T.", {}, {2, 1}), "increasing");
  registry.AddGauge("test_twice", "T.", {});
  EXPECT_DEATH(registry.AddGauge("test_twice", "T.", {}), "registered twice");
  Family<Gauge>& f = registry.AddGauge("test_labels", "T.", {"a", "b"});
  EXPECT_DEATH(f.Add({"only one"}), "1 label values for 2 labels");
}

}  // namespace
}  // namespace coalesce::metrics
