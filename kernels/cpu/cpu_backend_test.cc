// The CPU backend's resident memory: host memory, 64-byte aligned; copies in
// and out at any offset and in chunks of any size; ranges checked against the
// allocation; and Execute on operands marked resident (used in place). Its
// benchmark: both timings, and no same-size copy.
#include "kernels/cpu/cpu_backend.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace coalesce {
namespace {

using ::testing::HasSubstr;

std::string RandomBytes(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string out(n, '\0');
  for (char& c : out) c = static_cast<char>(rng());
  return out;
}

class CpuResidentTest : public testing::Test {
 protected:
  std::unique_ptr<Backend> backend_ = CreateCpuBackend(2);
};

TEST_F(CpuResidentTest, AllocationsAreAlignedHostMemory) {
  EXPECT_TRUE(backend_->resident_is_host_addressable());
  for (int64_t bytes :
       {int64_t{0}, int64_t{1}, int64_t{63}, int64_t{65}, int64_t{1} << 20}) {
    absl::StatusOr<std::shared_ptr<void>> m = backend_->AllocateResident(bytes);
    ASSERT_TRUE(m.ok()) << bytes << ": " << m.status();
    ASSERT_NE(m->get(), nullptr) << bytes;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(m->get()) % 64, 0u) << bytes;
  }
  absl::StatusOr<std::shared_ptr<void>> negative =
      backend_->AllocateResident(-1);
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CpuResidentTest, ChunkedCopiesAtOffsetsRoundTrip) {
  const int64_t n = 1000;
  const std::string want = RandomBytes(n, 1);
  absl::StatusOr<std::shared_ptr<void>> m = backend_->AllocateResident(n);
  ASSERT_TRUE(m.ok()) << m.status();
  // In by 7 bytes (chunk boundaries inside elements), out by 13.
  for (int64_t off = 0; off < n; off += 7) {
    const int64_t len = std::min<int64_t>(7, n - off);
    ASSERT_TRUE(
        backend_->CopyToResident(m->get(), n, off, want.data() + off, len).ok())
        << off;
  }
  std::string got(n, '\0');
  for (int64_t off = 0; off < n; off += 13) {
    const int64_t len = std::min<int64_t>(13, n - off);
    ASSERT_TRUE(
        backend_->CopyFromResident(m->get(), n, off, got.data() + off, len)
            .ok())
        << off;
  }
  EXPECT_EQ(got, want);
  // Host-addressable: the bytes are where the pointer says.
  EXPECT_EQ(std::memcmp(m->get(), want.data(), n), 0);
  // An interior range alone.
  std::string mid(100, '\0');
  ASSERT_TRUE(
      backend_->CopyFromResident(m->get(), n, 450, mid.data(), 100).ok());
  EXPECT_EQ(mid, want.substr(450, 100));
}

TEST_F(CpuResidentTest, RangesOutsideTheAllocationAreOutOfRange) {
  const int64_t n = 64;
  absl::StatusOr<std::shared_ptr<void>> m = backend_->AllocateResident(n);
  ASSERT_TRUE(m.ok()) << m.status();
  char buf[128] = {};
  struct Range {
    int64_t offset, bytes;
  };
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  for (const Range& r : {Range{0, 65}, Range{60, 5}, Range{65, 0}, Range{-1, 1},
                         Range{0, -1}, Range{kMax, 1}, Range{1, kMax}}) {
    const absl::Status in =
        backend_->CopyToResident(m->get(), n, r.offset, buf, r.bytes);
    EXPECT_EQ(in.code(), absl::StatusCode::kOutOfRange)
        << r.offset << "+" << r.bytes;
    EXPECT_THAT(in.message(), HasSubstr("64 bytes"));
    EXPECT_EQ(
        backend_->CopyFromResident(m->get(), n, r.offset, buf, r.bytes).code(),
        absl::StatusCode::kOutOfRange)
        << r.offset << "+" << r.bytes;
  }
  // The edges themselves are inside.
  EXPECT_TRUE(backend_->CopyToResident(m->get(), n, 0, buf, 64).ok());
  EXPECT_TRUE(backend_->CopyToResident(m->get(), n, 64, buf, 0).ok());
  EXPECT_TRUE(backend_->CopyFromResident(m->get(), n, 63, buf, 1).ok());
}

TEST_F(CpuResidentTest, WritersWriteInPiecesAndCheckRanges) {
  const int64_t n = 1000;
  const std::string want = RandomBytes(n, 2);
  absl::StatusOr<std::shared_ptr<void>> m = backend_->AllocateResident(n);
  ASSERT_TRUE(m.ok()) << m.status();
  std::unique_ptr<ResidentWriter> w = backend_->OpenResidentWriter(m->get(), n);
  // Pieces of 7 bytes, out of order; the source is reused at once.
  std::string piece;
  for (int64_t off = (n - 1) / 7 * 7; off >= 0; off -= 7) {
    piece = want.substr(off, 7);
    ASSERT_TRUE(w->Write(off, piece.data(), piece.size()).ok()) << off;
    piece.assign(piece.size(), '\0');
  }
  const absl::Status outside = w->Write(995, want.data(), 6);
  EXPECT_EQ(outside.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(outside.message(), HasSubstr("1000 bytes"));
  ASSERT_TRUE(w->Finish().ok());
  EXPECT_EQ(std::memcmp(m->get(), want.data(), n), 0);
}

TEST_F(CpuResidentTest, ExecuteUsesResidentOperandsInPlace) {
  const int64_t rows = 5, cols = 7, n = rows * cols * 4;
  const std::string in = RandomBytes(n, 2);
  absl::StatusOr<std::shared_ptr<void>> rin = backend_->AllocateResident(n);
  absl::StatusOr<std::shared_ptr<void>> rout = backend_->AllocateResident(n);
  ASSERT_TRUE(rin.ok() && rout.ok());
  ASSERT_TRUE(backend_->CopyToResident(rin->get(), n, 0, in.data(), n).ok());
  TransposeProblem tp;
  tp.rows = rows;
  tp.cols = cols;
  const Problem p = tp;
  const KernelVariant* v = backend_->registry().ForOp(OpKind::kTranspose)[0];
  ASSERT_TRUE(v->CanImplement(p, backend_->device()).ok());

  Operands resident;
  resident.inputs = {rin->get()};
  resident.outputs = {rout->get()};
  resident.input_spaces = {MemorySpace::kResident};
  resident.output_spaces = {MemorySpace::kResident};
  ASSERT_TRUE(backend_->Execute(*v, p, resident, nullptr).ok());
  std::string got(n, '\0');
  ASSERT_TRUE(
      backend_->CopyFromResident(rout->get(), n, 0, got.data(), n).ok());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      EXPECT_EQ(got.substr((c * rows + r) * 4, 4),
                in.substr((r * cols + c) * 4, 4))
          << r << "," << c;
    }
  }
}

TEST(CpuBenchmarkTest, TimesBothWaysAndHasNoCopyToTime) {
  std::unique_ptr<Backend> backend = CreateCpuBackend(2);
  TransposeProblem tp;
  tp.rows = 64;
  tp.cols = 48;
  const Problem p = tp;
  const KernelVariant* v = backend->registry().ForOp(OpKind::kTranspose)[0];
  BenchmarkOptions opts;
  opts.warmup = 1;
  opts.reps = 5;
  opts.min_footprint_bytes = 1 << 20;
  absl::StatusOr<BenchmarkResult> r = backend->Benchmark(*v, p, opts);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->reps, 5);
  EXPECT_GT(r->median_seconds, 0);
  EXPECT_GT(r->back_to_back_seconds, 0);

  absl::StatusOr<BenchmarkResult> copy =
      backend->BenchmarkCopy(MinBytesMoved(p) / 2, opts);
  EXPECT_EQ(copy.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(copy.status().message(), HasSubstr("cpu backend"));
}

}  // namespace
}  // namespace coalesce
