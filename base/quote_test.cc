#include "base/quote.h"

#include <string>

#include "gtest/gtest.h"

namespace coalesce {
namespace {

TEST(QuotedTest, ShortStringsAreQuotedWhole) {
  EXPECT_EQ(Quoted("transpose.cuda.vec16"), "'transpose.cuda.vec16'");
  EXPECT_EQ(Quoted(""), "''");
}

TEST(QuotedTest, LongStringsAreCutAndTheirLengthNamed) {
  const std::string name(65536, 'x');
  const std::string q = Quoted(name);
  EXPECT_EQ(q, "'" + std::string(kMaxQuotedBytes, 'x') + "...' (65536 bytes)");
  EXPECT_EQ(Quoted(std::string(kMaxQuotedBytes, 'y')),
            "'" + std::string(kMaxQuotedBytes, 'y') + "'");
}

TEST(QuotedTest, NonPrintableBytesAreEscaped) {
  EXPECT_EQ(Quoted(std::string("a\nb\0z", 5)), "'a\\nb\\x00z'");
  EXPECT_EQ(Quoted("it's"), "'it\\'s'");
}

}  // namespace
}  // namespace coalesce
