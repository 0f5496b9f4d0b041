#include "server/auth/token_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "absl/strings/str_cat.h"

namespace coalesce {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A token of n random printable characters (no space, no '#').
std::string RandomToken(std::mt19937& rng, int n) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~+/=";
  std::uniform_int_distribution<int> pick(0, sizeof(kAlphabet) - 2);
  std::string s;
  for (int i = 0; i < n; ++i) s += kAlphabet[pick(rng)];
  return s;
}

TEST(TokenFileTest, ParsesEntriesCommentsAndBlankLines) {
  std::mt19937 rng(7);
  const std::string a = RandomToken(rng, 32), b = RandomToken(rng, 40),
                    c = RandomToken(rng, 16);
  const std::string text =
      absl::StrCat("# tokens\n\n", a, " alice user\n  ", b,
                   "\tops-bot admin   # rotated monthly\r\n", c, " alice user");
  absl::StatusOr<TokenTable> t = ParseTokenFile(text);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->entries.size(), 3u);
  EXPECT_EQ(t->entries[0].token, a);
  EXPECT_EQ(t->entries[0].identity, "alice");
  EXPECT_EQ(t->entries[0].role, Role::kUser);
  EXPECT_EQ(t->entries[1].token, b);
  EXPECT_EQ(t->entries[1].identity, "ops-bot");
  EXPECT_EQ(t->entries[1].role, Role::kAdmin);
  EXPECT_EQ(t->entries[2].token, c);
}

TEST(TokenFileTest, EmptyFileHasNoTokens) {
  absl::StatusOr<TokenTable> t = ParseTokenFile("# nothing yet\n\n");
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->entries.empty());
}

TEST(TokenFileTest, ErrorsNameTheLineAndNeverTheToken) {
  std::mt19937 rng(11);
  const std::string token = RandomToken(rng, 24);
  const struct {
    std::string text;
    std::string message;
  } cases[] = {
      {absl::StrCat("\n", token, " alice"),
       "line 2: expected 'TOKEN IDENTITY ROLE'"},
      {absl::StrCat(token.substr(0, 15), " alice user"),
       "line 1: the token must be 16 to 256"},
      {absl::StrCat(token, " al/ice user"), "line 1: identity 'al/ice'"},
      {absl::StrCat(token, " alice root"),
       "line 1: role 'root' must be user or admin"},
      {absl::StrCat(token, " alice user\n", token, " bob user"),
       "line 2: this token already appears"},
      {absl::StrCat(token, " alice user\n", RandomToken(rng, 20),
                    " alice admin"),
       "line 2: identity 'alice' has another role"},
      {absl::StrCat(std::string(300, 'x'), " alice user"),
       "the token must be 16 to 256"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<TokenTable> t = ParseTokenFile(c.text);
    ASSERT_FALSE(t.ok()) << c.text;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(t.status().message(), HasSubstr(c.message));
    EXPECT_THAT(t.status().message(), Not(HasSubstr(token.substr(0, 15))));
  }
}

TEST(TokenFileTest, LoadReportsAMissingFile) {
  absl::StatusOr<TokenTable> t = LoadTokenFile("/nonexistent/tokens");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
}

TEST(TokenFileTest, IdentityRules) {
  EXPECT_TRUE(ValidIdentity("svc.team_a-1@prod"));
  EXPECT_FALSE(ValidIdentity(""));
  EXPECT_FALSE(ValidIdentity(std::string(65, 'a')));
  EXPECT_FALSE(ValidIdentity("uid:1000"));
  EXPECT_FALSE(ValidIdentity("a b"));
}

}  // namespace
}  // namespace coalesce
