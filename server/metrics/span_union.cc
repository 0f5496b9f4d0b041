#include "server/metrics/span_union.h"

#include <algorithm>
#include <iterator>

namespace coalesce::metrics {

double SpanUnion::Add(double begin, double end) {
  if (!(end > begin)) return 0;
  // The first kept span that can touch [begin, end]: the last one beginning
  // at or before `begin`, if it reaches it.
  auto it = spans_.upper_bound(begin);
  if (it != spans_.begin() && std::prev(it)->second >= begin) --it;
  double covered = 0, merged_begin = begin, merged_end = end;
  while (it != spans_.end() && it->first <= end) {
    covered +=
        std::max(0.0, std::min(it->second, end) - std::max(it->first, begin));
    merged_begin = std::min(merged_begin, it->first);
    merged_end = std::max(merged_end, it->second);
    it = spans_.erase(it);
  }
  spans_.emplace(merged_begin, merged_end);
  latest_end_ = std::max(latest_end_, merged_end);
  while (spans_.begin()->second < latest_end_ - horizon_) {
    spans_.erase(spans_.begin());
  }
  return std::max(0.0, (end - begin) - covered);
}

}  // namespace coalesce::metrics
