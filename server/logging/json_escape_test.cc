#include "server/logging/json_escape.h"

#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace coalesce {
namespace {

// What a JSON parser reads back from text escaped as a string.
std::string RoundTrip(const std::string& text) {
  return nlohmann::json::parse(JsonString(text)).get<std::string>();
}

TEST(JsonEscapeTest, QuotesAndBackslashes) {
  EXPECT_EQ(JsonString(R"(say "hi" \ bye)"), R"("say \"hi\" \\ bye")");
  EXPECT_EQ(RoundTrip(R"(a"b\c)"), R"(a"b\c)");
}

TEST(JsonEscapeTest, ShortEscapes) {
  EXPECT_EQ(JsonString("a\nb\rc\td\be\ff"), R"("a\nb\rc\td\be\ff")");
}

TEST(JsonEscapeTest, OtherControlCharactersAsUnicode) {
  EXPECT_EQ(JsonString(std::string("\x00\x01\x1f\x7f", 4)),
            R"("\u0000\u0001\u001f\u007f")");
  EXPECT_EQ(RoundTrip(std::string("x\x00y", 3)), std::string("x\x00y", 3));
}

TEST(JsonEscapeTest, ValidUtf8KeptAsIs) {
  const std::string text = "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80";
  EXPECT_EQ(JsonString(text), "\"" + text + "\"");
  EXPECT_EQ(RoundTrip(text), text);
}

TEST(JsonEscapeTest, InvalidUtf8Replaced) {
  // A lone continuation byte, a truncated sequence, an overlong '/', a
  // surrogate, a byte that never starts a sequence.
  for (const std::string bad :
       {"\x80", "\xe2\x82", "\xc0\xaf", "\xed\xa0\x80", "\xff"}) {
    const std::string escaped = JsonString("a" + bad + "b");
    EXPECT_EQ(escaped.find_first_of("\x80\xc0\xe2\xed\xff"), std::string::npos)
        << escaped;
    EXPECT_NO_THROW(nlohmann::json::parse(escaped)) << escaped;
    EXPECT_EQ(escaped.substr(0, 8), R"("a\ufffd)");
  }
}

TEST(JsonEscapeTest, AppendsWithoutQuotes) {
  std::string out = "x=";
  AppendJsonEscaped("\"", &out);
  EXPECT_EQ(out, R"(x=\")");
}

}  // namespace
}  // namespace coalesce
