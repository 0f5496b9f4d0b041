// A map of at most `capacity` entries that drops its least recently used
// entry to make room: for caches keyed by what clients send (exact shapes),
// which must not grow without bound however many distinct keys arrive.
// Values are shared, so that an entry dropped while a caller still uses it
// lives until that caller lets go. Keys are found through a std::map by
// default; Index may be a hash map of K to LruEntries<K, V>::iterator
// instead, for keys that hash but do not order. Not thread-safe: callers
// lock.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <utility>

namespace coalesce {

// The entries, most recently used first.
template <typename K, typename V>
using LruEntries = std::list<std::pair<K, std::shared_ptr<V>>>;

template <typename K, typename V,
          typename Index = std::map<K, typename LruEntries<K, V>::iterator>>
class LruCache {
 public:
  // capacity below 1 means 1.
  explicit LruCache(size_t capacity)
      : capacity_(std::max<size_t>(capacity, 1)) {}

  // key's entry, which becomes the most recently used; null when absent.
  std::shared_ptr<V> Find(const K& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second);
    return it->second->second;
  }

  // Sets key's entry, the most recently used; when the cache is full and
  // key is new, the least recently used entry is dropped first.
  void Put(const K& key, std::shared_ptr<V> value) {
    auto it = index_.find(key);
    if (it != index_.end()) {
      it->second->second = std::move(value);
      order_.splice(order_.begin(), order_, it->second);
      return;
    }
    if (order_.size() >= capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
      ++evictions_;
    }
    order_.emplace_front(key, std::move(value));
    index_.emplace(key, order_.begin());
  }

  void Clear() {
    index_.clear();
    order_.clear();
  }

  size_t size() const { return order_.size(); }
  size_t capacity() const { return capacity_; }
  // Entries dropped to make room so far.
  uint64_t evictions() const { return evictions_; }

 private:
  const size_t capacity_;
  LruEntries<K, V> order_;
  Index index_;
  uint64_t evictions_ = 0;
};

}  // namespace coalesce
