#include "kernels/cuda/runtime/dynamic_library.h"

#include <gtest/gtest.h>

#include <cstddef>

namespace coalesce::cuda {
namespace {

TEST(DynamicLibrary, TheFirstNameThatLoadsWins) {
  absl::StatusOr<void*> lib =
      OpenFirstLibrary("libc", {"libcoalesce-no-such-library.so", "libc.so.6"});
  ASSERT_TRUE(lib.ok()) << lib.status();
  SymbolBinder binder(*lib);
  size_t (*strlen_fn)(const char*) = nullptr;
  int (*absent_fn)() = nullptr;
  binder.Bind(strlen_fn, "strlen");
  binder.Bind(absent_fn, "coalesce_no_such_symbol");
  ASSERT_NE(strlen_fn, nullptr);
  EXPECT_EQ(strlen_fn("four"), 4u);
  EXPECT_EQ(absent_fn, nullptr);
  ASSERT_EQ(binder.missing().size(), 1u);
  EXPECT_EQ(binder.missing()[0], "coalesce_no_such_symbol");
}

TEST(DynamicLibrary, NoneLoadingSaysWhatAndWhy) {
  absl::StatusOr<void*> lib = OpenFirstLibrary(
      "Widget", {"libcoalesce-no-such-a.so", "libcoalesce-no-such-b.so"});
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.status().code(), absl::StatusCode::kUnimplemented);
  const std::string message(lib.status().message());
  EXPECT_EQ(message.rfind("Widget is not available: ", 0), 0u) << message;
  EXPECT_NE(message.find("libcoalesce-no-such-a.so"), std::string::npos);
  EXPECT_NE(message.find("libcoalesce-no-such-b.so"), std::string::npos);
}

}  // namespace
}  // namespace coalesce::cuda
