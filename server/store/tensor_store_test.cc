// TensorStore: owners' isolation, quota, cap and upload limits (also under
// concurrent creators), TTL and upload expiry on an injected clock, and that
// bytes stay charged exactly as long as their memory lives.
#include "server/store/tensor_store.h"

#include <atomic>
#include <cstring>
#include <memory>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace coalesce {
namespace {

using ::testing::HasSubstr;

// Host memory that counts the bytes it has live, and the most it ever had.
class CountingMemory : public TensorMemory {
 public:
  absl::StatusOr<std::shared_ptr<void>> Allocate(int64_t bytes) override {
    const int64_t live = live_ += bytes;
    int64_t peak = peak_.load();
    while (live > peak && !peak_.compare_exchange_weak(peak, live)) {
    }
    return std::shared_ptr<void>(new char[bytes], [this, bytes](void* p) {
      live_ -= bytes;
      delete[] static_cast<char*>(p);
    });
  }
  absl::Status CopyIn(void* dst, int64_t /*size*/, int64_t offset,
                      const void* src, int64_t bytes) override {
    std::memcpy(static_cast<char*>(dst) + offset, src, bytes);
    return absl::OkStatus();
  }
  absl::Status CopyOut(const void* src, int64_t /*size*/, int64_t offset,
                       void* dst, int64_t bytes) override {
    std::memcpy(dst, static_cast<const char*>(src) + offset, bytes);
    return absl::OkStatus();
  }
  int64_t live() const { return live_; }
  int64_t peak() const { return peak_; }

 private:
  std::atomic<int64_t> live_{0};
  std::atomic<int64_t> peak_{0};
};

class TensorStoreTest : public testing::Test {
 protected:
  std::unique_ptr<TensorStore> MakeStore(
      int64_t quota, int64_t cap, absl::Duration ttl,
      absl::Duration upload_idle_timeout = absl::InfiniteDuration(),
      int max_uploads = 4) {
    TensorStoreOptions o;
    o.quota_bytes = quota;
    o.cap_bytes = cap;
    o.ttl = ttl;
    o.upload_idle_timeout = upload_idle_timeout;
    o.max_uploads_per_owner = max_uploads;
    o.now = [this] { return now_; };
    return std::make_unique<TensorStore>(o, &memory_);
  }
  std::shared_ptr<StoredTensor> Put(TensorStore& store, const char* owner,
                                    int64_t bytes) {
    absl::StatusOr<std::shared_ptr<StoredTensor>> t =
        store.Create(owner, "", DType::kFloat32, {bytes / 4}, bytes);
    EXPECT_TRUE(t.ok()) << t.status();
    if (!t.ok()) return nullptr;
    EXPECT_TRUE(store.Commit(owner, (*t)->handle).ok());
    return *t;
  }
  // An upload in progress; counts the calls of its on_abandon.
  std::shared_ptr<StoredTensor> Upload(TensorStore& store, const char* owner,
                                       int64_t bytes,
                                       std::atomic<int>* abandons = nullptr) {
    CreateOptions options;
    options.upload = true;
    if (abandons != nullptr) options.on_abandon = [abandons] { ++*abandons; };
    absl::StatusOr<std::shared_ptr<StoredTensor>> t = store.Create(
        owner, "", DType::kFloat32, {bytes / 4}, bytes, std::move(options));
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *t : nullptr;
  }

  CountingMemory memory_;
  absl::Time now_ = absl::FromUnixSeconds(1000);
};

TEST_F(TensorStoreTest, QuotaIsPerClientWithTheNumbers) {
  auto store = MakeStore(1000, 1 << 20, absl::InfiniteDuration());
  Put(*store, "a", 800);
  absl::StatusOr<std::shared_ptr<StoredTensor>> over =
      store->Create("a", "", DType::kFloat32, {100}, 400);
  ASSERT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(over.status().message(), HasSubstr("client 'a' holds 800 bytes"));
  EXPECT_THAT(over.status().message(), HasSubstr("400 more"));
  EXPECT_THAT(over.status().message(), HasSubstr("quota of 1000 bytes"));
  // Another client has its own quota.
  Put(*store, "b", 800);
  EXPECT_EQ(store->used_bytes("a"), 800);
  EXPECT_EQ(store->total_used_bytes(), 1600);
}

TEST_F(TensorStoreTest, CapIsGlobal) {
  auto store = MakeStore(1000, 1500, absl::InfiniteDuration());
  Put(*store, "a", 800);
  absl::StatusOr<std::shared_ptr<StoredTensor>> over =
      store->Create("b", "", DType::kFloat32, {200}, 800);
  ASSERT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(over.status().message(),
              HasSubstr("cap of 1500 bytes (--tensor_cap_bytes)"));
}

TEST_F(TensorStoreTest, DeleteFreesMemoryAndQuota) {
  auto store = MakeStore(1000, 1000, absl::InfiniteDuration());
  std::string handle = Put(*store, "a", 800)->handle;
  EXPECT_EQ(memory_.live(), 800);
  absl::StatusOr<int64_t> freed = store->Delete("a", handle);
  ASSERT_TRUE(freed.ok());
  EXPECT_EQ(*freed, 800);
  EXPECT_EQ(memory_.live(), 0);
  EXPECT_EQ(store->used_bytes("a"), 0);
  EXPECT_EQ(store->Find("a", handle).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store->Delete("a", handle).status().code(),
            absl::StatusCode::kNotFound);
  Put(*store, "a", 1000);  // the quota is whole again
}

TEST_F(TensorStoreTest, DeleteAllRemovesEveryOneOrNone) {
  auto store = MakeStore(10000, 10000, absl::InfiniteDuration());
  const std::string x = Put(*store, "a", 100)->handle;
  const std::string y = Put(*store, "a", 200)->handle;
  const std::string theirs = Put(*store, "b", 300)->handle;
  size_t absent = 99;
  // Another owner's tensor is absent for this one: nothing goes.
  absl::StatusOr<int64_t> freed =
      store->DeleteAll("a", {x, theirs, y}, &absent);
  EXPECT_EQ(freed.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(absent, 1u);
  EXPECT_EQ(store->used_bytes("a"), 300);
  EXPECT_EQ(store->used_bytes("b"), 300);
  EXPECT_TRUE(store->Find("a", x).ok());
  freed = store->DeleteAll("a", {y, x}, &absent);
  ASSERT_TRUE(freed.ok()) << freed.status();
  EXPECT_EQ(*freed, 300);
  EXPECT_EQ(store->used_bytes("a"), 0);
  EXPECT_EQ(memory_.live(), 300);  // b's
  EXPECT_EQ(store->Find("a", y).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(store->Find("b", theirs).ok());
}

// stats() counts committed tensors and uploads in progress through every
// way in and out: commit, delete, expiry, an abandoned upload.
TEST_F(TensorStoreTest, StatsFollowEveryTransition) {
  auto store = MakeStore(10000, 10000, absl::Seconds(10), absl::Seconds(5));
  auto counts = [&] {
    const TensorStore::Stats s = store->stats();
    return std::make_pair(s.tensors, s.uploads);
  };
  EXPECT_EQ(counts(), std::make_pair(int64_t{0}, int64_t{0}));
  const std::string kept = Put(*store, "a", 100)->handle;
  const std::string deleted = Put(*store, "b", 100)->handle;
  std::shared_ptr<StoredTensor> upload = Upload(*store, "a", 100);
  std::shared_ptr<StoredTensor> committed_upload = Upload(*store, "b", 100);
  EXPECT_EQ(counts(), std::make_pair(int64_t{2}, int64_t{2}));
  ASSERT_TRUE(store->Commit("b", committed_upload->handle).ok());
  EXPECT_EQ(counts(), std::make_pair(int64_t{3}, int64_t{1}));
  ASSERT_TRUE(store->Delete("b", deleted).ok());
  EXPECT_EQ(counts(), std::make_pair(int64_t{2}, int64_t{1}));
  // An output being written: neither committed nor an upload.
  auto output = store->Create("a", "", DType::kFloat32, {25}, 100);
  ASSERT_TRUE(output.ok());
  EXPECT_EQ(counts(), std::make_pair(int64_t{2}, int64_t{1}));
  ASSERT_TRUE(store->Delete("a", (*output)->handle).ok());
  // The idle upload is abandoned at 6 s; the tensors expire at 11 s.
  now_ += absl::Seconds(6);
  EXPECT_EQ(store->SweepExpired(), 1);
  EXPECT_EQ(counts(), std::make_pair(int64_t{2}, int64_t{0}));
  ASSERT_TRUE(store->Find("a", kept).ok());  // renews kept
  now_ += absl::Seconds(5);
  EXPECT_EQ(store->SweepExpired(), 1);
  EXPECT_EQ(counts(), std::make_pair(int64_t{1}, int64_t{0}));
  EXPECT_EQ(store->stats().expired_tensors, 1);
  EXPECT_EQ(store->stats().abandoned_uploads, 1);
}

TEST_F(TensorStoreTest, UncommittedIsInvisibleAndAbandonable) {
  auto store = MakeStore(1000, 1000, absl::InfiniteDuration());
  auto t = store->Create("a", "mine", DType::kFloat32, {2}, 8);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(store->Find("a", "mine").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(store->List("a").empty());
  EXPECT_EQ(store->Create("a", "mine", DType::kFloat32, {2}, 8).status().code(),
            absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(store->Delete("a", "mine").ok());
  EXPECT_TRUE((*t)->abandoned());
  EXPECT_EQ(store->used_bytes("a"), 8) << "the creator still holds it";
  EXPECT_EQ(store->Commit("a", "mine").code(), absl::StatusCode::kNotFound);
  t->reset();
  EXPECT_EQ(store->used_bytes("a"), 0);
  EXPECT_EQ(
      store->Create("a", "bad/name", DType::kFloat32, {2}, 8).status().code(),
      absl::StatusCode::kInvalidArgument);
}

TEST_F(TensorStoreTest, ServerPickedHandlesCarry128RandomBits) {
  auto store = MakeStore(1 << 20, 1 << 20, absl::InfiniteDuration());
  std::set<std::string> handles;
  for (int i = 0; i < 64; ++i) {
    const std::string h = Put(*store, "a", 4)->handle;
    ASSERT_EQ(h.size(), 2u + 32u) << h;
    EXPECT_EQ(h.substr(0, 2), "t-");
    EXPECT_EQ(h.find_first_not_of("0123456789abcdef", 2), std::string::npos)
        << h;
    handles.insert(h);
  }
  EXPECT_EQ(handles.size(), 64u);
}

TEST_F(TensorStoreTest, ErrorsQuoteAClientStringBounded) {
  auto store = MakeStore(1000, 1000, absl::InfiniteDuration());
  const std::string long_handle(65536, 'h');
  const absl::Status missing = store->Find("a", long_handle).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_LT(missing.message().size(), 256u) << missing.message().substr(0, 300);
  EXPECT_THAT(missing.message(), HasSubstr("(65536 bytes)"));
  const absl::Status bad =
      store->Create("a", long_handle, DType::kFloat32, {2}, 8).status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_LT(bad.message().size(), 256u);
}

TEST_F(TensorStoreTest, IdleTensorsExpireAndUseRenews) {
  auto store = MakeStore(1000, 1000, absl::Seconds(10));
  const std::string idle = Put(*store, "a", 100)->handle;
  const std::string used = Put(*store, "a", 100)->handle;
  now_ += absl::Seconds(8);
  ASSERT_TRUE(store->Find("a", used).ok());  // renews
  EXPECT_EQ(store->SweepExpired(), 0);
  now_ += absl::Seconds(3);
  EXPECT_EQ(store->SweepExpired(), 1);
  EXPECT_EQ(store->Find("a", idle).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(store->Find("a", used).ok());
  EXPECT_EQ(memory_.live(), 100);
  ASSERT_EQ(store->List("a").size(), 1u);
  EXPECT_EQ(store->List("a")[0].handle, used);
}

TEST_F(TensorStoreTest, SweeperThreadExpires) {
  auto store = MakeStore(1000, 1000, absl::Seconds(10));
  Put(*store, "a", 100);
  now_ += absl::Seconds(11);  // before the thread starts: no race
  store->StartSweeper(absl::Milliseconds(5));
  for (int i = 0; i < 400 && store->total_used_bytes() > 0; ++i) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(store->total_used_bytes(), 0);
}

TEST_F(TensorStoreTest, DestructionFreesEverything) {
  auto store = MakeStore(1000, 1000, absl::InfiniteDuration());
  Put(*store, "a", 300);
  Put(*store, "b", 300);
  store.reset();
  EXPECT_EQ(memory_.live(), 0);
}

// Another owner's tensor answers every method exactly as one that never
// existed (compared with a store that never held it), and is left intact.
TEST_F(TensorStoreTest, AnotherOwnersTensorIsIndistinguishableFromNone) {
  auto store = MakeStore(1000, 1000, absl::InfiniteDuration());
  auto never = MakeStore(1000, 1000, absl::InfiniteDuration());
  const std::string committed = Put(*store, "a", 100)->handle;
  std::shared_ptr<StoredTensor> upload = Upload(*store, "a", 100);
  ASSERT_NE(upload, nullptr);
  for (const std::string& h : {committed, upload->handle}) {
    SCOPED_TRACE(h);
    const absl::Status commit = store->Commit("b", h);
    EXPECT_EQ(commit.code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(commit, never->Commit("b", h));
    const absl::Status touch = store->Touch("b", h);
    EXPECT_EQ(touch.code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(touch, never->Touch("b", h));
    const absl::Status find = store->Find("b", h).status();
    EXPECT_EQ(find.code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(find, never->Find("b", h).status());
    const absl::Status del = store->Delete("b", h).status();
    EXPECT_EQ(del.code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(del, never->Delete("b", h).status());
  }
  EXPECT_TRUE(store->List("b").empty());
  EXPECT_EQ(store->used_bytes("b"), 0);
  // Untouched for its owner: still there, still uncommitted, still charged.
  EXPECT_FALSE(upload->abandoned());
  EXPECT_EQ(store->used_bytes("a"), 200);
  ASSERT_EQ(store->List("a").size(), 1u);
  EXPECT_TRUE(store->Find("a", committed).ok());
  EXPECT_TRUE(store->Commit("a", upload->handle).ok());
  EXPECT_EQ(store->List("a").size(), 2u);
}

TEST_F(TensorStoreTest, NamesArePerOwner) {
  auto store = MakeStore(1000, 1000, absl::InfiniteDuration());
  auto a = store->Create("a", "weights", DType::kFloat32, {25}, 100);
  auto b = store->Create("b", "weights", DType::kFloat16, {100}, 200);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE(store->Commit("a", "weights").ok());
  ASSERT_TRUE(store->Commit("b", "weights").ok());
  absl::StatusOr<std::shared_ptr<const StoredTensor>> found =
      store->Find("b", "weights");
  ASSERT_TRUE(found.ok());
  EXPECT_EQ((*found)->owner, "b");
  EXPECT_EQ((*found)->bytes, 200);
  EXPECT_EQ((*found)->data, (*b)->data);
  ASSERT_TRUE(store->Delete("a", "weights").ok());
  EXPECT_TRUE(store->Find("b", "weights").ok());
  EXPECT_EQ(store->List("b").size(), 1u);
  EXPECT_TRUE(store->List("a").empty());
}

// The attack this closes: delete your own upload right after its header and
// keep streaming into it, or recreate it, while the memory is still held.
TEST_F(TensorStoreTest, DeletedTensorStaysChargedWhileHeld) {
  auto store = MakeStore(1000, 1000, absl::InfiniteDuration());
  std::atomic<int> abandons{0};
  std::shared_ptr<StoredTensor> upload = Upload(*store, "a", 800, &abandons);
  ASSERT_NE(upload, nullptr);
  absl::StatusOr<int64_t> freed = store->Delete("a", upload->handle);
  ASSERT_TRUE(freed.ok());
  EXPECT_EQ(*freed, 800);
  EXPECT_EQ(abandons, 1);
  EXPECT_TRUE(upload->abandoned());
  EXPECT_EQ(store->used_bytes("a"), 800);
  EXPECT_EQ(store->total_used_bytes(), 800);
  EXPECT_EQ(memory_.live(), 800);
  const absl::Status again =
      store->Create("a", "", DType::kFloat32, {200}, 800).status();
  EXPECT_EQ(again.code(), absl::StatusCode::kResourceExhausted) << again;
  EXPECT_THAT(again.message(), HasSubstr("holds 800 bytes"));

  // An op's copy of the data pointer holds the memory, and so the charge,
  // past the tensor itself.
  std::shared_ptr<void> held_by_op = upload->data;
  upload.reset();
  EXPECT_EQ(store->used_bytes("a"), 800);
  held_by_op.reset();
  EXPECT_EQ(memory_.live(), 0);
  EXPECT_EQ(store->used_bytes("a"), 0);
  EXPECT_EQ(store->total_used_bytes(), 0);
  Put(*store, "a", 800);
  EXPECT_EQ(abandons, 1);
}

TEST_F(TensorStoreTest, CommittedTensorFoundByAnOpStaysChargedAfterDelete) {
  auto store = MakeStore(1000, 1000, absl::InfiniteDuration());
  const std::string handle = Put(*store, "a", 600)->handle;
  absl::StatusOr<std::shared_ptr<const StoredTensor>> in_use =
      store->Find("a", handle);
  ASSERT_TRUE(in_use.ok());
  ASSERT_TRUE(store->Delete("a", handle).ok());
  EXPECT_FALSE((*in_use)->abandoned()) << "it was committed";
  EXPECT_TRUE(store->List("a").empty());
  EXPECT_EQ(store->used_bytes("a"), 600);
  EXPECT_EQ(store->Create("a", "", DType::kFloat32, {150}, 600).status().code(),
            absl::StatusCode::kResourceExhausted);
  in_use->reset();
  EXPECT_EQ(store->used_bytes("a"), 0);
}

// The charges live as long as the memory, even past the store.
TEST_F(TensorStoreTest, TensorsMayOutliveTheStore) {
  auto store = MakeStore(1000, 1000, absl::InfiniteDuration());
  std::atomic<int> abandons{0};
  std::shared_ptr<StoredTensor> upload = Upload(*store, "a", 400, &abandons);
  std::shared_ptr<StoredTensor> committed = Put(*store, "a", 400);
  ASSERT_NE(upload, nullptr);
  store.reset();
  EXPECT_TRUE(upload->abandoned());
  EXPECT_FALSE(committed->abandoned());
  EXPECT_EQ(abandons, 0) << "destruction is not an abandonment";
  EXPECT_EQ(memory_.live(), 800);
  upload.reset();
  committed.reset();
  EXPECT_EQ(memory_.live(), 0);
}

TEST_F(TensorStoreTest, TensorsAreCountedPerOwnerAndInAll) {
  TensorStoreOptions o;
  o.max_tensors_per_owner = 3;
  o.max_tensors = 5;
  o.ttl = absl::Seconds(10);
  o.now = [this] { return now_; };
  TensorStore store(o, &memory_);
  std::vector<std::shared_ptr<StoredTensor>> a;
  for (int i = 0; i < 3; ++i) a.push_back(Put(store, "a", 4));
  // A 1-element tensor is as much a tensor as a large one.
  absl::Status over = store.Create("a", "", DType::kFloat32, {1}, 4).status();
  ASSERT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(over.message(), HasSubstr("client 'a' holds 3 tensors"));
  EXPECT_THAT(over.message(),
              HasSubstr("limit of 3 (--max_tensors_per_client)"));
  // An upload and a tensor being made count as well.
  CreateOptions upload;
  upload.upload = true;
  EXPECT_EQ(
      store.Create("a", "", DType::kFloat32, {1}, 4, upload).status().code(),
      absl::StatusCode::kResourceExhausted);
  // Others have their own count, up to the store's.
  ASSERT_TRUE(store.Create("b", "", DType::kFloat32, {1}, 4, upload).ok());
  ASSERT_TRUE(store.Create("b", "", DType::kFloat32, {1}, 4).ok());
  over = store.Create("c", "", DType::kFloat32, {1}, 4).status();
  ASSERT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(
      over.message(),
      HasSubstr("the server holds 5 tensors, its limit (--max_tensors)"));
  // Delete and expiry give places back.
  ASSERT_TRUE(store.Delete("a", a[0]->handle).ok());
  EXPECT_TRUE(store.Create("a", "", DType::kFloat32, {1}, 4).ok());
  EXPECT_FALSE(store.Create("c", "", DType::kFloat32, {1}, 4).ok());
  now_ += absl::Seconds(11);
  EXPECT_EQ(store.SweepExpired(), 4);  // all but the upload (no idle limit)
  EXPECT_TRUE(store.Create("c", "", DType::kFloat32, {1}, 4).ok());
  for (int i = 0; i < 2; ++i) EXPECT_NE(Put(store, "a", 4), nullptr);
}

TEST_F(TensorStoreTest, UploadsInProgressAreLimitedPerOwner) {
  auto store = MakeStore(1000, 1000, absl::InfiniteDuration(),
                         absl::InfiniteDuration(), /*max_uploads=*/2);
  std::shared_ptr<StoredTensor> first = Upload(*store, "a", 8);
  std::shared_ptr<StoredTensor> second = Upload(*store, "a", 8);
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  CreateOptions upload;
  upload.upload = true;
  const absl::Status third =
      store->Create("a", "", DType::kFloat32, {2}, 8, upload).status();
  EXPECT_EQ(third.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(third.message(), HasSubstr("client 'a' has 2 uploads"));
  EXPECT_THAT(third.message(), HasSubstr("limit of 2"));
  EXPECT_THAT(third.message(), HasSubstr("--max_uploads_per_client"));
  // Not an upload, or another owner: not counted.
  EXPECT_TRUE(store->Create("a", "", DType::kFloat32, {2}, 8).ok());
  EXPECT_NE(Upload(*store, "b", 8), nullptr);
  // Commit and Delete each end one.
  ASSERT_TRUE(store->Commit("a", first->handle).ok());
  ASSERT_TRUE(store->Commit("a", first->handle).ok());  // counted once
  std::shared_ptr<StoredTensor> fourth = Upload(*store, "a", 8);
  ASSERT_NE(fourth, nullptr);
  EXPECT_EQ(
      store->Create("a", "", DType::kFloat32, {2}, 8, upload).status().code(),
      absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(store->Delete("a", second->handle).ok());
  EXPECT_NE(Upload(*store, "a", 8), nullptr);
}

TEST_F(TensorStoreTest, IdleUploadsAreAbandonedOnce) {
  auto store = MakeStore(1000, 1000, absl::Seconds(100), absl::Seconds(5));
  std::atomic<int> abandons{0};
  std::shared_ptr<StoredTensor> stalled = Upload(*store, "a", 100, &abandons);
  std::atomic<int> finished_abandons{0};
  std::shared_ptr<StoredTensor> finished =
      Upload(*store, "a", 100, &finished_abandons);
  ASSERT_NE(stalled, nullptr);
  ASSERT_NE(finished, nullptr);
  now_ += absl::Seconds(4);
  ASSERT_TRUE(store->Touch("a", stalled->handle).ok());  // a chunk came
  ASSERT_TRUE(store->Commit("a", finished->handle).ok());
  now_ += absl::Seconds(4);
  EXPECT_EQ(store->SweepExpired(), 0);
  EXPECT_FALSE(stalled->abandoned());
  now_ += absl::Seconds(2);  // 6 s since the last chunk
  EXPECT_EQ(store->SweepExpired(), 1);
  EXPECT_EQ(abandons, 1);
  EXPECT_TRUE(stalled->abandoned());
  EXPECT_EQ(store->Touch("a", stalled->handle).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store->Commit("a", stalled->handle).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store->Delete("a", stalled->handle).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store->SweepExpired(), 0);
  EXPECT_EQ(abandons, 1);
  // Committed, it keeps the TTL, and its on_abandon is never called.
  EXPECT_TRUE(store->Find("a", finished->handle).ok());
  now_ += absl::Seconds(101);
  EXPECT_EQ(store->SweepExpired(), 1);
  EXPECT_EQ(finished_abandons, 0);
  EXPECT_FALSE(finished->abandoned());
  EXPECT_EQ(store->used_bytes("a"), 200) << "both still held here";
  stalled.reset();
  finished.reset();
  EXPECT_EQ(store->used_bytes("a"), 0);
}

TEST_F(TensorStoreTest, SweepPeriodIsATenthOfTheShorterLimit) {
  TensorStoreOptions o;
  o.ttl = absl::Minutes(10);
  o.upload_idle_timeout = absl::Seconds(60);
  EXPECT_EQ(TensorStore::SweepPeriod(o), absl::Seconds(6));
  o.upload_idle_timeout = absl::InfiniteDuration();
  EXPECT_EQ(TensorStore::SweepPeriod(o), absl::Seconds(10));
  o.ttl = absl::Milliseconds(500);
  EXPECT_EQ(TensorStore::SweepPeriod(o), absl::Milliseconds(100));
  o.ttl = absl::InfiniteDuration();
  EXPECT_EQ(TensorStore::SweepPeriod(o), absl::InfiniteDuration());
}

// Many threads creating, deleting and holding at once: no owner's charge
// passes its quota, the memory live never passes the cap, and the accounting
// ends at zero.
TEST_F(TensorStoreTest, ConcurrentCreatorsCannotPassTheQuota) {
  constexpr int64_t kQuota = 1000;
  constexpr int64_t kCap = 1500;
  auto store = MakeStore(kQuota, kCap, absl::InfiniteDuration());
  constexpr int kThreads = 8;
  std::atomic<int> created{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      std::mt19937 rng(std::random_device{}() + i);
      std::uniform_int_distribution<int64_t> elements(1, 200);
      const char* owner = i % 2 == 0 ? "a" : "b";
      std::vector<std::shared_ptr<StoredTensor>> held;
      for (int round = 0; round < 2000; ++round) {
        const int64_t n = elements(rng);
        absl::StatusOr<std::shared_ptr<StoredTensor>> t =
            store->Create(owner, "", DType::kFloat16, {n}, 2 * n);
        if (t.ok()) {
          ++created;
          // Deleted at once, but held a while: still charged.
          EXPECT_TRUE(store->Delete(owner, (*t)->handle).ok());
          held.push_back(*std::move(t));
        } else {
          EXPECT_EQ(t.status().code(), absl::StatusCode::kResourceExhausted);
        }
        if (held.size() > 3 || rng() % 4 == 0) held.clear();
        EXPECT_LE(store->used_bytes(owner), kQuota);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_GT(created, kThreads);
  EXPECT_LE(memory_.peak(), kCap);
  EXPECT_EQ(store->total_used_bytes(), 0);
  EXPECT_EQ(memory_.live(), 0);
}

TEST_F(TensorStoreTest, ConcurrentCreatorsGetExactlyTheQuota) {
  auto store = MakeStore(1000, 1000, absl::InfiniteDuration());
  std::vector<std::thread> threads;
  std::atomic<int> created{0};
  std::vector<std::vector<std::shared_ptr<StoredTensor>>> kept(8);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      for (int n = 0; n < 20; ++n) {
        auto t = store->Create("a", "", DType::kFloat32, {25}, 100);
        if (t.ok()) {
          ++created;
          kept[i].push_back(*std::move(t));
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(created, 10);
  EXPECT_EQ(store->used_bytes("a"), 1000);
  EXPECT_EQ(memory_.live(), 1000);
}

}  // namespace
}  // namespace coalesce
