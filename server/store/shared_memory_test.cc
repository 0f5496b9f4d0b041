#include "server/store/shared_memory.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/store/mapping_guard.h"

namespace coalesce {
namespace {

// A POSIX shared-memory object of `bytes`, unlinked at the end.
class ShmObject {
 public:
  // The key holds random bits besides the pid and a count: a process that
  // died leaves its objects behind, and a later one may get its pid.
  explicit ShmObject(size_t bytes) {
    std::random_device random;
    for (int attempt = 0; attempt < 8 && fd_ < 0; ++attempt) {
      key_ = absl::StrCat("/coalesce-guard-test-", getpid(), "-", ++count_, "-",
                          absl::Hex(random()));
      fd_ = shm_open(key_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
      if (fd_ < 0 && errno != EEXIST) break;
    }
    EXPECT_GE(fd_, 0) << key_ << ": " << std::strerror(errno);
    EXPECT_EQ(ftruncate(fd_, static_cast<off_t>(bytes)), 0)
        << key_ << ": " << std::strerror(errno);
  }
  ~ShmObject() {
    close(fd_);
    shm_unlink(key_.c_str());
  }
  const std::string& key() const { return key_; }
  int fd() const { return fd_; }
  // The name goes; the descriptor and mappings keep the object.
  void Unlink() { shm_unlink(key_.c_str()); }
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

// The uid the kernel would report for this process on the local socket; it
// owns the objects the tests create.
std::optional<uid_t> Me() { return geteuid(); }

TEST(SharedMemoryRegistry, IsOffUnlessAllowed) {
  ShmObject object(4096);
  SharedMemoryRegistry off;
  const absl::Status s = off.Register("c", "r", object.key(), 0, 4096, Me());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("--allow_client_shm"), std::string::npos) << s;
  SharedMemoryRegistry on(Allowed());
  EXPECT_TRUE(on.Register("c", "r", object.key(), 0, 4096, Me()).ok());
}

// The server maps only objects named for it: another program's /dev/shm
// object, or a name that leaves the prefix, is refused before shm_open.
TEST(SharedMemoryRegistry, KeysMustStartWithThePrefix) {
  SharedMemoryRegistry registry(Allowed());
  for (const char* key : {"/secret", "/coalesce", "/coalesce/../secret",
                          "coalesce-x", "/coalescex/y", "/other-coalesce"}) {
    const absl::Status s = registry.Register("c", "r", key, 0, 8, Me());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << key << ": " << s;
    EXPECT_NE(s.message().find("key:"), std::string::npos) << s;
  }
  SharedMemoryOptions other = Allowed();
  other.key_prefix = "/tenant-a-";
  SharedMemoryRegistry narrow(other);
  ShmObject object(4096);  // "/coalesce-guard-test-..."
  EXPECT_EQ(narrow.Register("c", "r", object.key(), 0, 4096, Me()).code(),
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
  ASSERT_TRUE(registry.Register("a", "a1", object.key(), 0, 8, Me()).ok());
  ASSERT_TRUE(registry.Register("a", "a2", object.key(), 0, 8, Me()).ok());
  const absl::Status per_client =
      registry.Register("a", "a3", object.key(), 0, 8, Me());
  EXPECT_EQ(per_client.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(per_client.message().find("--max_shm_regions_per_client"),
            std::string::npos)
      << per_client;
  ASSERT_TRUE(registry.Register("b", "b1", object.key(), 0, 8, Me()).ok());
  const absl::Status in_all =
      registry.Register("b", "b2", object.key(), 0, 8, Me());
  EXPECT_EQ(in_all.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(in_all.message().find("--max_shm_regions)"), std::string::npos)
      << in_all;
  ASSERT_TRUE(registry.Unregister("a", "a1").ok());
  EXPECT_TRUE(registry.Register("a", "a3", object.key(), 0, 8, Me()).ok());
  EXPECT_EQ(registry.List("a").size(), 2u);
  EXPECT_EQ(registry.List("b").size(), 1u);
}

// What a client shrinking its object under a running kernel does to the
// server: before the guard, the next touch of a lost page ended the process
// with SIGBUS.
TEST(MappingGuard, AShrunkRegionReadsZerosAndFailsItsRequests) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  ShmObject object(4 * page);
  SharedMemoryRegistry registry(Allowed());
  ASSERT_TRUE(
      registry.Register("c", "r", object.key(), 0, 4 * page, Me()).ok());
  absl::StatusOr<std::shared_ptr<const SharedMemoryRegion>> region =
      registry.Find("c", "r");
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
  void* mapping = mmap(nullptr, page, PROT_READ, MAP_SHARED, guarded.fd(), 0);
  ASSERT_NE(mapping, MAP_FAILED);
  const absl::StatusOr<MappingGuardSlot*> slot = GuardMapping(mapping, page);
  ASSERT_TRUE(slot.ok()) << slot.status();
  EXPECT_DEATH(
      {
        ShmObject object(2 * page);
        volatile char* p = static_cast<char*>(
            mmap(nullptr, 2 * page, PROT_READ, MAP_SHARED, object.fd(), 0));
        object.Unlink();  // this child dies before its destructor runs
        object.Truncate(0);
        (void)p[page];  // not guarded
      },
      "");
  EXPECT_FALSE(MappingFaulted(*slot));
  UnguardMapping(*slot);
  munmap(mapping, page);
}

// No fixed number of slots: with more mappings guarded at once than the old
// table held (1024), the newest still catches a truncation under a reader.
TEST(MappingGuard, GuardsEveryMappingHoweverMany) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  ShmObject shared(page);
  std::vector<std::pair<void*, MappingGuardSlot*>> others;
  for (int i = 0; i < 1500; ++i) {
    void* m =
        mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_SHARED, shared.fd(), 0);
    ASSERT_NE(m, MAP_FAILED);
    absl::StatusOr<MappingGuardSlot*> slot = GuardMapping(m, page);
    ASSERT_TRUE(slot.ok()) << i << ": " << slot.status();
    others.emplace_back(m, *slot);
  }
  ShmObject object(4 * page);
  char* last = static_cast<char*>(mmap(
      nullptr, 4 * page, PROT_READ | PROT_WRITE, MAP_SHARED, object.fd(), 0));
  ASSERT_NE(last, MAP_FAILED);
  const absl::StatusOr<MappingGuardSlot*> slot = GuardMapping(last, 4 * page);
  ASSERT_TRUE(slot.ok()) << slot.status();
  for (size_t i = 0; i < 4 * page; ++i)
    last[i] = static_cast<char>(i % 251 + 1);

  std::atomic<bool> reading{false};
  std::atomic<bool> saw_zero{false};
  std::thread reader([&] {
    volatile char* data = last;
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    while (absl::Now() < give_up) {
      reading.store(true);
      for (size_t i = 0; i < 4 * page; i += 512) {
        if (data[i] == 0) saw_zero.store(true);
      }
      if (MappingFaulted(*slot) && saw_zero.load()) return;
    }
  });
  while (!reading.load()) std::this_thread::yield();
  object.Truncate(0);
  reader.join();
  EXPECT_TRUE(MappingFaulted(*slot));
  EXPECT_TRUE(saw_zero.load()) << "the lost pages read as zeros";
  for (const auto& [m, s] : others) {
    EXPECT_FALSE(MappingFaulted(s));
    UnguardMapping(s);
    munmap(m, page);
  }
  UnguardMapping(*slot);
  munmap(last, 4 * page);
}

// Registration over TCP or in-process carries no uid: refused, after the
// cheaper answer that shared memory is off.
TEST(SharedMemoryRegistry, RegistersOnlyWithTheCallersUid) {
  ShmObject object(4096);
  SharedMemoryRegistry off;
  EXPECT_EQ(off.Register("c", "r", object.key(), 0, 4096, std::nullopt).code(),
            absl::StatusCode::kFailedPrecondition);
  SharedMemoryRegistry registry(Allowed());
  const absl::Status s =
      registry.Register("c", "r", object.key(), 0, 4096, std::nullopt);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_NE(s.message().find("--unix_socket"), std::string::npos) << s;
  EXPECT_TRUE(registry.List("c").empty());
}

// A client may know another user's key; the server still maps only objects
// the caller's uid owns.
TEST(SharedMemoryRegistry, TheObjectMustBelongToTheCaller) {
  ShmObject object(4096);
  SharedMemoryRegistry registry(Allowed());
  const uid_t stranger = geteuid() + 4242;
  const absl::Status s =
      registry.Register("c", "r", object.key(), 0, 4096, stranger);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_NE(s.message().find("'" + object.key() + "'"), std::string::npos) << s;
  EXPECT_EQ(s.message().find("bytes"), std::string::npos)
      << "nothing of another's object, not even its size: " << s;
  EXPECT_TRUE(registry.List("c").empty());
  // The object handed to the stranger: now theirs, no longer ours.
  if (fchown(object.fd(), stranger, static_cast<gid_t>(-1)) != 0) {
    GTEST_SKIP() << "cannot change an object's owner here (not root)";
  }
  EXPECT_EQ(registry.Register("c", "r", object.key(), 0, 4096, Me()).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(
      registry.Register("c", "r", object.key(), 0, 4096, stranger).ok());
}

// A symlink under /dev/shm is not followed, even to an object of the caller.
TEST(SharedMemoryRegistry, KeysAreNotFollowedThroughSymlinks) {
  ShmObject object(4096);
  const std::string link_key = object.key() + "-link";
  const std::string link_path = "/dev/shm" + link_key;
  ASSERT_EQ(symlink(("/dev/shm" + object.key()).c_str(), link_path.c_str()), 0)
      << std::strerror(errno);
  SharedMemoryRegistry registry(Allowed());
  const absl::Status s = registry.Register("c", "r", link_key, 0, 4096, Me());
  unlink(link_path.c_str());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(registry.List("c").empty());
}

// Names are per client; another client's region answers exactly as one
// never registered (compared with a registry that never held it).
TEST(SharedMemoryRegistry, RegionsArePerClient) {
  ShmObject first(4096);
  ShmObject second(8192);
  SharedMemoryRegistry registry(Allowed());
  SharedMemoryRegistry never(Allowed());
  ASSERT_TRUE(registry.Register("a", "r", first.key(), 0, 4096, Me()).ok());
  ASSERT_TRUE(registry.Register("b", "r", second.key(), 0, 8192, Me()).ok());
  absl::StatusOr<std::shared_ptr<const SharedMemoryRegion>> b =
      registry.Find("b", "r");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)->key(), second.key());
  EXPECT_EQ((*b)->owner(), "b");

  ASSERT_TRUE(registry.Register("a", "only-a", first.key(), 0, 8, Me()).ok());
  const absl::Status find = registry.Find("b", "only-a").status();
  EXPECT_EQ(find.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(find, never.Find("b", "only-a").status());
  const absl::Status unregister = registry.Unregister("b", "only-a");
  EXPECT_EQ(unregister.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(unregister, never.Unregister("b", "only-a"));
  ASSERT_EQ(registry.List("b").size(), 1u);
  EXPECT_EQ(registry.List("b")[0].key, second.key());
  EXPECT_EQ(registry.List("a").size(), 2u);
  EXPECT_TRUE(registry.Find("a", "only-a").ok());
  ASSERT_TRUE(registry.Unregister("a", "r").ok());
  EXPECT_TRUE(registry.Find("b", "r").ok());
}

}  // namespace
}  // namespace coalesce

namespace coalesce {
namespace {

// Stands in for Backend::OpenIpcMemory: host memory of allocation bytes
// whose release is counted, and how often it was asked.
struct FakeIpc {
  int64_t allocation = 4096;
  absl::Status error;
  int opened = 0;
  std::shared_ptr<std::atomic<int>> closed =
      std::make_shared<std::atomic<int>>(0);
  std::vector<char> memory = std::vector<char>(4096);

  auto Opener() {
    return [this](int64_t* bytes) -> absl::StatusOr<std::shared_ptr<void>> {
      ++opened;
      if (!error.ok()) return error;
      *bytes = allocation;
      return std::shared_ptr<void>(memory.data(),
                                   [c = closed](void*) { c->fetch_add(1); });
    };
  }
};

TEST(SharedMemoryRegistryDevice, ChecksTheCallerBeforeOpeningTheHandle) {
  FakeIpc ipc;
  SharedMemoryRegistry off;
  EXPECT_EQ(off.RegisterDevice("c", "r", 0, 64, Me(), ipc.Opener()).code(),
            absl::StatusCode::kFailedPrecondition);
  SharedMemoryRegistry registry(Allowed());
  EXPECT_EQ(registry.RegisterDevice("c", "r", 0, 64, std::nullopt, ipc.Opener())
                .code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(registry.RegisterDevice("c", "", 0, 64, Me(), ipc.Opener()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.RegisterDevice("c", "r", 0, 0, Me(), ipc.Opener()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ipc.opened, 0);
  ipc.error = absl::InvalidArgumentError("raw_handle: does not open");
  const absl::Status s =
      registry.RegisterDevice("c", "r", 0, 64, Me(), ipc.Opener());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("raw_handle"), absl::string_view::npos) << s;
  EXPECT_TRUE(registry.List("c").empty());
}

TEST(SharedMemoryRegistryDevice, ARegionMayNotClaimMoreThanWasExported) {
  FakeIpc ipc;
  SharedMemoryRegistry registry(Allowed());
  const absl::Status s =
      registry.RegisterDevice("c", "r", 0, 4097, Me(), ipc.Opener());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("byte_size: 4097"), absl::string_view::npos) << s;
  EXPECT_EQ(ipc.closed->load(), 1);  // the mapping was closed again
  EXPECT_TRUE(registry.List("c").empty());
}

TEST(SharedMemoryRegistryDevice, SharesNamesAndClosesAfterTheLastUse) {
  FakeIpc ipc;
  SharedMemoryRegistry registry(Allowed());
  ASSERT_TRUE(
      registry.RegisterDevice("c", "r", 3, 4096, Me(), ipc.Opener()).ok());
  // One namespace with system regions, per client.
  EXPECT_EQ(registry.RegisterDevice("c", "r", 3, 64, Me(), ipc.Opener()).code(),
            absl::StatusCode::kAlreadyExists);
  ShmObject object(4096);
  EXPECT_EQ(registry.Register("c", "r", object.key(), 0, 64, Me()).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(registry.Find("other", "r").status().code() ==
              absl::StatusCode::kNotFound);
  absl::StatusOr<std::shared_ptr<const SharedMemoryRegion>> found =
      registry.Find("c", "r");
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_TRUE((*found)->on_device());
  EXPECT_EQ((*found)->device_id(), 3);
  EXPECT_EQ((*found)->data(), ipc.memory.data());
  EXPECT_EQ((*found)->byte_size(), 4096u);
  EXPECT_TRUE((*found)->CheckAlive().ok());
  const std::vector<SharedMemoryListing> listed = registry.List("c");
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_TRUE(listed[0].on_device);
  EXPECT_EQ(listed[0].device_id, 3);
  // Unregistered as a CUDA region only; a request holding it keeps it open.
  EXPECT_EQ(registry.Unregister("c", "r").code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(registry.Unregister("c", "r", /*on_device=*/true).ok());
  EXPECT_EQ(ipc.closed->load(), 0);
  found->reset();
  EXPECT_EQ(ipc.closed->load(), 1);
}

}  // namespace
}  // namespace coalesce
