// Tuned variant choices by selection key: the server's tuning cache (filled
// by online autotuning, persisted with --tuning_cache) and the shipped table
// (measured on a device by `coalesce tune`, loaded read-only). One file
// format for both:
//
//   coalesce-tuning 1
//   build <git sha, or "any" for a shipped table>
//   device <DeviceKey>
//   variants <VariantSetVersions of the writer>
//   entry <key> TAB <winner> TAB <seconds> TAB <name>=<seconds>,...
//
// A file whose header does not match this build (cache only) or device is
// foreign and is ignored whole; so is one with a malformed line. The
// variants line is a record, not a check: every key ends with its op's
// VariantSetVersion, so the entries of an op whose variants changed no
// longer match a lookup while the other ops' stay valid. Lookups are
// lock-shared and allocation-free (entries are immutable and shared);
// thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace coalesce {

struct TunedChoice {
  std::string winner;
  double seconds = 0;
  // Every variant timed for this key, fastest first.
  std::vector<std::pair<std::string, double>> measured;
};

struct TuningIdentity {
  std::string build;  // "any": valid for every build (shipped tables)
  std::string device;
  std::string variant_set;  // written to the variants line, not checked
};

class TuningStore {
 public:
  explicit TuningStore(TuningIdentity id) : id_(std::move(id)) {}

  std::shared_ptr<const TunedChoice> Lookup(const std::string& key) const;
  void Put(const std::string& key, TunedChoice choice);
  size_t size() const;
  std::vector<std::string> Keys() const;
  const TuningIdentity& identity() const { return id_; }
  // Changes with every Put and Parse (after the entries do): an answer
  // derived from the store stays valid while this reads the same.
  uint64_t generation() const {
    return generation_.load(std::memory_order_acquire);
  }

  // The file's text, and its parse: Parse leaves the store unchanged and
  // returns FAILED_PRECONDITION for a foreign header, INVALID_ARGUMENT for
  // a malformed file.
  std::string Serialize() const;
  absl::Status Parse(absl::string_view text);

  // A missing file loads as empty. A folder loads the first of its *.txt
  // files (in name order) written for this identity: one folder of shipped
  // tables serves every device model; FAILED_PRECONDITION when none is.
  // Save writes PATH.tmp and renames it over PATH, so a reader never sees a
  // half-written file.
  absl::Status Load(const std::string& path);
  absl::Status Save(const std::string& path) const;

 private:
  absl::Status LoadDirectory(const std::string& dir);

  TuningIdentity id_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<const TunedChoice>> entries_
      ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> generation_{0};
};

}  // namespace coalesce
