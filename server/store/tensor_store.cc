#include "server/store/tensor_store.h"

#include <sys/random.h>

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

TensorStore::TensorStore(TensorStoreOptions options, TensorMemory* memory)
    : options_(std::move(options)), memory_(memory) {}

TensorStore::~TensorStore() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (sweeper_.joinable()) sweeper_.join();
}

absl::StatusOr<std::shared_ptr<StoredTensor>> TensorStore::Create(
    absl::string_view owner, absl::string_view name, DType dtype,
    const Shape& shape, int64_t bytes) {
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
  {
    absl::MutexLock lock(&mu_);
    const int64_t used = used_.contains(owner) ? used_.at(owner) : 0;
    if (bytes > options_.quota_bytes - used) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "tensor quota: client '%s' holds %d bytes in tensors; %d more would "
          "exceed its quota of %d bytes (--tensor_quota_bytes); delete "
          "tensors or let them expire",
          owner, used, bytes, options_.quota_bytes));
    }
    if (bytes > options_.cap_bytes - total_used_) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "tensor cap: the server holds %d bytes in tensors; %d more would "
          "exceed its cap of %d bytes (--tensor_cap_bytes)",
          total_used_, bytes, options_.cap_bytes));
    }
    if (name.empty()) {
      do {
        COALESCE_ASSIGN_OR_RETURN(tensor->handle, RandomHandle());
      } while (tensors_.count(tensor->handle) != 0);
    } else {
      tensor->handle = std::string(name);
      if (tensors_.count(tensor->handle) != 0) {
        return absl::AlreadyExistsError(absl::StrCat(
            "name: a tensor named ", Quoted(name), " already exists"));
      }
    }
    // Reserve before allocating (outside the lock), so that concurrent
    // creators cannot together pass the quota.
    used_[tensor->owner] += bytes;
    total_used_ += bytes;
    tensors_[tensor->handle] =
        Entry{tensor->owner, bytes, nullptr, false, options_.now()};
  }
  absl::StatusOr<std::shared_ptr<void>> data = memory_->Allocate(bytes);
  absl::MutexLock lock(&mu_);
  auto it = tensors_.find(tensor->handle);
  if (!data.ok()) {
    if (it != tensors_.end() && it->second.tensor == nullptr) EraseLocked(it);
    return data.status();
  }
  if (it == tensors_.end()) {
    return absl::NotFoundError(absl::StrCat(
        "tensor ", Quoted(tensor->handle), " was deleted while being created"));
  }
  tensor->data = std::move(*data);
  it->second.tensor = tensor;
  return tensor;
}

absl::Status TensorStore::Commit(absl::string_view handle) {
  absl::MutexLock lock(&mu_);
  auto it = tensors_.find(std::string(handle));
  if (it == tensors_.end() || it->second.tensor == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("tensor ", Quoted(handle),
                     " was deleted or expired before it was complete"));
  }
  it->second.committed = true;
  it->second.last_used = options_.now();
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const StoredTensor>> TensorStore::Find(
    absl::string_view handle) {
  absl::MutexLock lock(&mu_);
  auto it = tensors_.find(std::string(handle));
  if (it == tensors_.end() || !it->second.committed) {
    return absl::NotFoundError(
        absl::StrCat("no tensor ", Quoted(handle),
                     " (never created, deleted, expired, or still being "
                     "uploaded)"));
  }
  it->second.last_used = options_.now();
  return std::shared_ptr<const StoredTensor>(it->second.tensor);
}

absl::StatusOr<int64_t> TensorStore::Delete(absl::string_view handle) {
  absl::MutexLock lock(&mu_);
  auto it = tensors_.find(std::string(handle));
  if (it == tensors_.end()) {
    return absl::NotFoundError(absl::StrCat("no tensor ", Quoted(handle)));
  }
  const int64_t bytes = it->second.bytes;
  EraseLocked(it);
  return bytes;
}

void TensorStore::EraseLocked(std::map<std::string, Entry>::iterator it) {
  auto used = used_.find(it->second.owner);
  used->second -= it->second.bytes;
  if (used->second == 0) used_.erase(used);
  total_used_ -= it->second.bytes;
  tensors_.erase(it);
}

std::vector<TensorListing> TensorStore::List(absl::string_view owner) const {
  absl::MutexLock lock(&mu_);
  const absl::Time now = options_.now();
  std::vector<TensorListing> out;
  for (const auto& [handle, entry] : tensors_) {
    if (!entry.committed || entry.tensor->owner != owner) continue;
    const StoredTensor& t = *entry.tensor;
    out.push_back({t.handle, t.owner, t.dtype, t.shape, t.bytes,
                   absl::ToDoubleSeconds(now - entry.last_used)});
  }
  return out;
}

int64_t TensorStore::used_bytes(absl::string_view owner) const {
  absl::MutexLock lock(&mu_);
  auto it = used_.find(owner);
  return it == used_.end() ? 0 : it->second;
}

int64_t TensorStore::total_used_bytes() const {
  absl::MutexLock lock(&mu_);
  return total_used_;
}

int TensorStore::SweepExpired() {
  if (options_.ttl == absl::InfiniteDuration()) return 0;
  absl::MutexLock lock(&mu_);
  const absl::Time now = options_.now();
  int freed = 0;
  for (auto it = tensors_.begin(); it != tensors_.end();) {
    auto next = std::next(it);
    // Uncommitted tensors expire too: an upload stalled for a whole TTL.
    if (it->second.tensor != nullptr &&
        now - it->second.last_used > options_.ttl) {
      EraseLocked(it);
      ++freed;
    }
    it = next;
  }
  return freed;
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
