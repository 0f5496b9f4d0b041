#include "kernels/selection/tuning_store.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <tuple>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace coalesce {
namespace {
constexpr absl::string_view kMagic = "coalesce-tuning 1";
}  // namespace

std::shared_ptr<const TunedChoice> TuningStore::Lookup(
    const std::string& key) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : it->second;
}

void TuningStore::Put(const std::string& key, TunedChoice choice) {
  auto entry = std::make_shared<const TunedChoice>(std::move(choice));
  absl::MutexLock lock(&mu_);
  entries_[key] = std::move(entry);
  generation_.fetch_add(1, std::memory_order_release);
}

size_t TuningStore::size() const {
  absl::ReaderMutexLock lock(&mu_);
  return entries_.size();
}

std::vector<std::string> TuningStore::Keys() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<std::string> keys;
  keys.reserve(entries_.size());
  for (const auto& [key, c] : entries_) keys.push_back(key);
  return keys;
}

std::string TuningStore::Serialize() const {
  std::string out =
      absl::StrCat(kMagic, "\nbuild ", id_.build, "\ndevice ", id_.device,
                   "\nvariants ", id_.variant_set, "\n");
  absl::ReaderMutexLock lock(&mu_);
  for (const auto& [key, c] : entries_) {
    std::vector<std::string> m;
    for (const auto& [name, s] : c->measured) {
      m.push_back(absl::StrFormat("%s=%.9g", name, s));
    }
    absl::StrAppend(&out, "entry ", key, "\t", c->winner, "\t",
                    absl::StrFormat("%.9g", c->seconds), "\t",
                    absl::StrJoin(m, ","), "\n");
  }
  return out;
}

absl::Status TuningStore::Parse(absl::string_view text) {
  std::vector<absl::string_view> lines =
      absl::StrSplit(text, '\n', absl::SkipEmpty());
  if (lines.size() < 4 || lines[0] != kMagic) {
    return absl::InvalidArgumentError("not a coalesce tuning file");
  }
  auto field = [&](int i, absl::string_view name,
                   absl::string_view* value) -> absl::Status {
    absl::string_view line = lines[i];
    if (!absl::ConsumePrefix(&line, name) || !absl::ConsumePrefix(&line, " ")) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", i + 1, ": expected '", name, " ...'"));
    }
    *value = line;
    return absl::OkStatus();
  };
  absl::string_view build, device, variants;
  for (auto [i, name, out] : {std::make_tuple(1, "build", &build),
                              std::make_tuple(2, "device", &device),
                              std::make_tuple(3, "variants", &variants)}) {
    absl::Status s = field(i, name, out);
    if (!s.ok()) return s;
  }
  if (build != "any" && build != id_.build) {
    return absl::FailedPreconditionError(absl::StrCat(
        "written by build ", build, ", this is build ", id_.build));
  }
  if (device != id_.device) {
    return absl::FailedPreconditionError(absl::StrCat(
        "measured on '", device, "', this device is '", id_.device, "'"));
  }
  std::map<std::string, std::shared_ptr<const TunedChoice>> parsed;
  for (size_t i = 4; i < lines.size(); ++i) {
    absl::string_view line = lines[i];
    std::vector<absl::string_view> f = absl::StrSplit(line, '\t');
    if (f.size() != 4 || !absl::ConsumePrefix(&f[0], "entry ")) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", i + 1, ": malformed entry"));
    }
    TunedChoice c;
    c.winner = std::string(f[1]);
    if (c.winner.empty() || !absl::SimpleAtod(f[2], &c.seconds)) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", i + 1, ": bad winner or time"));
    }
    for (absl::string_view m : absl::StrSplit(f[3], ',', absl::SkipEmpty())) {
      std::pair<absl::string_view, absl::string_view> kv =
          absl::StrSplit(m, absl::MaxSplits('=', 1));
      double s = 0;
      if (!absl::SimpleAtod(kv.second, &s)) {
        return absl::InvalidArgumentError(
            absl::StrCat("line ", i + 1, ": bad measurement '", m, "'"));
      }
      c.measured.emplace_back(std::string(kv.first), s);
    }
    parsed[std::string(f[0])] =
        std::make_shared<const TunedChoice>(std::move(c));
  }
  absl::MutexLock lock(&mu_);
  for (auto& [k, v] : parsed) entries_[k] = std::move(v);
  generation_.fetch_add(1, std::memory_order_release);
  return absl::OkStatus();
}

absl::Status TuningStore::Load(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return LoadDirectory(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) return absl::OkStatus();
    return absl::UnavailableError(
        absl::StrCat(path, ": ", std::strerror(errno)));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  absl::Status s = Parse(ss.str());
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
  }
  return absl::OkStatus();
}

absl::Status TuningStore::LoadDirectory(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    std::error_code type_ec;
    if (e.path().extension() == ".txt" && e.is_regular_file(type_ec)) {
      files.push_back(e.path().string());
    }
  }
  if (ec) {
    return absl::UnavailableError(absl::StrCat(dir, ": ", ec.message()));
  }
  std::sort(files.begin(), files.end());
  // The first file of this device loads; files of other devices are the
  // point of a folder, and a broken one is reported only if none loads.
  absl::Status broken;
  for (const std::string& f : files) {
    absl::Status s = Load(f);
    if (s.ok()) return s;
    if (!absl::IsFailedPrecondition(s) && broken.ok()) broken = s;
  }
  if (!broken.ok()) return broken;
  return absl::FailedPreconditionError(
      absl::StrCat(dir, ": no table there (*.txt, ", files.size(),
                   " found) was measured on '", id_.device, "'"));
}

absl::Status TuningStore::Save(const std::string& path) const {
  const std::string tmp = absl::StrCat(path, ".tmp");
  const std::string text = Serialize();
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) {
      return absl::UnavailableError(
          absl::StrCat(tmp, ": write failed: ", std::strerror(errno)));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::UnavailableError(
        absl::StrCat("rename ", tmp, " -> ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace coalesce
