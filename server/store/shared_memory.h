// System shared memory in the style of Triton's extension: a client on the
// same host creates a POSIX shared-memory object (shm_open), registers a
// byte range of it under a name, and then names that range in requests
// instead of sending tensor bytes. The server maps the object read-write
// once, at registration, and kernels read inputs from and write outputs
// into the mapping directly: no copy of the tensor bytes on the server.
//
// Every use checks the object again (one fstat): a region whose object was
// unlinked or truncated below the registered range answers
// FAILED_PRECONDITION instead of the SIGBUS that touching it would raise.
// A client that truncates the object while a request is using it no longer
// crashes the server either: the mapping is guarded (mapping_guard.h), the
// lost pages read as zeros, and the request, checked again when its kernel
// is done, fails like every later use of the region.
//
// Like Triton's --allow-client-shm, it is off unless the server is started
// with it on, serves only objects whose key starts with a configured prefix
// (the server maps no object that was not made for it), and bounds the
// regions registered at once, in all and per client: each holds an open
// descriptor (one fstat per use) and a guarded mapping.
//
// Regions belong to the client that registered them: names are per client,
// and another client's region is as absent as one never registered. A region
// is registered only over the server's local socket, where the kernel
// reports the caller's uid, and only for an object that uid owns: a client
// cannot make the server map an object of another user, even one whose key
// it knows.
//
// CUDA shared memory (Triton's CUDA shared-memory extension) shares the
// registry, its names, gate and limits: a client on the same host exports
// device memory with cudaIpcGetMemHandle and registers the handle; the
// backend maps it (Backend::OpenIpcMemory) and kernels use it in place,
// like a stored tensor's device memory. Such a region cannot shrink.
//
// Thread-safety: SharedMemoryRegistry is thread-safe. A region stays mapped
// while any request holds its shared_ptr, so Unregister never unmaps memory
// a kernel is using.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "server/store/mapping_guard.h"

namespace coalesce {

// One registered, mapped region. Immutable; unmapped when the last
// reference goes.
class SharedMemoryRegion {
 public:
  // Takes fd, the mapping and its guard slot, and releases them when
  // destroyed.
  SharedMemoryRegion(std::string owner, std::string name, std::string key,
                     uint64_t offset, uint64_t byte_size, int fd, void* mapping,
                     uint64_t mapping_bytes, MappingGuardSlot* guard_slot);
  // A CUDA IPC region: [0, byte_size) of device_memory (mapped by the
  // backend, closed when the last reference goes), on device device_id.
  SharedMemoryRegion(std::string owner, std::string name, int64_t device_id,
                     uint64_t byte_size, std::shared_ptr<void> device_memory);
  ~SharedMemoryRegion();
  SharedMemoryRegion(const SharedMemoryRegion&) = delete;
  SharedMemoryRegion& operator=(const SharedMemoryRegion&) = delete;

  // The client that registered it.
  const std::string& owner() const { return owner_; }
  const std::string& name() const { return name_; }
  const std::string& key() const { return key_; }
  uint64_t offset() const { return offset_; }
  uint64_t byte_size() const { return byte_size_; }
  // The registered range's first byte: host memory, or device memory for
  // a CUDA region.
  char* data() const { return static_cast<char*>(mapping_) + offset_; }
  // A CUDA IPC region (device memory), and its device.
  bool on_device() const { return device_memory_ != nullptr; }
  int64_t device_id() const { return device_id_; }
  // FAILED_PRECONDITION when the object was unlinked, no longer covers the
  // registered range, or shrank under a request (a guarded page faulted);
  // always OK for a CUDA region.
  absl::Status CheckAlive() const;

 private:
  const std::string owner_;
  const std::string name_;
  const std::string key_;
  const uint64_t offset_;
  const uint64_t byte_size_;
  const int fd_;
  void* const mapping_;  // the object's bytes [0, offset + byte_size)
  const uint64_t mapping_bytes_;
  MappingGuardSlot* const guard_slot_;
  // A CUDA region's mapping (mapping_ is its pointer); null otherwise.
  const std::shared_ptr<void> device_memory_;
  const int64_t device_id_ = -1;
};

struct SharedMemoryListing {
  std::string name;
  std::string key;  // empty for a CUDA region
  uint64_t offset = 0;
  uint64_t byte_size = 0;
  bool on_device = false;
  int64_t device_id = -1;
};

struct SharedMemoryOptions {
  // Off: Register answers FAILED_PRECONDITION (--allow_client_shm).
  bool allow = false;
  // A key must be this prefix and then a name with no further '/'
  // (--client_shm_key_prefix).
  std::string key_prefix = "/coalesce";
  // Regions registered at once: in all (--max_shm_regions), and by one
  // client (--max_shm_regions_per_client). Each holds a descriptor, so the
  // first also bounds the descriptors the registry keeps open.
  int max_regions = 256;
  int max_regions_per_client = 64;
};

class SharedMemoryRegistry {
 public:
  explicit SharedMemoryRegistry(SharedMemoryOptions options = {});

  // Opens and maps [offset, offset + byte_size) of the object key for the
  // client owner, whose connection the kernel reported as caller_uid
  // (SO_PEERCRED; nullopt over TCP or in-process). FAILED_PRECONDITION when
  // shared memory is off; PERMISSION_DENIED without caller_uid or when the
  // object belongs to another uid; INVALID_ARGUMENT for an empty name, a
  // key outside the prefix, a zero byte_size or a range past the object's
  // end; NOT_FOUND when the object does not exist; ALREADY_EXISTS when owner
  // has registered name; RESOURCE_EXHAUSTED past either region limit or
  // when no memory is left to guard the mapping.
  absl::Status Register(absl::string_view owner, absl::string_view name,
                        absl::string_view key, uint64_t offset,
                        uint64_t byte_size, std::optional<uid_t> caller_uid);
  // Registers [0, byte_size) of device memory another process exported for
  // the client owner, after the same checks as Register (the gate, the
  // local socket, name, limits, not yet registered): open maps the handle
  // and says how large the exported allocation is, and is called only once
  // those pass. INVALID_ARGUMENT for a zero byte_size, or one beyond the
  // allocation; open's own errors otherwise.
  absl::Status RegisterDevice(
      absl::string_view owner, absl::string_view name, int64_t device_id,
      uint64_t byte_size, std::optional<uid_t> caller_uid,
      absl::FunctionRef<
          absl::StatusOr<std::shared_ptr<void>>(int64_t* allocation_bytes)>
          open);
  // NOT_FOUND when owner has not registered name as a region of this kind
  // (on_device: a CUDA region, else a system one).
  absl::Status Unregister(absl::string_view owner, absl::string_view name,
                          bool on_device = false);
  // owner's regions, by name.
  std::vector<SharedMemoryListing> List(absl::string_view owner) const;
  // Regions registered now, and the bytes they cover, by kind.
  struct Stats {
    int64_t system_regions = 0;
    int64_t system_bytes = 0;
    int64_t cuda_regions = 0;
    int64_t cuda_bytes = 0;
  };
  Stats stats() const;
  // owner's region name (NOT_FOUND otherwise), not yet checked: callers
  // check the range they use and then CheckAlive.
  absl::StatusOr<std::shared_ptr<const SharedMemoryRegion>> Find(
      absl::string_view owner, absl::string_view name) const;

 private:
  // OK while owner may register one more region.
  absl::Status CheckRoomLocked(absl::string_view owner) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What every registration checks first: the gate, the caller's uid and
  // the name.
  absl::Status CheckCaller(absl::string_view name,
                           std::optional<uid_t> caller_uid) const;
  // Adds region unless owner has name already or is past a limit.
  absl::Status Insert(std::shared_ptr<const SharedMemoryRegion> region);

  const SharedMemoryOptions options_;
  mutable absl::Mutex mu_;
  // By (owner, name).
  std::map<std::pair<std::string, std::string>,
           std::shared_ptr<const SharedMemoryRegion>>
      regions_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int, std::less<>> per_owner_ ABSL_GUARDED_BY(mu_);
};

}  // namespace coalesce
