// SPDX-License-Identifier: Apache-2.0
// AWS credentials from the metadata services (lib/store/aws_metadata.h), against local endpoints
// (cpp-httplib) that answer as the documented services do: container credentials (ECS, EKS Pod
// Identity: a GET with the authorization token) and EC2 instance metadata (IMDSv2: PUT a session
// token, then the role and its credentials with it; IMDSv1 when the token is not offered). The
// requests are asserted through the endpoints' logs; refresh before expiry through the chain's
// clock.
#include <catch2/catch.hpp>
#include <httplib.h>

#include <mutex>
#include <thread>

#include "store/aws_credentials.h"
#include "store/aws_metadata.h"
#include "support/env.hpp"
#include "support/files.hpp"

using namespace tensorfetch;
using namespace tensorfetch::detail;
using tftest::env_of;

namespace {

constexpr std::int64_t kNow = 1'800'000'000;  // 2027-01-15T08:00:00Z

struct Logged {
  std::string method, path, authorization, token, ttl;
};

// A local metadata endpoint: container credentials at /creds (Authorization must be `token`),
// IMDS at /latest/... (IMDSv2 unless `v1_only`), credentials expiring at `expiration`.
class MetadataServer {
 public:
  explicit MetadataServer(std::string token = "container-token-DO-NOT-LEAK", bool v1_only = false)
      : token_(std::move(token)) {
    server_.Get("/creds", [this](const httplib::Request& req, httplib::Response& res) {
      log(req);
      if (req.get_header_value("Authorization") != token_) {
        res.status = 403;
        res.set_content(R"({"Code":"AccessDenied","Message":"bad token"})", "application/json");
        return;
      }
      res.set_content(credentials("ASIACONTAINER"), "application/json");
    });
    server_.Put("/latest/api/token", [this, v1_only](const httplib::Request& req, httplib::Response& res) {
      log(req);
      if (v1_only) {
        res.status = 405;
        return;
      }
      if (req.get_header_value("X-aws-ec2-metadata-token-ttl-seconds").empty()) {
        res.status = 400;
        return;
      }
      res.set_content("imds-session-token-DO-NOT-LEAK", "text/plain");
    });
    server_.Get("/latest/meta-data/iam/security-credentials/", [this, v1_only](const httplib::Request& req,
                                                                              httplib::Response& res) {
      log(req);
      if (!v1_only && req.get_header_value("X-aws-ec2-metadata-token") != "imds-session-token-DO-NOT-LEAK") {
        res.status = 401;
        return;
      }
      res.set_content("tf-reader\n", "text/plain");
    });
    server_.Get("/latest/meta-data/iam/security-credentials/tf-reader", [this, v1_only](const httplib::Request& req,
                                                                                       httplib::Response& res) {
      log(req);
      if (!v1_only && req.get_header_value("X-aws-ec2-metadata-token") != "imds-session-token-DO-NOT-LEAK") {
        res.status = 401;
        return;
      }
      res.set_content(credentials("ASIAINSTANCE"), "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~MetadataServer() {
    server_.stop();
    thread_.join();
  }

  [[nodiscard]] std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  [[nodiscard]] std::vector<Logged> requests() const {
    std::lock_guard lock(mutex_);
    return log_;
  }
  /// When the credentials answered from now on expire.
  void expire_at(const std::string& when) {
    std::lock_guard lock(mutex_);
    expiration_ = when;
  }

 private:
  void log(const httplib::Request& req) {
    std::lock_guard lock(mutex_);
    log_.push_back({req.method, req.path, req.get_header_value("Authorization"),
                    req.get_header_value("X-aws-ec2-metadata-token"),
                    req.get_header_value("X-aws-ec2-metadata-token-ttl-seconds")});
  }
  std::string credentials(const std::string& key_id) {
    std::lock_guard lock(mutex_);
    return R"({"Code":"Success","Type":"AWS-HMAC","AccessKeyId":")" + key_id +
           R"(","SecretAccessKey":"metadata-secret","Token":"metadata-session-token","Expiration":")" + expiration_ +
           R"("})";
  }

  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::string token_;
  mutable std::mutex mutex_;
  std::vector<Logged> log_;
  std::string expiration_ = "2027-01-15T09:00:00Z";  // kNow + 1 hour
};

}  // namespace

TEST_CASE("container credentials: the target from RELATIVE_URI or FULL_URI, the token from its file or variable; unsafe URLs refused") {
  auto t = container_credentials_target(env_of({{"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/credentials/abc"},
                                                {"AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1:1/x"}}));
  REQUIRE(t);
  REQUIRE(*t);
  CHECK((*t)->url == "http://169.254.170.2/v2/credentials/abc");
  CHECK((*t)->authorization.empty());

  tftest::TempDir dir("tf-container");
  tftest::write_file(dir / "token", "eks-pod-identity-token\n");
  t = container_credentials_target(env_of({{"AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://169.254.170.23/v1/credentials"},
                                           {"AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", (dir / "token").string()},
                                           {"AWS_CONTAINER_AUTHORIZATION_TOKEN", "ignored"}}));
  REQUIRE(t);
  CHECK((*t)->authorization == "eks-pod-identity-token");  // the file wins, its newline trimmed
  CHECK_THAT((*t)->source, Catch::Contains("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"));
  CHECK((*t)->source.find("eks-pod-identity-token") == std::string::npos);

  for (const char* ok : {"https://creds.example.com/x", "http://localhost:9/x", "http://127.0.0.2/x", "http://[::1]:8/x",
                         "http://[fd00:ec2::23]/x"}) {
    INFO(ok);
    CHECK(container_credentials_target(env_of({{"AWS_CONTAINER_CREDENTIALS_FULL_URI", ok}})));
  }
  for (const char* bad : {"http://example.com/creds", "http://10.0.0.1/x", "ftp://127.0.0.1/x", "http://127.0.0.1.evil/x"}) {
    INFO(bad);
    auto r = container_credentials_target(env_of({{"AWS_CONTAINER_CREDENTIALS_FULL_URI", bad}}));
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message, Catch::Contains("AWS_CONTAINER_CREDENTIALS_FULL_URI"));
  }
  auto crlf = container_credentials_target(env_of({{"AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1/x"},
                                                   {"AWS_CONTAINER_AUTHORIZATION_TOKEN", "a\r\nX-Injected: SECRET"}}));
  REQUIRE_FALSE(crlf);
  CHECK(crlf.error().message.find("SECRET") == std::string::npos);
  CHECK_FALSE(*container_credentials_target(env_of({})));
}

TEST_CASE("metadata credentials answers: keys, token and expiration; failures named, never a value") {
  auto c = parse_metadata_credentials(
      R"({"Code":"Success","AccessKeyId":"ASIA1","SecretAccessKey":"s","Token":"t","Expiration":"2027-01-15T09:00:00Z"})",
      "here");
  REQUIRE(c);
  CHECK(c->access_key_id == "ASIA1");
  CHECK(c->session_token == "t");
  CHECK(c->expires_at == kNow + 3600);
  CHECK(c->source == "here");
  CHECK(parse_metadata_credentials(R"({"AccessKeyId":"A","SecretAccessKey":"s"})", "here")->expires_at == 0);
  auto failed = parse_metadata_credentials(R"({"Code":"AssumeRoleUnauthorizedAccess","Message":"no"})", "here");
  REQUIRE_FALSE(failed);
  CHECK_THAT(failed.error().message, Catch::Contains("AssumeRoleUnauthorizedAccess"));
  CHECK(parse_metadata_credentials("not json", "here").error().code == ErrorCode::BadResponse);
  auto half = parse_metadata_credentials(R"({"AccessKeyId":"A","SecretAccessKey":"","Token":"SECRET"})", "here");
  REQUIRE_FALSE(half);
  CHECK(half.error().message.find("SECRET") == std::string::npos);
}

TEST_CASE("container credentials: one GET with the token from its file, re-read at each refresh; the chain uses them after the shared files") {
  MetadataServer server("token-1");
  tftest::TempDir dir("tf-container");
  tftest::write_file(dir / "token", "token-1");
  const std::map<std::string, std::string> env{
      {"AWS_CONTAINER_CREDENTIALS_FULL_URI", server.url() + "/creds"},
      {"AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", (dir / "token").string()},
      {"AWS_SHARED_CREDENTIALS_FILE", (dir / "none").string()},
      {"AWS_CONFIG_FILE", (dir / "none").string()},
      {"AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:1"}};
  auto chain = default_credential_chain(env_of(env));
  auto c = chain->get(kNow);
  REQUIRE(c);
  CHECK(c->access_key_id == "ASIACONTAINER");
  CHECK(c->session_token == "metadata-session-token");
  CHECK_THAT(c->source, Catch::Contains("container credentials") && Catch::Contains("AWS_CONTAINER_CREDENTIALS_FULL_URI"));
  auto reqs = server.requests();
  REQUIRE(reqs.size() == 1);
  CHECK(reqs[0].method == "GET");
  CHECK(reqs[0].authorization == "token-1");

  // Kept while more than 5 minutes remain; asked again after, with the token file read again.
  REQUIRE(chain->get(kNow + 3600 - 301));
  CHECK(server.requests().size() == 1);
  server.expire_at("2027-01-15T10:00:00Z");
  tftest::write_file(dir / "token", "token-1");
  REQUIRE(chain->get(kNow + 3600 - 299));
  reqs = server.requests();
  REQUIRE(reqs.size() == 2);
  CHECK(reqs[1].authorization == "token-1");

  // Environment credentials come first: no request.
  auto with_env = env;
  with_env["AWS_ACCESS_KEY_ID"] = "AKENV";
  with_env["AWS_SECRET_ACCESS_KEY"] = "s";
  CHECK(default_credential_chain(env_of(with_env))->get(kNow)->access_key_id == "AKENV");
  CHECK(server.requests().size() == 2);

  // A token the endpoint refuses: an error naming the variable, never the token.
  tftest::write_file(dir / "token", "stale-token-DO-NOT-LEAK");
  auto refused = default_credential_chain(env_of(env))->get(kNow);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == ErrorCode::Unauthorized);
  CHECK_THAT(refused.error().message, Catch::Contains("container credentials") && Catch::Contains("HTTP 403"));
  CHECK(refused.error().message.find("stale-token-DO-NOT-LEAK") == std::string::npos);
}

TEST_CASE("instance metadata (IMDSv2): PUT a session token with a TTL, then the role and its credentials with it; refreshed before expiry") {
  MetadataServer server;
  tftest::TempDir dir("tf-imds");
  const std::map<std::string, std::string> env{{"AWS_EC2_METADATA_SERVICE_ENDPOINT", server.url() + "/"},
                                               {"AWS_SHARED_CREDENTIALS_FILE", (dir / "none").string()},
                                               {"AWS_CONFIG_FILE", (dir / "none").string()}};
  auto chain = default_credential_chain(env_of(env));
  auto c = chain->get(kNow);
  REQUIRE(c);
  CHECK(c->access_key_id == "ASIAINSTANCE");
  CHECK(c->secret_access_key == "metadata-secret");
  CHECK(c->expires_at == kNow + 3600);
  CHECK_THAT(c->source, Catch::Contains("EC2 instance metadata") && Catch::Contains("role tf-reader"));
  auto reqs = server.requests();
  REQUIRE(reqs.size() == 3);
  CHECK(reqs[0].method == "PUT");
  CHECK(reqs[0].path == "/latest/api/token");
  CHECK(reqs[0].ttl == "21600");
  CHECK(reqs[1].path == "/latest/meta-data/iam/security-credentials/");
  CHECK(reqs[2].path == "/latest/meta-data/iam/security-credentials/tf-reader");
  CHECK(reqs[1].token == "imds-session-token-DO-NOT-LEAK");
  CHECK(reqs[2].token == "imds-session-token-DO-NOT-LEAK");

  REQUIRE(chain->get(kNow + 60));
  CHECK(server.requests().size() == 3);  // kept
  REQUIRE(chain->get(kNow + 3600 - 120));  // within 5 minutes of expiry: asked again
  CHECK(server.requests().size() == 6);

  // AWS_EC2_METADATA_DISABLED: not asked; "none found" says where it looked.
  auto disabled = env;
  disabled["AWS_EC2_METADATA_DISABLED"] = "TRUE";
  auto none = default_credential_chain(env_of(disabled))->get(kNow);
  REQUIRE_FALSE(none);
  CHECK_THAT(none.error().message, Catch::Contains("no AWS credentials found") &&
                                       Catch::Contains("EC2 instance metadata") && Catch::Contains("container credentials"));
  CHECK(server.requests().size() == 6);
}

TEST_CASE("instance metadata: IMDSv1 when the token request is refused with 405; no service at all means no credentials") {
  MetadataServer server("unused", true);
  tftest::TempDir dir("tf-imds");
  auto c = instance_metadata_credentials(env_of({{"AWS_EC2_METADATA_SERVICE_ENDPOINT", server.url()}}))->load(kNow);
  REQUIRE(c);
  REQUIRE(*c);
  CHECK((*c)->access_key_id == "ASIAINSTANCE");
  const auto reqs = server.requests();
  REQUIRE(reqs.size() == 3);
  CHECK(reqs[1].token.empty());

  // Nothing listens there (a closed port): no credentials from this source, no error.
  auto nothing = instance_metadata_credentials(env_of({{"AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:1"}}))->load(kNow);
  REQUIRE(nothing);
  CHECK_FALSE(*nothing);
}
