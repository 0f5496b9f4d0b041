#include "server/auth/authenticator.h"

#include <gmock/gmock.h>
#include <grpcpp/server_context.h>
#include <grpcpp/test/server_context_test_spouse.h>
#include <gtest/gtest.h>

#include <random>
#include <string>

namespace coalesce {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string RandomToken(uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> pick('a', 'z');
  std::string s;
  for (int i = 0; i < 32; ++i) s += static_cast<char>(pick(rng));
  return s;
}

class AuthenticatorTest : public testing::Test {
 protected:
  AuthenticatorTest()
      : user_token_(RandomToken(1)), admin_token_(RandomToken(2)) {
    options_.tokens.entries = {{user_token_, "team-a", Role::kUser},
                               {admin_token_, "ops", Role::kAdmin}};
  }

  absl::StatusOr<Caller> Authenticate(const Authenticator& auth,
                                      const std::string& key,
                                      const std::string& value) {
    grpc::ServerContext context;
    grpc::testing::ServerContextTestSpouse spouse(&context);
    if (!key.empty()) spouse.AddClientMetadata(key, value);
    return auth.Authenticate(context);
  }

  std::string user_token_, admin_token_;
  AuthOptions options_;
};

TEST_F(AuthenticatorTest, TokensNameIdentityAndRole) {
  Authenticator auth(options_, nullptr);
  ASSERT_TRUE(auth.enabled());
  absl::StatusOr<Caller> user =
      Authenticate(auth, "authorization", "Bearer " + user_token_);
  ASSERT_TRUE(user.ok()) << user.status();
  EXPECT_EQ(user->identity, "team-a");
  EXPECT_EQ(user->role, Role::kUser);
  absl::StatusOr<Caller> admin =
      Authenticate(auth, "authorization", "bearer " + admin_token_);
  ASSERT_TRUE(admin.ok()) << admin.status();
  EXPECT_EQ(admin->identity, "ops");
  EXPECT_EQ(admin->role, Role::kAdmin);
}

TEST_F(AuthenticatorTest, NoProofIsUnauthenticatedAndTokensAreNeverEchoed) {
  Authenticator auth(options_, nullptr);
  const std::string wrong = RandomToken(3);
  for (const auto& [key, value] :
       {std::pair<std::string, std::string>{"", ""},
        {"x-coalesce-client", "team-a"},
        {"authorization", "Bearer " + wrong},
        {"authorization", "Basic " + wrong},
        {"authorization", "Bearer " + user_token_.substr(1)}}) {
    absl::StatusOr<Caller> c = Authenticate(auth, key, value);
    ASSERT_FALSE(c.ok()) << key << ": " << value;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kUnauthenticated);
    EXPECT_THAT(c.status().message(), Not(HasSubstr(wrong)));
    EXPECT_THAT(c.status().message(), Not(HasSubstr(user_token_.substr(1))));
  }
}

TEST_F(AuthenticatorTest, WithoutAuthenticationTheHeaderNamesAnAdmin) {
  Authenticator auth(AuthOptions(), nullptr);
  EXPECT_FALSE(auth.enabled());
  absl::StatusOr<Caller> c = Authenticate(auth, "x-coalesce-client", "bench-7");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->identity, "bench-7");
  EXPECT_EQ(c->role, Role::kAdmin);
  absl::StatusOr<Caller> huge =
      Authenticate(auth, "x-coalesce-client", std::string(4096, 'x'));
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_LT(huge.status().message().size(), 200u);
}

TEST(PeerCredentialsTest, OnlyFdPeersHaveUids) {
  PeerCredentials peers;
  peers.Set(17, 1234);
  EXPECT_EQ(peers.Lookup("fd:17"), std::optional<uid_t>(1234));
  EXPECT_EQ(peers.Lookup("fd:18"), std::nullopt);
  EXPECT_EQ(peers.Lookup("ipv4:127.0.0.1:17"), std::nullopt);
  EXPECT_EQ(peers.Lookup("fd:17x"), std::nullopt);
  peers.Set(17, 99);  // the descriptor now serves another connection
  EXPECT_EQ(peers.Lookup("fd:17"), std::optional<uid_t>(99));
}

TEST(AuthorizeTest, AdminOnlyWorkNamesTheRole) {
  Caller user{"team-a", Role::kUser, std::nullopt};
  absl::Status denied =
      Authorize(user, Role::kAdmin, "ExplainSelection.measure");
  EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(denied.message(),
              HasSubstr("ExplainSelection.measure needs the admin role"));
  EXPECT_TRUE(Authorize(user, Role::kUser, "Transpose").ok());
  Caller admin{"ops", Role::kAdmin, std::nullopt};
  EXPECT_TRUE(Authorize(admin, Role::kAdmin, "ExplainSelection.measure").ok());
}

}  // namespace
}  // namespace coalesce
