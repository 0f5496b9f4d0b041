// The union of time spans, as they come: Add returns how much of a span
// no span before it covered, so that a counter incremented by it counts
// each moment once however many spans overlap there (a device's kernels
// on several streams). Spans are kept for a horizon behind the latest end
// seen, which must exceed how late a span can arrive after later-ending
// ones; a span reaching further back than that is counted against what is
// kept. Not thread-safe: callers lock.
#pragma once

#include <cstddef>
#include <limits>
#include <map>

namespace coalesce::metrics {

class SpanUnion {
 public:
  explicit SpanUnion(double horizon_seconds) : horizon_(horizon_seconds) {}

  // [begin, end] in seconds; a span with end <= begin adds nothing.
  double Add(double begin, double end);

  // Disjoint spans kept (for tests).
  size_t kept() const { return spans_.size(); }

 private:
  const double horizon_;
  double latest_end_ = -std::numeric_limits<double>::infinity();
  std::map<double, double> spans_;  // begin -> end, disjoint
};

}  // namespace coalesce::metrics
