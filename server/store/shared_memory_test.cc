#include "server/store/shared_memory.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "server/store/mapping_guard.h"

namespace coalesce {
namespace {

// A POSIX shared-memory object of `bytes`, unlinked at the end.
class ShmObject {
 public:
  explicit ShmObject(size_t bytes)
      : key_(absl::StrCat("/coalesce-guard-test-", getpid(), "-", ++count_)) {
    fd_ = shm_open(key_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    EXPECT_GE(fd_, 0);
    EXPECT_EQ(ftruncate(fd_, static_cast<off_t>(bytes)), 0);
  }
  ~ShmObject() {
    close(fd_);
    shm_unlink(key_.c_str());
  }
  const std::string& key() const { return key_; }
  int fd() const { return fd_; }
  void Truncate(size_t bytes) {
    ASSERT_EQ(ftruncate(fd_, static_cast<off_t>(bytes)), 0);
  }

 private:
  static inline int count_ = 0;
  std::string key_;
  int fd_ = -1;
};

SharedMemoryOptions Allowed() {
  SharedMemoryOptions o;
  o.allow = true;
  return o;
}

TEST(SharedMemoryRegistry, IsOffUnlessAllowed) {
  ShmObject object(4096);
  SharedMemoryRegistry off;
  const absl::Status s = off.Register("c", "r", object.key(), 0, 4096);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("--allow_client_shm"), std::string::npos) << s;
  SharedMemoryRegistry on(Allowed());
  EXPECT_TRUE(on.Register("c", "r", object.key(), 0, 4096).ok());
}

// The server maps only objects named for it: another program's /dev/shm
// object, or a name that leaves the prefix, is refused before shm_open.
TEST(SharedMemoryRegistry, KeysMustStartWithThePrefix) {
  SharedMemoryRegistry registry(Allowed());
  for (const char* key : {"/secret", "/coalesce", "/coalesce/../secret",
                          "coalesce-x", "/coalescex/y", "/other-coalesce"}) {
    const absl::Status s = registry.Register("c", "r", key, 0, 8);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << key << ": " << s;
    EXPECT_NE(s.message().find("key:"), std::string::npos) << s;
  }
  SharedMemoryOptions other = Allowed();
  other.key_prefix = "/tenant-a-";
  SharedMemoryRegistry narrow(other);
  ShmObject object(4096);  // "/coalesce-guard-test-..."
  EXPECT_EQ(narrow.Register("c", "r", object.key(), 0, 4096).code(),
            absl::StatusCode::kInvalidArgument);
}

// Each region holds a descriptor and a mapping: a flood of registrations
// stops at the limits, per client and in all, and unregistering frees room.
TEST(SharedMemoryRegistry, RegionsAreBoundedPerClientAndInAll) {
  ShmObject object(4096);
  SharedMemoryOptions o = Allowed();
  o.max_regions = 3;
  o.max_regions_per_client = 2;
  SharedMemoryRegistry registry(o);
  ASSERT_TRUE(registry.Register("a", "a1", object.key(), 0, 8).ok());
  ASSERT_TRUE(registry.Register("a", "a2", object.key(), 0, 8).ok());
  const absl::Status per_client =
      registry.Register("a", "a3", object.key(), 0, 8);
  EXPECT_EQ(per_client.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(per_client.message().find("--max_shm_regions_per_client"),
            std::string::npos)
      << per_client;
  ASSERT_TRUE(registry.Register("b", "b1", object.key(), 0, 8).ok());
  const absl::Status in_all = registry.Register("b", "b2", object.key(), 0, 8);
  EXPECT_EQ(in_all.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(in_all.message().find("--max_shm_regions)"), std::string::npos)
      << in_all;
  ASSERT_TRUE(registry.Unregister("a1").ok());
  EXPECT_TRUE(registry.Register("a", "a3", object.key(), 0, 8).ok());
  EXPECT_EQ(registry.List().size(), 3u);
}

// What a client shrinking its object under a running kernel does to the
// server: before the guard, the next touch of a lost page ended the process
// with SIGBUS.
TEST(MappingGuard, AShrunkRegionReadsZerosAndFailsItsRequests) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  ShmObject object(4 * page);
  SharedMemoryRegistry registry(Allowed());
  ASSERT_TRUE(registry.Register("c", "r", object.key(), 0, 4 * page).ok());
  absl::StatusOr<std::shared_ptr<const SharedMemoryRegion>> region =
      registry.Find("r");
  ASSERT_TRUE(region.ok());
  volatile char* data = (*region)->data();
  data[3 * page] = 42;
  ASSERT_TRUE((*region)->CheckAlive().ok());

  object.Truncate(page);
  EXPECT_EQ(data[3 * page], 0) << "a lost page reads as zeros";
  data[2 * page] = 7;  // and takes writes
  EXPECT_EQ(data[2 * page], 7);
  EXPECT_EQ(data[0], 0);  // pages the object still has are its own

  // Even once the object has its size back, the region stays refused: its
  // mapping no longer mirrors the object.
  object.Truncate(4 * page);
  const absl::Status alive = (*region)->CheckAlive();
  EXPECT_EQ(alive.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(alive.message().find("shrank while a request used it"),
            std::string::npos)
      << alive;
}

TEST(MappingGuard, OtherSigbusStillEndsTheProcess) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  ShmObject guarded(page);
  // Installs the handler.
  const int slot = GuardMapping(
      mmap(nullptr, page, PROT_READ, MAP_SHARED, guarded.fd(), 0), page);
  ASSERT_GE(slot, 0);
  EXPECT_DEATH(
      {
        ShmObject object(2 * page);
        volatile char* p = static_cast<char*>(
            mmap(nullptr, 2 * page, PROT_READ, MAP_SHARED, object.fd(), 0));
        object.Truncate(0);
        (void)p[page];  // not guarded
      },
      "");
  UnguardMapping(slot);
  EXPECT_FALSE(MappingFaulted(slot));
}

}  // namespace
}  // namespace coalesce
