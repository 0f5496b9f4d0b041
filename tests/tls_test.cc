// TLS end to end: the real coalesce-server serving TLS with bearer tokens,
// and mutual TLS where the client certificate's common name is the
// caller's identity, driven by the client library and the real `coalesce`
// CLI. The certificates (a CA, a server certificate for localhost and
// 127.0.0.1, client certificates for alice and ops-admin, and a second CA
// with a certificate of its own for alice) are made at test time with the
// `openssl` command; without it every test is skipped, saying so.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/e2e_support.h"

namespace coalesce {
namespace {

using ::testing::HasSubstr;

using e2e::ProcessUsage;
using e2e::RandomFloats;
using e2e::ServerUnderTest;

constexpr char kCliBinary[] = COALESCE_CLI_BINARY;

// Certificates and keys, made once for the whole run.
struct Pki {
  std::string dir;
  std::string ca, other_ca;                 // PEM certificates
  std::string server_cert, server_key;      // CN and SAN localhost
  std::string alice_cert, alice_key;        // CN alice, from ca
  std::string admin_cert, admin_key;        // CN ops-admin, from ca
  std::string impostor_cert, impostor_key;  // CN alice, from other_ca
  std::string alice_token, admin_token;
  std::string alice_token_file;
};

// Runs openssl with args; an error naming the step when it fails.
absl::Status OpenSsl(const std::string& openssl,
                     const std::vector<std::string>& args) {
  std::vector<std::string> argv = {openssl};
  argv.insert(argv.end(), args.begin(), args.end());
  const e2e::CommandResult r = e2e::RunCommand(argv, absl::Seconds(60));
  if (r.exit_code != 0) {
    return absl::InternalError(absl::StrCat("openssl ", args[0], " ", args[1],
                                            " failed (exit ", r.exit_code,
                                            "): ", r.err));
  }
  return absl::OkStatus();
}

// A P-256 key and a certificate for subject, signed by the CA (ca, ca_key)
// with the extensions in ext; or self-signed as a CA when ca is empty.
absl::Status MakeCertificate(const std::string& openssl, const std::string& dir,
                             const std::string& name,
                             const std::string& subject, const std::string& ext,
                             const std::string& ca, const std::string& ca_key) {
  const std::string key = absl::StrCat(dir, "/", name, ".key");
  const std::string cert = absl::StrCat(dir, "/", name, ".pem");
  if (ca.empty()) {
    return OpenSsl(openssl,
                   {"req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key,
                    "-out", cert, "-days", "2", "-subj", subject, "-addext",
                    "basicConstraints=critical,CA:TRUE", "-addext",
                    "keyUsage=critical,keyCertSign,cRLSign"});
  }
  const std::string csr = absl::StrCat(dir, "/", name, ".csr");
  const std::string ext_file = absl::StrCat(dir, "/", name, ".ext");
  if (!e2e::WriteFile(ext_file, ext)) {
    return absl::InternalError(absl::StrCat("cannot write ", ext_file));
  }
  absl::Status s =
      OpenSsl(openssl, {"req", "-new", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
                        key, "-out", csr, "-subj", subject});
  if (!s.ok()) return s;
  return OpenSsl(openssl,
                 {"x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key,
                  "-set_serial", absl::StrCat("0x", e2e::RandomHex(8)), "-out",
                  cert, "-days", "2", "-extfile", ext_file});
}

absl::StatusOr<Pki> MakePki(const std::string& openssl) {
  Pki p;
  p.dir = e2e::MakeTempDir("pki");
  auto path = [&](const std::string& file) {
    return absl::StrCat(p.dir, "/", file);
  };
  const std::string leaf =
      "basicConstraints=CA:FALSE\n"
      "keyUsage=critical,digitalSignature,keyEncipherment\n";
  for (const auto& [name, subject] :
       {std::pair<std::string, std::string>{"ca", "/CN=coalesce test CA"},
        {"other-ca", "/CN=coalesce other CA"}}) {
    absl::Status s = MakeCertificate(openssl, p.dir, name, subject, "", "", "");
    if (!s.ok()) return s;
  }
  struct Leaf {
    std::string name, subject, ext, ca;
  };
  for (const Leaf& l : {
           Leaf{"server", "/CN=localhost",
                leaf + "extendedKeyUsage=serverAuth\n"
                       "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
                "ca"},
           Leaf{"alice", "/CN=alice", leaf + "extendedKeyUsage=clientAuth\n",
                "ca"},
           Leaf{"ops-admin", "/CN=ops-admin",
                leaf + "extendedKeyUsage=clientAuth\n", "ca"},
           Leaf{"impostor", "/CN=alice", leaf + "extendedKeyUsage=clientAuth\n",
                "other-ca"},
       }) {
    absl::Status s = MakeCertificate(openssl, p.dir, l.name, l.subject, l.ext,
                                     path(l.ca + ".pem"), path(l.ca + ".key"));
    if (!s.ok()) return s;
  }
  p.ca = path("ca.pem");
  p.other_ca = path("other-ca.pem");
  p.server_cert = path("server.pem");
  p.server_key = path("server.key");
  p.alice_cert = path("alice.pem");
  p.alice_key = path("alice.key");
  p.admin_cert = path("ops-admin.pem");
  p.admin_key = path("ops-admin.key");
  p.impostor_cert = path("impostor.pem");
  p.impostor_key = path("impostor.key");
  p.alice_token = e2e::RandomHex(16);
  p.admin_token = e2e::RandomHex(16);
  p.alice_token_file = path("alice.token");
  if (!e2e::WriteFile(p.alice_token_file, p.alice_token + "\n") ||
      !e2e::WriteFile(path("tokens"),
                      absl::StrCat(p.alice_token, " alice user\n",
                                   p.admin_token, " ops-admin admin\n"))) {
    return absl::InternalError("cannot write the token files");
  }
  return p;
}

// The certificates and the two servers, made on first use.
struct TlsWorld {
  std::string skip;   // why the tests cannot run here
  std::string error;  // what failed while setting up
  Pki pki;
  std::unique_ptr<ServerUnderTest> tls;   // TLS and bearer tokens
  std::unique_ptr<ServerUnderTest> mtls;  // TLS and client certificates
};

TlsWorld& World() {
  static TlsWorld* world = [] {
    auto* w = new TlsWorld;
    const std::string openssl = e2e::FindOnPath("openssl");
    if (openssl.empty()) {
      w->skip =
          "the openssl command is not installed (Debian package `openssl`, "
          "which scripts/install-deps.sh installs): it makes the test "
          "certificates";
      return w;
    }
    absl::StatusOr<Pki> pki = MakePki(openssl);
    if (!pki.ok()) {
      w->error = pki.status().ToString();
      return w;
    }
    w->pki = *std::move(pki);
    absl::StatusOr<std::unique_ptr<ServerUnderTest>> tls =
        ServerUnderTest::Start({"--tls_cert=" + w->pki.server_cert,
                                "--tls_key=" + w->pki.server_key,
                                "--auth_tokens=" + w->pki.dir + "/tokens"});
    absl::StatusOr<std::unique_ptr<ServerUnderTest>> mtls =
        ServerUnderTest::Start({"--tls_cert=" + w->pki.server_cert,
                                "--tls_key=" + w->pki.server_key,
                                "--tls_client_ca=" + w->pki.ca,
                                "--admin_identities=ops-admin"});
    if (!tls.ok() || !mtls.ok()) {
      w->error = absl::StrCat("TLS server: ", tls.status().ToString(),
                              "; mTLS server: ", mtls.status().ToString());
      return w;
    }
    w->tls = *std::move(tls);
    w->mtls = *std::move(mtls);
    return w;
  }();
  return *world;
}

// Stops the servers at the end of the run; one that died shows here.
class TlsEnvironment : public ::testing::Environment {
 public:
  void TearDown() override {
    TlsWorld& w = World();
    for (std::unique_ptr<ServerUnderTest>* s : {&w.tls, &w.mtls}) {
      if (*s == nullptr) continue;
      EXPECT_TRUE((*s)->Running()) << "a server died:\n" << (*s)->LogTail();
      EXPECT_TRUE((*s)->Terminate(absl::Seconds(15)).exited);
      s->reset();
    }
    if (!w.pki.dir.empty()) {
      std::error_code ignored;
      std::filesystem::remove_all(w.pki.dir, ignored);
    }
  }
};

::testing::Environment* const kTlsEnvironment =
    ::testing::AddGlobalTestEnvironment(new TlsEnvironment);

struct Credentials {
  std::string ca;
  std::string cert, key;
  std::string token;
  std::string server_name;
  std::string client_id;
};

Credentials WithCa(const std::string& ca) {
  Credentials c;
  c.ca = ca;
  return c;
}

Credentials WithCertificate(const std::string& ca, const std::string& cert,
                            const std::string& key) {
  Credentials c = WithCa(ca);
  c.cert = cert;
  c.key = key;
  return c;
}

absl::StatusOr<std::unique_ptr<Client>> Connect(const std::string& target,
                                                const Credentials& c) {
  ClientOptions options;
  options.server = target;
  options.tls_ca_path = c.ca;
  options.tls_cert_path = c.cert;
  options.tls_key_path = c.key;
  options.token = c.token;
  options.tls_server_name = c.server_name;
  options.client_id = c.client_id;
  options.timeout = absl::Seconds(30);
  // A refused handshake must not be answered from another test's pooled
  // connection.
  options.own_connection = true;
  return Client::Connect(options);
}

// A test against one of the two servers; at its end the server still
// serves (through a client with good credentials) within its bounds.
class TlsServerTest : public ::testing::Test {
 protected:
  virtual ServerUnderTest* Server() = 0;
  virtual Credentials Good() = 0;

  void SetUp() override {
    TlsWorld& w = World();
    if (!w.skip.empty()) GTEST_SKIP() << w.skip;
    ASSERT_TRUE(w.error.empty()) << w.error;
    server_ = Server();
    ASSERT_NE(server_, nullptr);
    ASSERT_TRUE(server_->Running()) << server_->LogTail();
    // A server's first calls and refused handshakes set up what it keeps
    // (thread arenas, TLS contexts, a sanitizer's shadow pages): done once
    // before the first baseline, so that the bound measures growth per test.
    static absl::flat_hash_set<ServerUnderTest*>* warmed =
        new absl::flat_hash_set<ServerUnderTest*>;
    if (warmed->insert(server_).second) {
      absl::StatusOr<std::unique_ptr<Client>> good =
          Connect(Localhost(), Good());
      ASSERT_TRUE(good.ok()) << good.status();
      e2e::ExpectServing(**good, 0x716);
      InfoCode(Localhost(), WithCa(pki().other_ca));
    }
    absl::StatusOr<ProcessUsage> usage = e2e::ReadUsage(server_->pid());
    ASSERT_TRUE(usage.ok()) << usage.status();
    before_ = *usage;
  }

  void TearDown() override {
    if (server_ == nullptr || IsSkipped()) return;
    ASSERT_TRUE(server_->Running()) << "the server died:\n"
                                    << server_->LogTail();
    absl::StatusOr<std::unique_ptr<Client>> good = Connect(Localhost(), Good());
    ASSERT_TRUE(good.ok()) << good.status();
    absl::StatusOr<v1::ListTensorsResponse> left = (*good)->ListTensors();
    ASSERT_TRUE(left.ok()) << left.status();
    for (const v1::TensorInfo& t : left->tensors()) {
      EXPECT_TRUE((*good)->DeleteTensor(t.handle()).ok());
    }
    e2e::ExpectServing(**good, 0x715);
    // The handshakes and the few KiB each test moves: what glibc keeps of
    // them is well under this (twice that under a sanitizer); the test's
    // connections are closed by now, give or take the one the check used.
    e2e::ExpectBounded(server_->pid(), before_,
                       (e2e::kSanitizedBuild ? 64 : 32) << 20, 8);
    if (HasFailure()) {
      std::fprintf(stderr, "--- server log (tail):\n%s\n",
                   server_->LogTail().c_str());
    }
  }

  std::string Localhost() const {
    return absl::StrCat("localhost:", server_->port());
  }
  const Pki& pki() const { return World().pki; }

  // The code of a call that needs no identity beyond the connection.
  absl::StatusCode InfoCode(const std::string& target, const Credentials& c) {
    absl::StatusOr<std::unique_ptr<Client>> client = Connect(target, c);
    EXPECT_TRUE(client.ok()) << client.status();
    if (!client.ok()) return client.status().code();
    return (*client)->GetServerInfo().status().code();
  }

  ServerUnderTest* server_ = nullptr;
  ProcessUsage before_;
};

class TlsTest : public TlsServerTest {
 protected:
  ServerUnderTest* Server() override { return World().tls.get(); }
  Credentials Good() override {
    Credentials c = WithCa(pki().ca);
    c.token = pki().alice_token;
    return c;
  }
};

TEST_F(TlsTest, ATokenOverTlsWorks) {
  // By name, by address (the certificate names 127.0.0.1 too), and by
  // address with the name given.
  for (const auto& [target, server_name] :
       {std::pair<std::string, std::string>{Localhost(), ""},
        {absl::StrCat("127.0.0.1:", server_->port()), ""},
        {absl::StrCat("127.0.0.1:", server_->port()), "localhost"}}) {
    SCOPED_TRACE(target + " " + server_name);
    Credentials c = Good();
    c.server_name = server_name;
    absl::StatusOr<std::unique_ptr<Client>> client = Connect(target, c);
    ASSERT_TRUE(client.ok()) << client.status();
    e2e::ExpectServing(**client, 0x7151);
    const std::vector<float> values = RandomFloats(40, 0x7152);
    absl::StatusOr<v1::TensorInfo> put = (*client)->PutTensor(
        v1::DATA_TYPE_FLOAT32, {5, 8}, e2e::FloatBytes(values), "over-tls");
    ASSERT_TRUE(put.ok()) << put.status();
    EXPECT_EQ(put->owner(), "alice");
    absl::StatusOr<FetchedTensor> got = (*client)->GetTensor("over-tls");
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->bytes, e2e::FloatBytes(values));
    ASSERT_TRUE((*client)->DeleteTensor("over-tls").ok());
  }
}

TEST_F(TlsTest, TlsWithoutATokenIsUnauthenticated) {
  Credentials c = Good();
  c.token.clear();
  absl::StatusOr<std::unique_ptr<Client>> client = Connect(Localhost(), c);
  ASSERT_TRUE(client.ok()) << client.status();
  const absl::Status info = (*client)->GetServerInfo().status();
  EXPECT_EQ(info.code(), absl::StatusCode::kUnauthenticated) << info;
  EXPECT_THAT(info.message(), HasSubstr("requires a bearer token"));
  // Health checks need none.
  absl::StatusOr<std::string> health = (*client)->Health();
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, "SERVING");
}

TEST_F(TlsTest, APlaintextClientIsUnavailable) {
  Credentials c = Good();
  c.ca.clear();
  for (const std::string& target :
       {Localhost(), absl::StrCat("127.0.0.1:", server_->port())}) {
    EXPECT_EQ(InfoCode(target, c), absl::StatusCode::kUnavailable) << target;
  }
}

TEST_F(TlsTest, AServerCertificateTheClientCannotVerifyIsUnavailable) {
  Credentials other_ca = Good();
  other_ca.ca = pki().other_ca;
  EXPECT_EQ(InfoCode(Localhost(), other_ca), absl::StatusCode::kUnavailable);
  // Signed by the right CA, but for another name.
  Credentials wrong_name = Good();
  wrong_name.server_name = "coalesce.invalid";
  EXPECT_EQ(InfoCode(Localhost(), wrong_name), absl::StatusCode::kUnavailable);
}

class MutualTlsTest : public TlsServerTest {
 protected:
  ServerUnderTest* Server() override { return World().mtls.get(); }
  Credentials Good() override {
    return WithCertificate(pki().ca, pki().alice_cert, pki().alice_key);
  }
};

TEST_F(MutualTlsTest, NoClientCertificateIsRefused) {
  Credentials c = Good();
  c.cert.clear();
  c.key.clear();
  EXPECT_EQ(InfoCode(Localhost(), c), absl::StatusCode::kUnavailable);
  // Nor does a token stand in for it: this server takes none.
  c.token = pki().alice_token;
  EXPECT_EQ(InfoCode(Localhost(), c), absl::StatusCode::kUnavailable);
}

TEST_F(MutualTlsTest, ACertificateFromAnotherCaIsRefused) {
  // Its common name is alice's, but no CA the server trusts signed it.
  Credentials c = Good();
  c.cert = pki().impostor_cert;
  c.key = pki().impostor_key;
  EXPECT_EQ(InfoCode(Localhost(), c), absl::StatusCode::kUnavailable);
}

TEST_F(MutualTlsTest, TheCommonNameIsTheIdentity) {
  Credentials c = Good();
  // A forged x-coalesce-client does not count.
  c.client_id = "ops-admin";
  absl::StatusOr<std::unique_ptr<Client>> alice = Connect(Localhost(), c);
  ASSERT_TRUE(alice.ok()) << alice.status();
  const std::vector<float> values = RandomFloats(12, 0x7153);
  absl::StatusOr<v1::TensorInfo> put = (*alice)->PutTensor(
      v1::DATA_TYPE_FLOAT32, {3, 4}, e2e::FloatBytes(values), "mine");
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(put->owner(), "alice");
  absl::StatusOr<v1::ListTensorsResponse> listed = (*alice)->ListTensors();
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->tensors_size(), 1);
  EXPECT_EQ(listed->tensors(0).owner(), "alice");
  // ops-admin is another identity: alice's tensor is not there.
  absl::StatusOr<std::unique_ptr<Client>> admin =
      Connect(Localhost(),
              WithCertificate(pki().ca, pki().admin_cert, pki().admin_key));
  ASSERT_TRUE(admin.ok()) << admin.status();
  const absl::Status theirs = (*admin)->GetTensor("mine").status();
  EXPECT_EQ(theirs.code(), absl::StatusCode::kNotFound) << theirs;
  EXPECT_THAT(theirs.message(), HasSubstr("handle: no tensor 'mine'"));
}

TEST_F(MutualTlsTest, AnAdminIdentityMayMeasureAndAUserMayNot) {
  v1::ExplainSelectionRequest request;
  v1::Tensor* in = request.mutable_transpose()->mutable_input();
  in->set_dtype(v1::DATA_TYPE_FLOAT32);
  in->add_shape(72);
  in->add_shape(40);
  request.set_measure(true);
  absl::StatusOr<std::unique_ptr<Client>> alice = Connect(Localhost(), Good());
  ASSERT_TRUE(alice.ok()) << alice.status();
  const absl::Status denied = (*alice)->ExplainSelection(request).status();
  EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied) << denied;
  EXPECT_THAT(denied.message(),
              HasSubstr("ExplainSelection.measure needs the admin role; "
                        "identity 'alice' has the user role"));
  absl::StatusOr<std::unique_ptr<Client>> admin =
      Connect(Localhost(),
              WithCertificate(pki().ca, pki().admin_cert, pki().admin_key));
  ASSERT_TRUE(admin.ok()) << admin.status();
  absl::StatusOr<v1::ExplainSelectionResponse> measured =
      (*admin)->ExplainSelection(request);
  ASSERT_TRUE(measured.ok()) << measured.status();
  bool timed = false;
  for (const v1::VariantCandidate& c : measured->candidates()) {
    if (c.eligible()) {
      EXPECT_GT(c.measured_seconds(), 0) << c.variant();
      timed = true;
    }
  }
  EXPECT_TRUE(timed);
}

// The CLI against both servers.
class TlsCliTest : public TlsTest {
 protected:
  e2e::CommandResult Cli(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {
        e2e::BinaryPath("COALESCE_CLI_BINARY", kCliBinary)};
    argv.insert(argv.end(), args.begin(), args.end());
    return e2e::RunCommand(argv, absl::Seconds(60));
  }
};

TEST_F(TlsCliTest, InfoOverTlsWithATokenFile) {
  const std::string server = "--server=" + Localhost();
  const std::string ca = "--tls_ca=" + pki().ca;
  const e2e::CommandResult info =
      Cli({server, ca, "--token_file=" + pki().alice_token_file, "info"});
  EXPECT_EQ(info.exit_code, 0) << info;
  EXPECT_THAT(info.out, HasSubstr("backend: " + e2e::TestDevice())) << info;
  // The token never shows on a command line, and the CLI does not print it.
  EXPECT_THAT(info.out + info.err, testing::Not(HasSubstr(pki().alice_token)));
  // Neighbours: no token, and no TLS.
  const e2e::CommandResult anonymous = Cli({server, ca, "info"});
  EXPECT_EQ(anonymous.exit_code, 1) << anonymous;
  EXPECT_THAT(anonymous.err, HasSubstr("error: UNAUTHENTICATED")) << anonymous;
  const e2e::CommandResult plaintext =
      Cli({server, "--token_file=" + pki().alice_token_file, "info"});
  EXPECT_EQ(plaintext.exit_code, 1) << plaintext;
  EXPECT_THAT(plaintext.err, HasSubstr("error: UNAVAILABLE")) << plaintext;
}

TEST_F(TlsCliTest, ListsOverMutualTlsWithAClientCertificate) {
  ServerUnderTest& mtls = *World().mtls;
  const std::string server = absl::StrCat("--server=localhost:", mtls.port());
  const e2e::CommandResult ls =
      Cli({server, "--tls_ca=" + pki().ca, "--tls_cert=" + pki().alice_cert,
           "--tls_key=" + pki().alice_key, "ls"});
  EXPECT_EQ(ls.exit_code, 0) << ls;
  const e2e::CommandResult no_cert =
      Cli({server, "--tls_ca=" + pki().ca, "ls"});
  EXPECT_EQ(no_cert.exit_code, 1) << no_cert;
  EXPECT_THAT(no_cert.err, HasSubstr("error: UNAVAILABLE")) << no_cert;
}

}  // namespace
}  // namespace coalesce
