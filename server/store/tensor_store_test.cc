// TensorStore: quota, cap, TTL expiry on an injected clock, and that delete
// frees both the accounting and the memory.
#include "server/store/tensor_store.h"

#include <atomic>
#include <cstring>
#include <memory>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace coalesce {
namespace {

using ::testing::HasSubstr;

// Host memory that counts the bytes it has live.
class CountingMemory : public TensorMemory {
 public:
  absl::StatusOr<std::shared_ptr<void>> Allocate(int64_t bytes) override {
    live_ += bytes;
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

 private:
  std::atomic<int64_t> live_{0};
};

class TensorStoreTest : public testing::Test {
 protected:
  std::unique_ptr<TensorStore> MakeStore(int64_t quota, int64_t cap,
                                         absl::Duration ttl) {
    TensorStoreOptions o;
    o.quota_bytes = quota;
    o.cap_bytes = cap;
    o.ttl = ttl;
    o.now = [this] { return now_; };
    return std::make_unique<TensorStore>(o, &memory_);
  }
  std::shared_ptr<StoredTensor> Put(TensorStore& store, const char* owner,
                                    int64_t bytes) {
    absl::StatusOr<std::shared_ptr<StoredTensor>> t =
        store.Create(owner, "", DType::kFloat32, {bytes / 4}, bytes);
    EXPECT_TRUE(t.ok()) << t.status();
    if (!t.ok()) return nullptr;
    EXPECT_TRUE(store.Commit((*t)->handle).ok());
    return *t;
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
  absl::StatusOr<int64_t> freed = store->Delete(handle);
  ASSERT_TRUE(freed.ok());
  EXPECT_EQ(*freed, 800);
  EXPECT_EQ(memory_.live(), 0);
  EXPECT_EQ(store->used_bytes("a"), 0);
  EXPECT_EQ(store->Find(handle).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store->Delete(handle).status().code(), absl::StatusCode::kNotFound);
  Put(*store, "a", 1000);  // the quota is whole again
}

TEST_F(TensorStoreTest, UncommittedIsInvisibleAndAbandonable) {
  auto store = MakeStore(1000, 1000, absl::InfiniteDuration());
  auto t = store->Create("a", "mine", DType::kFloat32, {2}, 8);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(store->Find("mine").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(store->List("a").empty());
  EXPECT_EQ(store->Create("a", "mine", DType::kFloat32, {2}, 8).status().code(),
            absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(store->Delete("mine").ok());
  EXPECT_EQ(store->used_bytes("a"), 0);
  EXPECT_EQ(store->Commit("mine").code(), absl::StatusCode::kNotFound);
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
  const absl::Status missing = store->Find(long_handle).status();
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
  ASSERT_TRUE(store->Find(used).ok());  // renews
  EXPECT_EQ(store->SweepExpired(), 0);
  now_ += absl::Seconds(3);
  EXPECT_EQ(store->SweepExpired(), 1);
  EXPECT_EQ(store->Find(idle).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(store->Find(used).ok());
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

}  // namespace
}  // namespace coalesce
