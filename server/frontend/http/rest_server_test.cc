// The KServe v2 REST protocol end to end: a server built by BuildServer on
// the CPU backend serving HTTP on 127.0.0.1:0, asked with libcurl.
#include "server/frontend/http/rest_server.h"

#include <curl/curl.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "nlohmann/json.hpp"
#include "server/logging/access_log.h"
#include "server/server.h"

namespace coalesce {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;
using ::testing::StartsWith;

struct HttpReply {
  long status = 0;
  std::string body;
  std::string header_length;  // Inference-Header-Content-Length, if any
  std::string request_id;     // X-Request-Id, if any
};

size_t AppendBody(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

size_t ReadHeader(char* data, size_t size, size_t n, void* out) {
  const std::string line(data, size * n);
  auto* reply = static_cast<HttpReply*>(out);
  for (const auto& [name, value] :
       {std::pair<std::string, std::string*>{"inference-header-content-length:",
                                             &reply->header_length},
        {"x-request-id:", &reply->request_id}}) {
    if (line.size() > name.size() &&
        strncasecmp(line.c_str(), name.c_str(), name.size()) == 0) {
      std::string v = line.substr(name.size());
      v.erase(0, v.find_first_not_of(' '));
      v.erase(v.find_last_not_of("\r\n ") + 1);
      *value = v;
    }
  }
  return size * n;
}

// One request; body null: GET.
HttpReply Request(int port, const std::string& path, const std::string* body,
                  const std::vector<std::string>& headers = {}) {
  HttpReply reply;
  CURL* curl = curl_easy_init();
  const std::string url = absl::StrCat("http://127.0.0.1:", port, path);
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, AppendBody);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &reply.body);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, ReadHeader);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &reply);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT, 60L);
  curl_slist* list = nullptr;
  for (const std::string& h : headers)
    list = curl_slist_append(list, h.c_str());
  if (list != nullptr) curl_easy_setopt(curl, CURLOPT_HTTPHEADER, list);
  if (body != nullptr) {
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body->data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE,
                     static_cast<curl_off_t>(body->size()));
  }
  const CURLcode code = curl_easy_perform(curl);
  EXPECT_EQ(code, CURLE_OK) << curl_easy_strerror(code);
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &reply.status);
  curl_slist_free_all(list);
  curl_easy_cleanup(curl);
  return reply;
}

std::vector<float> RandomFloats(int64_t n, std::mt19937* rng) {
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(*rng);
  return v;
}

class RestServerTest : public testing::Test {
 protected:
  void Start(ServerConfig config) {
    backend_ = CreateCpuBackend(2);
    config.listen = "";  // gRPC in-process only
    config.http_listen = "127.0.0.1:0";
    absl::StatusOr<std::unique_ptr<RunningServer>> server =
        BuildServer(config, backend_.get(), "test: CreateCpuBackend(2)");
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    ASSERT_GT(server_->http_port, 0);
  }
  void SetUp() override { Start(ServerConfig()); }

  HttpReply Get(const std::string& path) {
    return Request(server_->http_port, path, nullptr);
  }
  HttpReply Post(const std::string& path, const std::string& body,
                 const std::vector<std::string>& headers = {}) {
    return Request(server_->http_port, path, &body, headers);
  }
  // Expects status and an {"error"} starting with field.
  void ExpectError(const HttpReply& reply, long status,
                   const std::string& field) {
    EXPECT_EQ(reply.status, status) << reply.body;
    const json j = json::parse(reply.body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << reply.body;
    EXPECT_THAT(j["error"].get<std::string>(), StartsWith(field));
  }

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<RunningServer> server_;
  std::mt19937 rng_{20261203};
};

TEST_F(RestServerTest, RequestIdsAndAccessLog) {
  const std::string path = absl::StrCat(testing::TempDir(), "/rest_access.log");
  std::remove(path.c_str());
  absl::StatusOr<std::unique_ptr<AccessLog>> access_log =
      AccessLog::Open(path, LogFormat::kJson);
  ASSERT_TRUE(access_log.ok()) << access_log.status();
  server_.reset();
  ServerConfig config;
  config.access_log = access_log->get();
  Start(config);

  const HttpReply given = Request(server_->http_port, "/v2/health/ready",
                                  nullptr, {"X-Request-Id: rest-1"});
  EXPECT_EQ(given.request_id, "rest-1");
  const HttpReply traced = Request(
      server_->http_port, "/v2/models/nope", nullptr,
      {"traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"});
  EXPECT_EQ(traced.status, 404);
  EXPECT_EQ(traced.request_id, "4bf92f3577b34da6a3ce929d0e0e4736");
  const std::string body =
      R"({"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[2,3],)"
      R"("data":[1,2,3,4,5,6]}]})";
  const HttpReply made = Post("/v2/models/transpose/infer", body);
  EXPECT_EQ(made.status, 200) << made.body;
  EXPECT_EQ(made.request_id.size(), 32u);
  server_.reset();
  (*access_log)->Close();

  // Each request's line, and the line of the gRPC call it became, under
  // one id.
  std::map<std::string, std::vector<json>> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line);
    lines[j["request_id"].get<std::string>()].push_back(j);
  }
  const auto find = [&](const std::string& id, const std::string& method) {
    for (const json& j : lines[id]) {
      if (j["method"] == method) return j;
    }
    ADD_FAILURE() << "no line of " << method << " under " << id;
    return json::object();
  };
  EXPECT_EQ(find("rest-1", "GET /v2/health/ready")["http_status"], 200);
  find("rest-1", "/inference.GRPCInferenceService/ServerReady");
  const json missing =
      find("4bf92f3577b34da6a3ce929d0e0e4736", "GET /v2/models/nope");
  EXPECT_EQ(missing["code"], "NOT_FOUND");
  EXPECT_EQ(missing["http_status"], 404);
  const json infer = find(made.request_id, "POST /v2/models/transpose/infer");
  EXPECT_EQ(infer["code"], "OK");
  EXPECT_EQ(infer["request_bytes"], static_cast<int64_t>(body.size()));
  EXPECT_EQ(infer["response_bytes"], static_cast<int64_t>(made.body.size()));
  const json call =
      find(made.request_id, "/inference.GRPCInferenceService/ModelInfer");
  EXPECT_EQ(call["code"], "OK");
  EXPECT_TRUE(call.contains("kernel_ms"));
}

TEST_F(RestServerTest, HealthAndMetadata) {
  EXPECT_EQ(Get("/v2/health/live").status, 200);
  EXPECT_EQ(Get("/v2/health/ready").status, 200);
  EXPECT_EQ(Get("/v2/models/gemm/ready").status, 200);
  EXPECT_EQ(Get("/v2/models/gemm/versions/1/ready").status, 200);

  const HttpReply server = Get("/v2");
  ASSERT_EQ(server.status, 200) << server.body;
  const json s = json::parse(server.body);
  EXPECT_EQ(s["name"], "coalesce");
  EXPECT_FALSE(s["version"].get<std::string>().empty());
  EXPECT_THAT(s["extensions"].get<std::vector<std::string>>(),
              testing::Contains("parameters"));

  for (const std::string path :
       {"/v2/models/gemm", "/v2/models/gemm/versions/1"}) {
    const HttpReply model = Get(path);
    ASSERT_EQ(model.status, 200) << model.body;
    const json m = json::parse(model.body);
    EXPECT_EQ(m["name"], "gemm");
    EXPECT_EQ(m["versions"], json::array({"1"}));
    ASSERT_EQ(m["inputs"].size(), 3u);
    EXPECT_EQ(m["inputs"][0]["name"], "a");
    EXPECT_EQ(m["inputs"][0]["datatype"], "FP32");
    EXPECT_EQ(m["inputs"][0]["shape"], json::array({-1, -1}));
    EXPECT_EQ(m["outputs"][0]["name"], "d");
  }
  ExpectError(Get("/v2/models/nope"), 404, "name: unknown model");
  ExpectError(Get("/v2/models/gemm/versions/7"), 404, "version:");
  ExpectError(Get("/v2/models/nope/ready"), 404, "name:");
  ExpectError(Get("/v2/no/such/path"), 404, "no endpoint");
  ExpectError(Post("/v2/health/live", ""), 405, "GET only");
}

TEST_F(RestServerTest, JsonTransposeMatchesReference) {
  const int64_t rows = 7, cols = 13;
  const std::vector<float> in = RandomFloats(rows * cols, &rng_);
  const json request = {{"id", "t-1"},
                        {"inputs",
                         {{{"name", "INPUT0"},
                           {"shape", {rows, cols}},
                           {"datatype", "FP32"},
                           {"data", in}}}}};
  const HttpReply reply = Post("/v2/models/transpose/infer", request.dump());
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_TRUE(reply.header_length.empty());
  const json j = json::parse(reply.body);
  EXPECT_EQ(j["model_name"], "transpose");
  EXPECT_EQ(j["model_version"], "1");
  EXPECT_EQ(j["id"], "t-1");
  ASSERT_EQ(j["outputs"].size(), 1u);
  const json& out = j["outputs"][0];
  EXPECT_EQ(out["name"], "OUTPUT0");
  EXPECT_EQ(out["datatype"], "FP32");
  EXPECT_EQ(out["shape"], json::array({cols, rows}));
  const std::vector<float> got = out["data"].get<std::vector<float>>();
  ASSERT_EQ(got.size(), in.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      // Exact: JSON numbers of float round-trip.
      ASSERT_EQ(got[c * rows + r], in[r * cols + c]) << r << "," << c;
    }
  }
}

TEST_F(RestServerTest, JsonGemmMatchesReference) {
  const int64_t m = 9, k = 17, n = 5;
  const std::vector<float> a = RandomFloats(m * k, &rng_);
  const std::vector<float> b = RandomFloats(k * n, &rng_);
  const json request = {
      {"parameters", {{"alpha", 0.5}}},
      {"inputs",
       {{{"name", "a"}, {"shape", {m, k}}, {"datatype", "FP32"}, {"data", a}},
        // Nested data, as the protocol allows.
        {{"name", "b"},
         {"shape", {k, n}},
         {"datatype", "FP32"},
         {"data",
          [&] {
            json rows = json::array();
            for (int64_t i = 0; i < k; ++i) {
              rows.push_back(std::vector<float>(b.begin() + i * n,
                                                b.begin() + (i + 1) * n));
            }
            return rows;
          }()}}}},
      {"outputs", {{{"name", "d"}}}}};
  const HttpReply reply = Post("/v2/models/gemm/infer", request.dump());
  ASSERT_EQ(reply.status, 200) << reply.body;
  const json j = json::parse(reply.body);
  ASSERT_EQ(j["outputs"].size(), 1u);
  EXPECT_EQ(j["outputs"][0]["shape"], json::array({m, n}));
  const std::vector<float> d =
      j["outputs"][0]["data"].get<std::vector<float>>();
  ASSERT_EQ(d.size(), static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t c = 0; c < n; ++c) {
      double want = 0;
      for (int64_t x = 0; x < k; ++x) {
        want += static_cast<double>(a[i * k + x]) * b[x * n + c];
      }
      want *= 0.5;
      ASSERT_NEAR(d[i * n + c], want, 1e-4 * (1 + std::abs(want)))
          << i << "," << c;
    }
  }
}

TEST_F(RestServerTest, BinaryDataRoundTrip) {
  const int64_t batch = 2, rows = 6, cols = 11;
  const std::vector<float> in = RandomFloats(batch * rows * cols, &rng_);
  const json header = {
      {"inputs",
       {{{"name", "INPUT0"},
         {"shape", {batch, rows, cols}},
         {"datatype", "FP32"},
         {"parameters", {{"binary_data_size", in.size() * sizeof(float)}}}}}},
      {"outputs",
       {{{"name", "OUTPUT0"}, {"parameters", {{"binary_data", true}}}}}}};
  const std::string text = header.dump();
  std::string body = text;
  body.append(reinterpret_cast<const char*>(in.data()),
              in.size() * sizeof(float));
  const HttpReply reply =
      Post("/v2/models/transpose/infer", body,
           {absl::StrCat("Inference-Header-Content-Length: ", text.size()),
            "Content-Type: application/octet-stream"});
  ASSERT_EQ(reply.status, 200) << reply.body;
  ASSERT_FALSE(reply.header_length.empty());
  const size_t json_size = std::stoul(reply.header_length);
  ASSERT_LE(json_size, reply.body.size());
  const json j = json::parse(reply.body.substr(0, json_size));
  const json& out = j["outputs"][0];
  EXPECT_EQ(out["shape"], json::array({batch, cols, rows}));
  EXPECT_FALSE(out.contains("data"));
  ASSERT_EQ(out["parameters"]["binary_data_size"].get<size_t>(),
            in.size() * sizeof(float));
  ASSERT_EQ(reply.body.size() - json_size, in.size() * sizeof(float));
  std::vector<float> got(in.size());
  std::memcpy(got.data(), reply.body.data() + json_size,
              got.size() * sizeof(float));
  for (int64_t bi = 0; bi < batch; ++bi) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        ASSERT_EQ(got[(bi * cols + c) * rows + r],
                  in[(bi * rows + r) * cols + c]);
      }
    }
  }

  // binary_data_output asks it of every output; identity passes FP16
  // through, which only binary data carries.
  std::string half(2 * 3 * 2, '\0');
  for (char& ch : half) ch = static_cast<char>(rng_() & 0xff);
  const std::string text2 =
      json{{"parameters", {{"binary_data_output", true}}},
           {"inputs",
            {{{"name", "INPUT0"},
              {"shape", {2, 3}},
              {"datatype", "FP16"},
              {"parameters", {{"binary_data_size", half.size()}}}}}}}
          .dump();
  const HttpReply identity =
      Post("/v2/models/identity/infer", text2 + half,
           {absl::StrCat("Inference-Header-Content-Length: ", text2.size())});
  ASSERT_EQ(identity.status, 200) << identity.body;
  const size_t size2 = std::stoul(identity.header_length);
  EXPECT_EQ(identity.body.substr(size2), half);
}

TEST_F(RestServerTest, ErrorsNameTheField) {
  ExpectError(Post("/v2/models/nope/infer", R"({"inputs":[]})"), 404,
              "model_name: unknown model");
  ExpectError(Post("/v2/models/transpose/infer", "{\"inputs\": [1,"), 400,
              "request body:");
  ExpectError(Post("/v2/models/transpose/infer", R"({"inputs":[{"name":"INPUT0",
      "shape":[2,-3],"datatype":"FP32","data":[1,2,3,4,5,6]}]})"),
              400, "inputs[0].shape[1]");
  // Six values for a [2,4] tensor: the service's own check, in REST's
  // fields.
  ExpectError(Post("/v2/models/transpose/infer", R"({"inputs":[{"name":"INPUT0",
      "shape":[2,4],"datatype":"FP32","data":[1,2,3,4,5,6]}]})"),
              400, "inputs[0].data: has 24 bytes");
  const std::string text = R"({"inputs":[{"name":"a","shape":[1,1],
      "datatype":"FP32","data":[1]},{"name":"b","shape":[1,2],
      "datatype":"FP32","parameters":{"binary_data_size":4}}]})";
  ExpectError(
      Post("/v2/models/gemm/infer", text + "abcd",
           {absl::StrCat("Inference-Header-Content-Length: ", text.size())}),
      400, "inputs[1].parameters.binary_data_size: has 4 bytes");
  ExpectError(Post("/v2/models/transpose/infer", R"({"inputs":[{"name":"INPUT0",
      "shape":[2,1],"datatype":"FP32","data":[1,"x"]}]})"),
              400, "inputs[0].data[1]");
  ExpectError(Post("/v2/models/transpose/infer", R"({"inputs":[{"name":"INPUT0",
      "shape":[2,1],"datatype":"FP32","parameters":{"binary_data_size":999}}]})"),
              400, "inputs[0].parameters.binary_data_size");
  ExpectError(Post("/v2/models/gemm/infer", R"({"inputs":[{"name":"a",
      "shape":[1,1],"datatype":"FP32","data":[1]}],"parameters":{"alpha":[1]}})"),
              400, "parameters.alpha");
  ExpectError(Post("/v2/models/transpose/infer", "{}",
                   {"Inference-Header-Content-Length: 99"}),
              400, "Inference-Header-Content-Length");
  ExpectError(Get("/v2/models/transpose/infer"), 405, "POST only");
}

TEST(RestServerLimitsTest, OversizedBodyRefused) {
  std::unique_ptr<Backend> backend = CreateCpuBackend(1);
  ServerConfig config;
  config.listen = "";
  config.http_listen = "127.0.0.1:0";
  config.max_message_bytes = 64 << 10;
  absl::StatusOr<std::unique_ptr<RunningServer>> server =
      BuildServer(config, backend.get(), "test");
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string body(256 << 10, ' ');
  const HttpReply reply =
      Request((*server)->http_port, "/v2/models/identity/infer", &body);
  EXPECT_EQ(reply.status, 413);
  EXPECT_THAT(reply.body, HasSubstr("above the server's limit"));
  // The server still serves.
  EXPECT_EQ(Request((*server)->http_port, "/v2/health/live", nullptr).status,
            200);
}

TEST(RestServerAuthTest, TokenRequiredWhenConfigured) {
  std::unique_ptr<Backend> backend = CreateCpuBackend(1);
  ServerConfig config;
  config.listen = "";
  config.http_listen = "127.0.0.1:0";
  const std::string token = "tok-5f1c9e0b7a2d4c68";
  config.auth_tokens.entries = {{token, "team-a", Role::kUser}};
  absl::StatusOr<std::unique_ptr<RunningServer>> server =
      BuildServer(config, backend.get(), "test");
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->http_port;
  const std::string body =
      R"({"inputs":[{"name":"INPUT0","shape":[1,2],"datatype":"FP32","data":[1.5,-2.25]}]})";
  const HttpReply none = Request(port, "/v2/models/transpose/infer", &body);
  EXPECT_EQ(none.status, 401) << none.body;
  EXPECT_EQ(Request(port, "/v2/health/ready", nullptr).status, 401);
  const HttpReply wrong = Request(port, "/v2/models/transpose/infer", &body,
                                  {"Authorization: Bearer not-the-token"});
  EXPECT_EQ(wrong.status, 401) << wrong.body;
  EXPECT_THAT(wrong.body, testing::Not(HasSubstr("not-the-token")));
  const HttpReply ok = Request(port, "/v2/models/transpose/infer", &body,
                               {"Authorization: Bearer " + token});
  ASSERT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(json::parse(ok.body)["outputs"][0]["data"],
            json::array({1.5, -2.25}));
}

}  // namespace
}  // namespace coalesce
