#include "server/store/tensor_store.h"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/quote.h"
#include "base/status_macros.h"

namespace coalesce {
namespace {

constexpr size_t kMaxNameLength = 128;

// A handle the server picks: 128 bits from the kernel's CSPRNG, so that no
// client can guess another's handles from its own.
absl::StatusOr<std::string> RandomHandle() {
  uint64_t bits[2];
  size_t filled = 0;
  while (filled < sizeof(bits)) {
    const ssize_t n = getrandom(reinterpret_cast<char*>(bits) + filled,
                                sizeof(bits) - filled, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(
          absl::StrCat("getrandom failed: ", std::strerror(errno)));
    }
    filled += static_cast<size_t>(n);
  }
  return absl::StrFormat("t-%016x%016x", bits[0], bits[1]);
}

bool ValidName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxNameLength) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::shared_ptr<void>> BackendTensorMemory::Allocate(
    int64_t bytes) {
  return backend_->AllocateResident(bytes);
}

absl::StatusOr<std::shared_ptr<void>> BackendTensorMemory::AllocateOn(
    int device, int64_t bytes) {
  return backend_->AllocateResidentOn(device, bytes);
}

absl::Status BackendTensorMemory::CopyIn(void* dst, int64_t size,
                                         int64_t offset, const void* src,
                                         int64_t bytes) {
  return backend_->CopyToResident(dst, size, offset, src, bytes);
}

absl::Status BackendTensorMemory::CopyOut(const void* src, int64_t size,
                                          int64_t offset, void* dst,
                                          int64_t bytes) {
  return backend_->CopyFromResident(src, size, offset, dst, bytes);
}

std::unique_ptr<ResidentWriter> TensorMemory::OpenWriter(void* dst,
                                                         int64_t size) {
  return SynchronousResidentWriter(
      [this, dst, size](int64_t offset, const void* src, int64_t bytes) {
        return CopyIn(dst, size, offset, src, bytes);
      });
}

std::unique_ptr<ResidentWriter> BackendTensorMemory::OpenWriter(void* dst,
                                                                int64_t size) {
  return backend_->OpenResidentWriter(dst, size);
}

struct TensorStore::Ledger {
  absl::Mutex mu;
  absl::flat_hash_map<std::string, int64_t> used ABSL_GUARDED_BY(mu);
  int64_t total ABSL_GUARDED_BY(mu) = 0;

  void Release(const std::string& owner, int64_t bytes) {
    if (bytes == 0) return;
    absl::MutexLock lock(&mu);
    auto it = used.find(owner);
    it->second -= bytes;
    if (it->second == 0) used.erase(it);
    total -= bytes;
  }

  // data, whose reserved bytes the ledger releases once the last reference
  // is dropped and the memory freed, wherever and whenever that happens.
  static std::shared_ptr<void> ChargedUntilFreed(std::shared_ptr<Ledger> ledger,
                                                 std::string owner,
                                                 int64_t bytes,
                                                 std::shared_ptr<void> data) {
    void* const at = data.get();
    return std::shared_ptr<void>(
        at, [data = std::move(data), ledger = std::move(ledger),
             owner = std::move(owner), bytes](void*) mutable {
          data.reset();
          ledger->Release(owner, bytes);
        });
  }
};

TensorStore::Erased::~Erased() {
  for (const std::function<void()>& f : on_abandon) f();
  // Then the members go: the tensors, with any memory nothing else holds.
}

TensorStore::TensorStore(TensorStoreOptions options, TensorMemory* memory)
    : options_(std::move(options)),
      memory_(memory),
      ledger_(std::make_shared<Ledger>()) {}

TensorStore::~TensorStore() {
  std::map<Key, Entry> left;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    left.swap(tensors_);
  }
  if (sweeper_.joinable()) sweeper_.join();
  for (auto& [key, entry] : left) {
    if (!entry.committed) {
      entry.tensor->abandoned_.store(true, std::memory_order_release);
    }
  }
}

absl::StatusOr<std::shared_ptr<StoredTensor>> TensorStore::Create(
    absl::string_view owner, absl::string_view name, DType dtype,
    const Shape& shape, int64_t bytes, CreateOptions options) {
  if (!name.empty() && !ValidName(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("name: ", Quoted(name), " must be 1 to ", kMaxNameLength,
                     " characters of [A-Za-z0-9._-]"));
  }
  auto tensor = std::make_shared<StoredTensor>();
  tensor->owner = std::string(owner);
  tensor->dtype = dtype;
  tensor->shape = shape;
  tensor->bytes = bytes;
  Key key;
  {
    absl::MutexLock lock(&mu_);
    auto held = owners_.find(owner);
    const OwnerCounts counts =
        held == owners_.end() ? OwnerCounts() : held->second;
    if (options.upload && counts.uploads >= options_.max_uploads_per_owner) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "uploads: client '%s' has %d uploads in progress, its limit of %d "
          "(--max_uploads_per_client); finish or cancel one first",
          owner, counts.uploads, options_.max_uploads_per_owner));
    }
    if (static_cast<int64_t>(tensors_.size()) >= options_.max_tensors) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "tensor count: the server holds %d tensors, its limit "
          "(--max_tensors); retry once some are deleted or expire",
          tensors_.size()));
    }
    if (counts.tensors >= options_.max_tensors_per_owner) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "tensor count: client '%s' holds %d tensors, its limit of %d "
          "(--max_tensors_per_client); delete tensors or let them expire",
          owner, counts.tensors, options_.max_tensors_per_owner));
    }
    if (name.empty()) {
      do {
        COALESCE_ASSIGN_OR_RETURN(tensor->handle, RandomHandle());
      } while (handle_owners_.contains(tensor->handle));
    } else {
      tensor->handle = std::string(name);
      if (tensors_.count({tensor->owner, tensor->handle}) != 0) {
        return absl::AlreadyExistsError(absl::StrCat(
            "name: a tensor named ", Quoted(name), " already exists"));
      }
    }
    {
      // Reserve before allocating (outside the lock), so that concurrent
      // creators cannot together pass the quota.
      absl::MutexLock charge(&ledger_->mu);
      auto it = ledger_->used.find(owner);
      const int64_t used = it == ledger_->used.end() ? 0 : it->second;
      if (bytes > options_.quota_bytes - used) {
        return absl::ResourceExhaustedError(absl::StrFormat(
            "tensor quota: client '%s' holds %d bytes in tensors; %d more "
            "would exceed its quota of %d bytes (--tensor_quota_bytes); delete "
            "tensors or let them expire (a deleted tensor counts until the "
            "requests using it end)",
            owner, used, bytes, options_.quota_bytes));
      }
      if (bytes > options_.cap_bytes - ledger_->total) {
        return absl::ResourceExhaustedError(absl::StrFormat(
            "tensor cap: the server holds %d bytes in tensors; %d more would "
            "exceed its cap of %d bytes (--tensor_cap_bytes)",
            ledger_->total, bytes, options_.cap_bytes));
      }
      if (bytes > 0) {
        ledger_->used[tensor->owner] += bytes;
        ledger_->total += bytes;
      }
    }
    OwnerCounts& mine = owners_[tensor->owner];
    ++mine.tensors;
    if (options.upload) {
      ++mine.uploads;
      ++open_uploads_;
    }
    ++handle_owners_[tensor->handle];
    key = {tensor->owner, tensor->handle};
    tensors_[key] = Entry{tensor,
                          /*allocated=*/false,
                          /*committed=*/false,
                          options.upload,
                          std::move(options.on_abandon),
                          options_.now()};
  }
  absl::StatusOr<std::shared_ptr<void>> data =
      memory_->AllocateOn(options.device, bytes);
  if (!data.ok()) {
    ledger_->Release(tensor->owner, bytes);
    Erased erased;
    absl::MutexLock lock(&mu_);
    auto it = tensors_.find(key);
    if (it != tensors_.end() && it->second.tensor == tensor) {
      it->second.on_abandon = nullptr;  // the caller learns from the status
      EraseLocked(it, erased);
    }
    return data.status();
  }
  // Before the lock: if the tensor was deleted meanwhile, the memory is
  // freed once the lock is released.
  std::shared_ptr<void> charged = Ledger::ChargedUntilFreed(
      ledger_, tensor->owner, bytes, *std::move(data));
  absl::MutexLock lock(&mu_);
  auto it = tensors_.find(key);
  if (it == tensors_.end() || it->second.tensor != tensor) {
    return absl::NotFoundError(absl::StrCat(
        "tensor ", Quoted(tensor->handle), " was deleted while being created"));
  }
  tensor->data = std::move(charged);
  it->second.allocated = true;
  it->second.last_used = options_.now();
  return tensor;
}

absl::StatusOr<TensorStore::Entry*> TensorStore::AllocatedLocked(
    absl::string_view owner, absl::string_view handle) {
  auto it = tensors_.find({std::string(owner), std::string(handle)});
  if (it == tensors_.end() || !it->second.allocated) {
    return absl::NotFoundError(
        absl::StrCat("tensor ", Quoted(handle),
                     " was deleted or expired before it was complete"));
  }
  return &it->second;
}

absl::Status TensorStore::Commit(absl::string_view owner,
                                 absl::string_view handle) {
  absl::MutexLock lock(&mu_);
  COALESCE_ASSIGN_OR_RETURN(Entry* const entry, AllocatedLocked(owner, handle));
  if (!entry->committed) ++committed_tensors_;
  entry->committed = true;
  entry->on_abandon = nullptr;
  EndUploadLocked(*entry);
  entry->last_used = options_.now();
  return absl::OkStatus();
}

absl::Status TensorStore::Touch(absl::string_view owner,
                                absl::string_view handle) {
  absl::MutexLock lock(&mu_);
  COALESCE_ASSIGN_OR_RETURN(Entry* const entry, AllocatedLocked(owner, handle));
  entry->last_used = options_.now();
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const StoredTensor>> TensorStore::Find(
    absl::string_view owner, absl::string_view handle) {
  absl::MutexLock lock(&mu_);
  auto it = tensors_.find({std::string(owner), std::string(handle)});
  if (it == tensors_.end() || !it->second.committed) {
    return absl::NotFoundError(
        absl::StrCat("no tensor ", Quoted(handle),
                     " (never created, deleted, expired, or still being "
                     "uploaded)"));
  }
  it->second.last_used = options_.now();
  return std::shared_ptr<const StoredTensor>(it->second.tensor);
}

absl::StatusOr<int64_t> TensorStore::Delete(absl::string_view owner,
                                            absl::string_view handle) {
  size_t absent = 0;
  return DeleteAll(owner, {std::string(handle)}, &absent);
}

absl::StatusOr<int64_t> TensorStore::DeleteAll(
    absl::string_view owner, absl::Span<const std::string> handles,
    size_t* absent) {
  Erased erased;  // after the lock is released
  absl::MutexLock lock(&mu_);
  std::vector<std::map<Key, Entry>::iterator> found;
  found.reserve(handles.size());
  for (size_t i = 0; i < handles.size(); ++i) {
    auto it = tensors_.find({std::string(owner), handles[i]});
    if (it == tensors_.end()) {
      *absent = i;
      return absl::NotFoundError(
          absl::StrCat("no tensor ", Quoted(handles[i])));
    }
    found.push_back(it);
  }
  int64_t bytes = 0;
  for (auto it : found) {
    bytes += it->second.tensor->bytes;
    EraseLocked(it, erased);
  }
  return bytes;
}

void TensorStore::EraseLocked(std::map<Key, Entry>::iterator it,
                              Erased& erased) {
  Entry& entry = it->second;
  if (entry.committed) {
    --committed_tensors_;
  } else {
    entry.tensor->abandoned_.store(true, std::memory_order_release);
    if (entry.on_abandon)
      erased.on_abandon.push_back(std::move(entry.on_abandon));
  }
  EndUploadLocked(entry);
  auto owners = handle_owners_.find(it->first.second);
  if (--owners->second == 0) handle_owners_.erase(owners);
  auto owned = owners_.find(it->first.first);
  if (--owned->second.tensors == 0) owners_.erase(owned);
  erased.tensors.push_back(std::move(entry.tensor));
  tensors_.erase(it);
}

void TensorStore::EndUploadLocked(Entry& entry) {
  if (!entry.upload) return;
  entry.upload = false;
  --open_uploads_;
  --owners_.find(entry.tensor->owner)->second.uploads;
}

std::vector<TensorListing> TensorStore::List(absl::string_view owner) const {
  absl::MutexLock lock(&mu_);
  const absl::Time now = options_.now();
  std::vector<TensorListing> out;
  for (auto it = tensors_.lower_bound({std::string(owner), std::string()});
       it != tensors_.end() && it->first.first == owner; ++it) {
    if (!it->second.committed) continue;
    const StoredTensor& t = *it->second.tensor;
    out.push_back({t.handle, t.owner, t.dtype, t.shape, t.bytes,
                   absl::ToDoubleSeconds(now - it->second.last_used),
                   std::max(0, memory_->DeviceOf(t.data.get()))});
  }
  return out;
}

int64_t TensorStore::used_bytes(absl::string_view owner) const {
  absl::MutexLock lock(&ledger_->mu);
  auto it = ledger_->used.find(owner);
  return it == ledger_->used.end() ? 0 : it->second;
}

int64_t TensorStore::total_used_bytes() const {
  absl::MutexLock lock(&ledger_->mu);
  return ledger_->total;
}

TensorStore::Stats TensorStore::stats() const {
  Stats stats;
  {
    absl::MutexLock lock(&mu_);
    stats.tensors = committed_tensors_;
    stats.uploads = open_uploads_;
    stats.expired_tensors = expired_tensors_;
    stats.abandoned_uploads = abandoned_uploads_;
  }
  stats.bytes = total_used_bytes();
  return stats;
}

int TensorStore::SweepExpired() {
  if (options_.ttl == absl::InfiniteDuration() &&
      options_.upload_idle_timeout == absl::InfiniteDuration()) {
    return 0;
  }
  Erased erased;  // after the lock is released
  absl::MutexLock lock(&mu_);
  const absl::Time now = options_.now();
  int freed = 0;
  for (auto it = tensors_.begin(); it != tensors_.end();) {
    auto next = std::next(it);
    const Entry& entry = it->second;
    // An upload is measured from its last chunk; anything else, an op's
    // output still being computed included, from its last use.
    const absl::Duration limit =
        entry.upload ? options_.upload_idle_timeout : options_.ttl;
    if (entry.allocated && now - entry.last_used > limit) {
      ++(entry.upload ? abandoned_uploads_ : expired_tensors_);
      EraseLocked(it, erased);
      ++freed;
    }
    it = next;
  }
  return freed;
}

absl::Duration TensorStore::SweepPeriod(const TensorStoreOptions& options) {
  const absl::Duration shortest =
      std::min(options.ttl, options.upload_idle_timeout);
  if (shortest == absl::InfiniteDuration()) return absl::InfiniteDuration();
  return std::clamp(shortest / 10, absl::Milliseconds(100), absl::Seconds(10));
}

void TensorStore::StartSweeper(absl::Duration period) {
  sweeper_ = std::thread([this, period] {
    absl::MutexLock lock(&mu_);
    while (!mu_.AwaitWithTimeout(absl::Condition(&stopping_), period)) {
      mu_.Unlock();
      SweepExpired();
      mu_.Lock();
    }
  });
}

}  // namespace coalesce
