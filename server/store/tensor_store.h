// Tensors kept on the server between requests (handles): created by
// PutTensor or by an op output placed OUTPUT_PLACEMENT_SERVER_HANDLE, read by
// op inputs that name a handle and by GetTensor, freed by DeleteTensor, by an
// idle TTL (a background sweeper), or when the store is destroyed (server
// stop).
//
// Every tensor belongs to an owner (the client's identity). Names are per
// owner, and another owner's tensor answers exactly as one that never
// existed; server-picked handles carry 128 random bits. Bytes are charged to
// the owner against a per-owner quota and a store-wide cap from Create,
// before any memory is allocated, until the memory is freed: a tensor
// deleted while an upload or an op still holds it stays charged until they
// let go, so deleting and recreating cannot take more memory than the quota.
// Tensors are counted too, per owner and in all, since each costs the server
// memory of its own. An upload in progress also counts against a per-owner
// limit, and one that receives nothing for upload_idle_timeout is
// abandoned.
//
// The store knows nothing of kernels or devices: tensor bytes come from a
// TensorMemory, which the server backs with its backend's resident memory
// (BackendTensorMemory): host memory on the CPU backend, device memory on
// the CUDA backend, where an op reads a handle in place and writes an output
// kept as a handle straight into device memory, with no copy through the
// host (docs/DATAPATH.md). Only PutTensor and GetTensor copy, chunk by
// chunk.
//
// Thread-safety: TensorStore is thread-safe (a mutex around the index, and
// one around the charges, which the last reference to a tensor's memory
// releases from whichever thread drops it, even after the store is gone;
// tensor bytes are copied outside both). A StoredTensor's metadata is
// immutable once created; its bytes are written only by the creator before
// Commit.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
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
  // The same, on the device of index `device` where there are several
  // (-1: anywhere); the default ignores device.
  virtual absl::StatusOr<std::shared_ptr<void>> AllocateOn(int /*device*/,
                                                           int64_t bytes) {
    return Allocate(bytes);
  }
  // The index of the device holding memory p of this TensorMemory: 0 where
  // there is one.
  virtual int DeviceOf(const void* /*p*/) const { return 0; }
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
  absl::StatusOr<std::shared_ptr<void>> AllocateOn(int device,
                                                   int64_t bytes) override;
  int DeviceOf(const void* p) const override {
    return backend_->DeviceOfResident(p);
  }
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
  // Bytes of TensorMemory; may be device memory. Charged to owner until the
  // last reference goes.
  std::shared_ptr<void> data;

  // Whether the store dropped it before Commit (deleted, expired or the
  // store destroyed): the uploader stops at its next chunk.
  bool abandoned() const { return abandoned_.load(std::memory_order_acquire); }

 private:
  friend class TensorStore;
  std::atomic<bool> abandoned_{false};
};

// What ListTensors reports of one tensor.
struct TensorListing {
  std::string handle;
  std::string owner;
  DType dtype = DType::kFloat32;
  Shape shape;
  int64_t bytes = 0;
  double idle_seconds = 0;
  int device = 0;  // TensorMemory::DeviceOf its bytes
};

struct TensorStoreOptions {
  int64_t quota_bytes = int64_t{4} << 30;  // per owner
  int64_t cap_bytes = int64_t{8} << 30;    // all owners together
  // Uploads in progress at once, per owner (--max_uploads_per_client).
  int max_uploads_per_owner = 4;
  // Tensors held (committed, uploading or being created), per owner and all
  // owners together (--max_tensors_per_client, --max_tensors): each costs
  // the server about 900 bytes of its own however small its bytes, so the
  // byte quota alone would let a client of 1-element tensors hold a
  // billion.
  int64_t max_tensors_per_owner = 65536;
  int64_t max_tensors = 262144;
  // A committed tensor unused this long is freed; absl::InfiniteDuration():
  // never.
  absl::Duration ttl = absl::Minutes(10);
  // An upload that received nothing this long is abandoned;
  // absl::InfiniteDuration(): never.
  absl::Duration upload_idle_timeout = absl::Seconds(60);
  // The clock both are measured on (tests inject a fake one).
  std::function<absl::Time()> now = [] { return absl::Now(); };
};

struct CreateOptions {
  // A PutTensor upload: counts against max_uploads_per_owner until Commit,
  // and expires after upload_idle_timeout without a Touch.
  bool upload = false;
  // Called once, outside the store's lock, when the tensor is deleted or
  // expires before Commit (not when the store is destroyed), so that the
  // server can cancel the upload.
  std::function<void()> on_abandon;
  // The index of the device the bytes go to, on a server of several; -1:
  // wherever the memory puts them.
  int device = -1;
};

class TensorStore {
 public:
  // memory is not owned and must outlive the store and every tensor.
  TensorStore(TensorStoreOptions options, TensorMemory* memory);
  // Stops the sweeper; frees every tensor nothing else holds and marks the
  // uncommitted ones abandoned. Tensors still held stay charged to the
  // (shared) accounting until they go.
  ~TensorStore();
  TensorStore(const TensorStore&) = delete;
  TensorStore& operator=(const TensorStore&) = delete;

  // Charges bytes to owner (RESOURCE_EXHAUSTED with the numbers when over
  // its quota or the cap, past the owner's or the store's tensor count, or
  // past the owner's uploads in progress for an upload) and allocates them. The
  // tensor is invisible to Find and List until Commit; Delete abandons it. name
  // is the handle wanted (INVALID_ARGUMENT if malformed, ALREADY_EXISTS if
  // owner has one so named); empty picks a fresh one.
  absl::StatusOr<std::shared_ptr<StoredTensor>> Create(
      absl::string_view owner, absl::string_view name, DType dtype,
      const Shape& shape, int64_t bytes, CreateOptions options = {});
  // Publishes owner's created tensor and ends its upload. NOT_FOUND if it
  // was deleted or expired meanwhile.
  absl::Status Commit(absl::string_view owner, absl::string_view handle);
  // Marks owner's tensor used now: an upload received a chunk. NOT_FOUND
  // when it is gone.
  absl::Status Touch(absl::string_view owner, absl::string_view handle);
  // owner's committed tensor (NOT_FOUND otherwise); marks it used now.
  absl::StatusOr<std::shared_ptr<const StoredTensor>> Find(
      absl::string_view owner, absl::string_view handle);
  // Removes owner's tensor, committed or not, and returns its bytes, which
  // stay charged until nothing holds the tensor. NOT_FOUND if absent.
  absl::StatusOr<int64_t> Delete(absl::string_view owner,
                                 absl::string_view handle);
  // Removes all of owner's tensors `handles` (distinct) and returns their
  // bytes, or none of them: NOT_FOUND naming the first absent, whose index
  // goes to *absent.
  absl::StatusOr<int64_t> DeleteAll(absl::string_view owner,
                                    absl::Span<const std::string> handles,
                                    size_t* absent);
  // owner's committed tensors, by handle.
  std::vector<TensorListing> List(absl::string_view owner) const;
  // Bytes charged: to owner, and to all owners.
  int64_t used_bytes(absl::string_view owner) const;
  int64_t total_used_bytes() const;
  const TensorStoreOptions& options() const { return options_; }

  // What the store holds now, and what the sweeper removed since it began.
  struct Stats {
    int64_t bytes = 0;    // charged, as total_used_bytes
    int64_t tensors = 0;  // committed tensors
    int64_t uploads = 0;  // uploads in progress (created, not committed)
    int64_t expired_tensors = 0;    // freed after the TTL
    int64_t abandoned_uploads = 0;  // idle past upload_idle_timeout
  };
  Stats stats() const;
  TensorMemory& memory() const { return *memory_; }

  // Abandons every upload idle for longer than upload_idle_timeout (calling
  // its on_abandon) and frees every other tensor idle for longer than the
  // TTL; returns how many it removed.
  int SweepExpired();
  // How often to sweep: a tenth of the shorter of the TTL and
  // upload_idle_timeout, within 100 ms to 10 s; absl::InfiniteDuration()
  // when nothing expires.
  static absl::Duration SweepPeriod(const TensorStoreOptions& options);
  // Runs SweepExpired every period on a thread of its own until the store
  // is destroyed. Call at most once.
  void StartSweeper(absl::Duration period);

 private:
  // The charges; shared with the deleters of tensor memory, which may run
  // after the store is destroyed.
  struct Ledger;
  struct Entry {
    std::shared_ptr<StoredTensor> tensor;
    bool allocated = false;  // false while Create allocates
    bool committed = false;
    bool upload = false;  // counted in owners_ (until Commit or erased)
    std::function<void()> on_abandon;
    absl::Time last_used;
  };
  using Key = std::pair<std::string, std::string>;  // (owner, handle)
  // What leaves the index: declared before the lock, so that its
  // destructor calls the on_abandon callbacks and drops the tensors (and
  // perhaps their memory) once the lock is released.
  struct Erased {
    std::vector<std::shared_ptr<StoredTensor>> tensors;
    std::vector<std::function<void()>> on_abandon;
    ~Erased();
  };

  // owner's tensor handle, committed or not, once Create has allocated it;
  // NOT_FOUND otherwise.
  absl::StatusOr<Entry*> AllocatedLocked(absl::string_view owner,
                                         absl::string_view handle)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes it (the key must exist) into erased.
  void EraseLocked(std::map<Key, Entry>::iterator it, Erased& erased)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees the upload's place in owners_, if it holds one.
  void EndUploadLocked(Entry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const TensorStoreOptions options_;
  TensorMemory* const memory_;
  const std::shared_ptr<Ledger> ledger_;
  mutable absl::Mutex mu_;  // taken before the ledger's
  std::map<Key, Entry> tensors_ ABSL_GUARDED_BY(mu_);
  // How many owners hold a tensor of each handle, so that a server-picked
  // handle is fresh across all owners.
  absl::flat_hash_map<std::string, int> handle_owners_ ABSL_GUARDED_BY(mu_);
  // What each owner holding an entry has: its entries (tensors_ holds them
  // all) and, of those, its uploads in progress. Gone at no entries.
  struct OwnerCounts {
    int64_t tensors = 0;
    int uploads = 0;
  };
  absl::flat_hash_map<std::string, OwnerCounts> owners_ ABSL_GUARDED_BY(mu_);
  // Committed entries and uploads in progress, all owners: what stats()
  // reports, kept as they change so that a scrape walks no entries.
  int64_t committed_tensors_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t open_uploads_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t expired_tensors_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t abandoned_uploads_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread sweeper_;
};

}  // namespace coalesce
