// Tensors kept on the server between requests (handles): created by
// PutTensor or by an op output placed OUTPUT_PLACEMENT_SERVER_HANDLE, read by
// op inputs that name a handle and by GetTensor, freed by DeleteTensor, by an
// idle TTL (a background sweeper), or when the store is destroyed (server
// stop). Bytes are charged to an owner (the client) against a per-owner
// quota and a store-wide cap, both checked before any memory is allocated.
//
// The store knows nothing of kernels or devices: tensor bytes come from a
// TensorMemory, which the server backs with its backend's resident memory
// (BackendTensorMemory): host memory on the CPU backend, device memory on
// the CUDA backend, where an op reads a handle in place and writes an output
// kept as a handle straight into device memory, with no copy through the
// host (docs/DATAPATH.md). Only PutTensor and GetTensor copy, chunk by
// chunk.
//
// Thread-safety: TensorStore is thread-safe (one mutex around the index;
// tensor bytes are copied outside it). A StoredTensor's metadata is
// immutable once created; its bytes are written only by the creator before
// Commit. A tensor deleted while an op uses it stays allocated until the op
// drops its reference; its bytes leave the accounting at once.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/dtype.h"
#include "kernels/core/backend.h"
#include "kernels/core/problem.h"

namespace coalesce {

// Where tensor bytes live. Implementations are thread-safe.
class TensorMemory {
 public:
  virtual ~TensorMemory() = default;
  // bytes of memory (uninitialized), freed when the last reference goes;
  // RESOURCE_EXHAUSTED when none is left.
  virtual absl::StatusOr<std::shared_ptr<void>> Allocate(int64_t bytes) = 0;
  // Copies between host memory and [offset, offset + bytes) of an
  // allocation of size bytes: OUT_OF_RANGE outside it; other errors are the
  // memory's own (a device fault: INTERNAL).
  virtual absl::Status CopyIn(void* dst, int64_t size, int64_t offset,
                              const void* src, int64_t bytes) = 0;
  virtual absl::Status CopyOut(const void* src, int64_t size, int64_t offset,
                               void* dst, int64_t bytes) = 0;
  // A writer into an allocation of size bytes (Backend's ResidentWriter:
  // a piece may still be copying when Write returns; Finish waits). The
  // default writes through CopyIn.
  virtual std::unique_ptr<ResidentWriter> OpenWriter(void* dst, int64_t size);
};

// A backend's resident memory (Backend::AllocateResident and its copies).
class BackendTensorMemory final : public TensorMemory {
 public:
  // backend is not owned and must outlive this and every allocation.
  explicit BackendTensorMemory(Backend* backend) : backend_(backend) {}
  absl::StatusOr<std::shared_ptr<void>> Allocate(int64_t bytes) override;
  absl::Status CopyIn(void* dst, int64_t size, int64_t offset, const void* src,
                      int64_t bytes) override;
  absl::Status CopyOut(const void* src, int64_t size, int64_t offset, void* dst,
                       int64_t bytes) override;
  std::unique_ptr<ResidentWriter> OpenWriter(void* dst, int64_t size) override;

 private:
  Backend* const backend_;
};

struct StoredTensor {
  std::string handle;
  std::string owner;
  DType dtype = DType::kFloat32;
  Shape shape;
  int64_t bytes = 0;
  std::shared_ptr<void> data;  // bytes of TensorMemory; may be device memory
};

// What ListTensors reports of one tensor.
struct TensorListing {
  std::string handle;
  std::string owner;
  DType dtype = DType::kFloat32;
  Shape shape;
  int64_t bytes = 0;
  double idle_seconds = 0;
};

struct TensorStoreOptions {
  int64_t quota_bytes = int64_t{4} << 30;  // per owner
  int64_t cap_bytes = int64_t{8} << 30;    // all owners together
  // A tensor unused this long is freed; absl::InfiniteDuration(): never.
  absl::Duration ttl = absl::Minutes(10);
  // The clock the TTL is measured on (tests inject a fake one).
  std::function<absl::Time()> now = [] { return absl::Now(); };
};

class TensorStore {
 public:
  // memory is not owned and must outlive the store.
  TensorStore(TensorStoreOptions options, TensorMemory* memory);
  // Stops the sweeper; frees every tensor no op still holds.
  ~TensorStore();
  TensorStore(const TensorStore&) = delete;
  TensorStore& operator=(const TensorStore&) = delete;

  // Charges bytes to owner (RESOURCE_EXHAUSTED with the numbers when over
  // its quota or the cap) and allocates them. The tensor is invisible to
  // Find and List until Commit; Delete abandons it. name is the handle
  // wanted (INVALID_ARGUMENT if malformed, ALREADY_EXISTS if taken); empty
  // picks a fresh one.
  absl::StatusOr<std::shared_ptr<StoredTensor>> Create(absl::string_view owner,
                                                       absl::string_view name,
                                                       DType dtype,
                                                       const Shape& shape,
                                                       int64_t bytes);
  // Publishes a created tensor. NOT_FOUND if it was deleted or expired
  // meanwhile.
  absl::Status Commit(absl::string_view handle);
  // A committed tensor (NOT_FOUND otherwise); marks it used now.
  absl::StatusOr<std::shared_ptr<const StoredTensor>> Find(
      absl::string_view handle);
  // Removes a tensor, committed or not, and returns its bytes. NOT_FOUND if
  // absent.
  absl::StatusOr<int64_t> Delete(absl::string_view handle);
  // owner's committed tensors, by handle.
  std::vector<TensorListing> List(absl::string_view owner) const;
  int64_t used_bytes(absl::string_view owner) const;
  int64_t total_used_bytes() const;
  const TensorStoreOptions& options() const { return options_; }
  TensorMemory& memory() const { return *memory_; }

  // Frees every tensor idle for longer than the TTL; returns how many.
  int SweepExpired();
  // Runs SweepExpired every period on a thread of its own until the store
  // is destroyed. Call at most once.
  void StartSweeper(absl::Duration period);

 private:
  struct Entry {
    std::string owner;
    int64_t bytes = 0;  // charged to owner from Create until erased
    std::shared_ptr<StoredTensor> tensor;  // null while allocating
    bool committed = false;
    absl::Time last_used;
  };
  // Removes it (the handle must exist) and releases its bytes.
  void EraseLocked(std::map<std::string, Entry>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const TensorStoreOptions options_;
  TensorMemory* const memory_;
  mutable absl::Mutex mu_;
  std::map<std::string, Entry> tensors_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, int64_t> used_ ABSL_GUARDED_BY(mu_);
  int64_t total_used_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread sweeper_;
};

}  // namespace coalesce
