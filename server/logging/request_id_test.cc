#include "server/logging/request_id.h"

#include <set>
#include <string>

#include "gtest/gtest.h"

namespace coalesce {
namespace {

constexpr char kTraceparent[] =
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
constexpr char kTraceId[] = "4bf92f3577b34da6a3ce929d0e0e4736";

bool Hex32(const std::string& id) {
  return id.size() == 32 &&
         id.find_first_not_of("0123456789abcdef") == std::string::npos;
}

TEST(RequestIdTest, ClientIdTakenWhenValid) {
  EXPECT_EQ(ResolveRequestId("req-42", ""), "req-42");
  EXPECT_EQ(ResolveRequestId("req-42", kTraceparent), "req-42");
  EXPECT_EQ(ResolveRequestId(std::string(kMaxRequestIdLength, 'a'), ""),
            std::string(kMaxRequestIdLength, 'a'));
}

TEST(RequestIdTest, InvalidClientIdIgnored) {
  for (const std::string bad :
       {std::string(kMaxRequestIdLength + 1, 'a'), std::string("a b"),
        std::string("a\nb"), std::string("a\x7f"), std::string("caf\xc3\xa9"),
        std::string("a\"b\x01")}) {
    EXPECT_FALSE(ValidRequestId(bad)) << bad;
    EXPECT_EQ(ResolveRequestId(bad, kTraceparent), kTraceId) << bad;
  }
}

TEST(RequestIdTest, TraceparentTraceId) {
  EXPECT_EQ(TraceIdOf(kTraceparent), kTraceId);
  EXPECT_EQ(ResolveRequestId("", kTraceparent), kTraceId);
  // A later version may carry more fields.
  EXPECT_EQ(
      TraceIdOf("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xyz"),
      kTraceId);
}

TEST(RequestIdTest, InvalidTraceparents) {
  for (const char* bad : {
           "",
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",      // short
           "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",   // upper
           "00-00000000000000000000000000000000-00f067aa0ba902b7-01",   // zero
           "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",   // zero
           "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",   // ff
           "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",   // sep
           "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",   // hex
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0x",   // flags
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",  // v00+
           "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",  // sep
       }) {
    EXPECT_EQ(TraceIdOf(bad), std::nullopt) << bad;
    EXPECT_TRUE(Hex32(ResolveRequestId("", bad))) << bad;
  }
}

TEST(RequestIdTest, GeneratedIdsAreRandomHex) {
  std::set<std::string> ids;
  for (int i = 0; i < 1000; ++i) {
    const std::string id = ResolveRequestId("", "");
    EXPECT_TRUE(Hex32(id)) << id;
    ids.insert(id);
  }
  EXPECT_EQ(ids.size(), 1000u);
}

}  // namespace
}  // namespace coalesce
