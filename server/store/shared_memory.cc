#include "server/store/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/quote.h"
#include "base/status_macros.h"
#include "server/store/mapping_guard.h"

namespace coalesce {
namespace {

absl::Status AlreadyRegistered(absl::string_view name) {
  return absl::AlreadyExistsError(absl::StrCat(
      "name: a shared-memory region ", Quoted(name), " is already registered"));
}

}  // namespace

SharedMemoryRegion::SharedMemoryRegion(std::string owner, std::string name,
                                       std::string key, uint64_t offset,
                                       uint64_t byte_size, int fd,
                                       void* mapping, uint64_t mapping_bytes,
                                       MappingGuardSlot* guard_slot)
    : owner_(std::move(owner)),
      name_(std::move(name)),
      key_(std::move(key)),
      offset_(offset),
      byte_size_(byte_size),
      fd_(fd),
      mapping_(mapping),
      mapping_bytes_(mapping_bytes),
      guard_slot_(guard_slot) {}

SharedMemoryRegion::SharedMemoryRegion(std::string owner, std::string name,
                                       int64_t device_id, uint64_t byte_size,
                                       std::shared_ptr<void> device_memory)
    : owner_(std::move(owner)),
      name_(std::move(name)),
      offset_(0),
      byte_size_(byte_size),
      fd_(-1),
      mapping_(device_memory.get()),
      mapping_bytes_(byte_size),
      guard_slot_(nullptr),
      device_memory_(std::move(device_memory)),
      device_id_(device_id) {}

SharedMemoryRegion::~SharedMemoryRegion() {
  if (on_device()) return;  // device_memory_ closes its mapping
  UnguardMapping(guard_slot_);
  munmap(mapping_, mapping_bytes_);
  close(fd_);
}

absl::Status SharedMemoryRegion::CheckAlive() const {
  if (on_device()) return absl::OkStatus();
  if (MappingFaulted(guard_slot_)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shared-memory region ", Quoted(name_), ": its object ", Quoted(key_),
        " shrank while a request used it (the lost pages read as zeros "
        "here); unregister the region and register the object again"));
  }
  struct stat st;
  if (fstat(fd_, &st) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("shared-memory region ", Quoted(name_), " (key ",
                     Quoted(key_), "): fstat failed: ", std::strerror(errno)));
  }
  if (st.st_nlink == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shared-memory region ", Quoted(name_), ": its object ", Quoted(key_),
        " was unlinked; register a live object (and unregister this one)"));
  }
  if (static_cast<uint64_t>(st.st_size) < offset_ + byte_size_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shared-memory region ", Quoted(name_), ": its object ", Quoted(key_),
        " shrank to ", st.st_size, " bytes, short of the registered range [",
        offset_, ", ", offset_ + byte_size_, ")"));
  }
  return absl::OkStatus();
}

SharedMemoryRegistry::SharedMemoryRegistry(SharedMemoryOptions options)
    : options_(std::move(options)) {}

absl::Status SharedMemoryRegistry::CheckRoomLocked(
    absl::string_view owner) const {
  if (regions_.size() >= static_cast<size_t>(options_.max_regions)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "shared memory: ", regions_.size(),
        " regions are registered, the server's limit (--max_shm_regions)"));
  }
  auto it = per_owner_.find(owner);
  if (it != per_owner_.end() && it->second >= options_.max_regions_per_client) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "shared memory: client ", Quoted(owner), " holds ", it->second,
        " regions, its limit (--max_shm_regions_per_client)"));
  }
  return absl::OkStatus();
}

absl::Status SharedMemoryRegistry::Register(absl::string_view owner,
                                            absl::string_view name,
                                            absl::string_view key,
                                            uint64_t offset, uint64_t byte_size,
                                            std::optional<uid_t> caller_uid) {
  COALESCE_RETURN_IF_ERROR(CheckCaller(name, caller_uid));
  if (key.empty()) return absl::InvalidArgumentError("key: required");
  const absl::string_view prefix = options_.key_prefix;
  if (key.size() <= prefix.size() || key.substr(0, prefix.size()) != prefix ||
      key.find('/', 1) != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key: ", Quoted(key), " must be ", Quoted(prefix),
        " and a name with no further '/' (--client_shm_key_prefix)"));
  }
  if (byte_size == 0) {
    return absl::InvalidArgumentError("byte_size: must be > 0");
  }
  uint64_t end = 0;
  if (__builtin_add_overflow(offset, byte_size, &end) ||
      end > static_cast<uint64_t>(INT64_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "offset + byte_size: ", offset, " + ", byte_size, " overflows"));
  }
  std::pair<std::string, std::string> id(owner, name);
  {
    absl::MutexLock lock(&mu_);
    COALESCE_RETURN_IF_ERROR(CheckRoomLocked(owner));
    if (regions_.count(id) != 0) return AlreadyRegistered(name);
  }
  const std::string key_string(key);
  // No symlink in /dev/shm leads the server to another object.
  const int fd =
      shm_open(key_string.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0);
  if (fd < 0) {
    const int err = errno;
    const std::string message = absl::StrCat("key: shm_open(", Quoted(key),
                                             ") failed: ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(message)
                         : absl::InvalidArgumentError(message);
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return absl::InternalError(absl::StrCat("key: fstat of ", Quoted(key),
                                            " failed: ", std::strerror(err)));
  }
  // Before the size: another user's object reveals nothing.
  if (st.st_uid != *caller_uid) {
    close(fd);
    return absl::PermissionDeniedError(absl::StrCat(
        "key: the object ", Quoted(key),
        " does not belong to the caller's uid; register an object you own"));
  }
  if (static_cast<uint64_t>(st.st_size) < end) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        "byte_size: the range [", offset, ", ", end, ") lies past the end of ",
        Quoted(key), " (", st.st_size, " bytes)"));
  }
  void* mapping = mmap(nullptr, end, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (mapping == MAP_FAILED) {
    const int err = errno;
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        "key: mmap of ", Quoted(key), " failed: ", std::strerror(err)));
  }
  absl::StatusOr<MappingGuardSlot*> slot = GuardMapping(mapping, end);
  if (!slot.ok()) {
    munmap(mapping, end);
    close(fd);
    return slot.status();
  }
  return Insert(std::make_shared<const SharedMemoryRegion>(
      std::string(owner), std::string(name), key_string, offset, byte_size, fd,
      mapping, end, *slot));
}

absl::Status SharedMemoryRegistry::CheckCaller(
    absl::string_view name, std::optional<uid_t> caller_uid) const {
  if (!options_.allow) {
    return absl::FailedPreconditionError(
        "shared memory is off on this server (start it with "
        "--allow_client_shm)");
  }
  if (!caller_uid.has_value()) {
    return absl::PermissionDeniedError(
        "shared memory is registered only over the server's local socket "
        "(--unix_socket), where the kernel reports the caller's uid; this call "
        "came another way");
  }
  if (name.empty()) return absl::InvalidArgumentError("name: required");
  return absl::OkStatus();
}

absl::Status SharedMemoryRegistry::Insert(
    std::shared_ptr<const SharedMemoryRegion> region) {
  const std::string& owner = region->owner();
  absl::MutexLock lock(&mu_);
  // Again under the lock that inserts: concurrent registrations passed the
  // first check together.
  COALESCE_RETURN_IF_ERROR(CheckRoomLocked(owner));
  std::pair<std::string, std::string> id(owner, region->name());
  if (regions_.count(id) != 0) return AlreadyRegistered(region->name());
  regions_.emplace(std::move(id), std::move(region));
  ++per_owner_[owner];
  return absl::OkStatus();
}

absl::Status SharedMemoryRegistry::RegisterDevice(
    absl::string_view owner, absl::string_view name, int64_t device_id,
    uint64_t byte_size, std::optional<uid_t> caller_uid,
    absl::FunctionRef<
        absl::StatusOr<std::shared_ptr<void>>(int64_t* allocation_bytes)>
        open) {
  COALESCE_RETURN_IF_ERROR(CheckCaller(name, caller_uid));
  if (byte_size == 0) {
    return absl::InvalidArgumentError("byte_size: must be > 0");
  }
  {
    absl::MutexLock lock(&mu_);
    COALESCE_RETURN_IF_ERROR(CheckRoomLocked(owner));
    if (regions_.count({std::string(owner), std::string(name)}) != 0) {
      return AlreadyRegistered(name);
    }
  }
  int64_t allocation_bytes = 0;
  COALESCE_ASSIGN_OR_RETURN(std::shared_ptr<void> memory,
                            open(&allocation_bytes));
  if (byte_size >
      static_cast<uint64_t>(std::max<int64_t>(allocation_bytes, 0))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "byte_size: ", byte_size, ", but the exported allocation has ",
        allocation_bytes, " bytes"));
  }
  return Insert(std::make_shared<const SharedMemoryRegion>(
      std::string(owner), std::string(name), device_id, byte_size,
      std::move(memory)));
}

absl::Status SharedMemoryRegistry::Unregister(absl::string_view owner,
                                              absl::string_view name,
                                              bool on_device) {
  absl::MutexLock lock(&mu_);
  auto it = regions_.find({std::string(owner), std::string(name)});
  if (it == regions_.end() || it->second->on_device() != on_device) {
    return absl::NotFoundError(
        absl::StrCat("name: no ", on_device ? "CUDA" : "system",
                     " shared-memory region ", Quoted(name)));
  }
  auto count = per_owner_.find(owner);
  if (count != per_owner_.end() && --count->second == 0) {
    per_owner_.erase(count);
  }
  regions_.erase(it);
  return absl::OkStatus();
}

SharedMemoryRegistry::Stats SharedMemoryRegistry::stats() const {
  Stats stats;
  absl::MutexLock lock(&mu_);
  for (const auto& [key, region] : regions_) {
    const auto bytes = static_cast<int64_t>(region->byte_size());
    if (region->on_device()) {
      ++stats.cuda_regions;
      stats.cuda_bytes += bytes;
    } else {
      ++stats.system_regions;
      stats.system_bytes += bytes;
    }
  }
  return stats;
}

std::vector<SharedMemoryListing> SharedMemoryRegistry::List(
    absl::string_view owner) const {
  absl::MutexLock lock(&mu_);
  std::vector<SharedMemoryListing> out;
  for (auto it = regions_.lower_bound({std::string(owner), std::string()});
       it != regions_.end() && it->first.first == owner; ++it) {
    const SharedMemoryRegion& r = *it->second;
    out.push_back({r.name(), r.key(), r.offset(), r.byte_size(), r.on_device(),
                   r.device_id()});
  }
  return out;
}

absl::StatusOr<std::shared_ptr<const SharedMemoryRegion>>
SharedMemoryRegistry::Find(absl::string_view owner,
                           absl::string_view name) const {
  absl::MutexLock lock(&mu_);
  auto it = regions_.find({std::string(owner), std::string(name)});
  if (it == regions_.end()) {
    return absl::NotFoundError(absl::StrCat("no shared-memory region ",
                                            Quoted(name), " is registered"));
  }
  return it->second;
}

}  // namespace coalesce
