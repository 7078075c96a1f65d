// SPDX-License-Identifier: Apache-2.0
// `s3://` locations end to end (issue 22): the CLI against s3rver (npm; S3's API, listings,
// ranges, ETags, error codes) behind tests/http/s3/s3_fixture.py, a proxy that checks every
// request's SigV4 signature with botocore and answers as S3 does. Asserted through the proxy's
// request log (auth form, ranges, If-Match, status) and the bytes written; secrets are looked
// for in every output, cache file and snapshot manifest.
#include <httplib.h>

#include <chrono>
#include <mutex>
#include <fstream>
#include <thread>

#include "cli_util.hpp"
#include "store_tree.hpp"
#include "support/process.hpp"

using namespace clitest;

namespace {

constexpr const char* kKeyId = "AKIDTENSORFETCHTEST";
constexpr const char* kSecret = "tf-secret/DO+NOT+LEAK-0123456789abcdef";
constexpr const char* kToken = "tf-session-token-DO-NOT-LEAK-FwoGZXIvYXdzEXAMPLE";

// Whether s3rver (tools/install-deps.sh: npm, into tools/node) and botocore are installed; WARNs
// (the suite is then skipped) when not.
bool s3_available() {
  const fs::path src = tftest::required_env("TENSORFETCH_SOURCE_DIR");
  if (!fs::exists(src / "tools/node/node_modules/s3rver/bin/s3rver.js")) {
    WARN("s3rver is not installed (tools/install-deps.sh installs it with npm): S3 tests skipped");
    return false;
  }
  if (!fs::exists("/usr/lib/python3/dist-packages/botocore")) {
    WARN("python3-botocore is not installed: S3 tests skipped");
    return false;
  }
  return true;
}

// s3rver plus the verifying proxy, on free ports, serving what `uploads` names (BUCKET=DIR).
class S3Server : public StoreFixture {
 public:
  explicit S3Server(const std::vector<std::string>& uploads, const std::vector<std::string>& extra = {})
      : StoreFixture("S3", "tests/http/s3/s3_fixture.py", args(uploads, extra), 60) {}

  [[nodiscard]] std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port()); }

 private:
  static std::vector<std::string> args(const std::vector<std::string>& uploads, const std::vector<std::string>& extra) {
    std::vector<std::string> out{"--key", std::string(kKeyId) + ":" + kSecret + ":" + kToken, "--key",
                                 "AKIDOTHER:othersecret"};
    for (const auto& u : uploads) out.insert(out.end(), {"--upload", u});
    out.insert(out.end(), extra.begin(), extra.end());
    return out;
  }
};

// Credentials with a session token, a fresh cache, the endpoint by environment; nothing of the
// test machine's own AWS setup.
struct S3Env {
  tftest::ScopedEnv env;
  S3Env(const fs::path& cache, const std::string& endpoint) {
    env.set("AWS_ACCESS_KEY_ID", kKeyId);
    env.set("AWS_SECRET_ACCESS_KEY", kSecret);
    env.set("AWS_SESSION_TOKEN", kToken);
    env.set("AWS_ENDPOINT_URL_S3", endpoint);
    env.set("AWS_REGION", "us-east-1");
    env.set("AWS_PROFILE", std::nullopt);
    env.set("AWS_ENDPOINT_URL", std::nullopt);
    env.set("AWS_SHARED_CREDENTIALS_FILE", (cache.parent_path() / "no-credentials").string());
    env.set("AWS_CONFIG_FILE", (cache.parent_path() / "no-config").string());
    // No container or instance metadata credentials (the test machine may be an EC2 instance).
    env.set("AWS_EC2_METADATA_DISABLED", "true");
    env.set("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", std::nullopt);
    env.set("AWS_CONTAINER_CREDENTIALS_FULL_URI", std::nullopt);
    env.set("TENSORFETCH_CACHE", cache.string());
  }
};

// One test's world: a temporary directory, the server serving the test tree (bucket `models`,
// and `more`), the environment pointing at it with a fresh cache.
struct S3World {
  TempDir tmp;
  S3Server s3;
  S3Env env;
  explicit S3World(const std::vector<std::string>& extra = {}, const std::vector<std::string>& more = {})
      : tmp("tf-s3-cli"), s3(store_tree_uploads(tmp, more), extra), env(tmp / "cache", s3.endpoint()) {}
};

// Every file under `dir`, read whole, must hold neither the secret key nor the session token.
void check_no_secrets_under(const fs::path& dir) {
  std::size_t files = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    ++files;
    const std::string text = read_file(e.path());
    INFO(e.path());
    CHECK(text.find(kSecret) == std::string::npos);
    CHECK(text.find(kToken) == std::string::npos);
  }
  CHECK(files > 0);
}

void check_no_secrets(const RunResult& r) {
  CHECK(r.out.find(kSecret) == std::string::npos);
  CHECK(r.err.find(kSecret) == std::string::npos);
  CHECK(r.out.find(kToken) == std::string::npos);
  CHECK(r.err.find(kToken) == std::string::npos);
}

}  // namespace

TEST_CASE("s3: inspect, get and download of an object, an index prefix and a loose prefix; every request presigned and accepted by botocore") {
  if (!s3_available()) return;
  S3World world;
  const TempDir& tmp = world.tmp;
  const S3Server& s3 = world.s3;

  SECTION("an object: inspect reads one window; get moves exactly the tensors asked for, with If-Match") {
    auto r = run({"inspect", "s3://models/single/model.safetensors", "--json", "--window", "4096"});
    REQUIRE(r.exit_code == 0);
    check_no_secrets(r);
    const json j = json::parse(r.out);
    CHECK(j["tensors"].size() == 4);
    CHECK(j["files"][0]["size"] == 1'200'000 + j["files"][0]["header_size"].get<std::uint64_t>() + 8);
    auto reqs = s3.requests();
    REQUIRE(reqs.size() == 1);
    CHECK(reqs[0]["auth"] == "query");
    CHECK(reqs[0]["status"] == 206);
    CHECK(reqs[0]["range"] == "bytes=0-4095");
    CHECK(reqs[0]["signed_headers"] == json::array({"host"}));
    CHECK(reqs[0]["query_names"].dump().find("X-Amz-Security-Token") != std::string::npos);
    s3.clear();

    r = run({"get", "s3://models/single/model.safetensors", "layers.1.weight", "layers.3.weight", "-o",
             (tmp / "out.safetensors").string(), "--window", "4096"});
    REQUIRE(r.exit_code == 0);
    check_no_secrets(r);
    const StFile out = read_safetensors(tmp / "out.safetensors");
    REQUIRE(out.tensors.size() == 2);
    CHECK(out.tensors.at("layers.1.weight").bytes == tftest::pattern_bytes(300'000, 2));
    CHECK(out.tensors.at("layers.3.weight").bytes == tftest::pattern_bytes(300'000, 4));
    std::uint64_t data_bytes = 0;
    for (const auto& q : s3.requests()) {
      CHECK(q["auth"] == "query");
      if (q["range"] != "bytes=0-4095") {
        CHECK(q["status"] == 206);
        CHECK(q["if_match"].is_string());  // the ETag the open saw pins every data range
        data_bytes += q["bytes"].get<std::uint64_t>();
      }
    }
    CHECK(data_bytes == 600'000);
    check_no_secrets_under(tmp / "cache");
  }

  SECTION("a prefix with an index: one listing, the index, the shard headers at once; download writes the same bytes") {
    auto r = run({"inspect", "s3://models/sharded/", "--json"});
    REQUIRE(r.exit_code == 0);
    CHECK(json::parse(r.out)["sharded"] == true);
    auto reqs = s3.requests();
    REQUIRE(reqs.size() == 4);
    CHECK(reqs[0]["query"]["list-type"] == "2");
    CHECK(reqs[0]["query"]["prefix"] == "sharded/");
    CHECK(reqs[1]["path"] == "/models/sharded/model.safetensors.index.json");
    for (const auto& q : reqs) CHECK(q["auth"] == "query");

    r = run({"download", "s3://models/sharded/", "-o", (tmp / "dl").string()});
    REQUIRE(r.exit_code == 0);
    check_no_secrets(r);
    for (const char* f : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}) {
      CHECK(read_file(tmp / "dl" / f) == read_file(tmp / "tree/sharded" / f));
    }
    check_no_secrets_under(tmp / "cache");

    // Offline: the snapshot the fetch recorded, no request, no credentials needed.
    s3.clear();
    tftest::ScopedEnv no_creds;
    no_creds.unset("AWS_ACCESS_KEY_ID");
    no_creds.unset("AWS_SECRET_ACCESS_KEY");
    no_creds.unset("AWS_SESSION_TOKEN");
    r = run({"get", "s3://models/sharded/", "layers.2.weight", "-o", (tmp / "off.safetensors").string(), "--offline"});
    REQUIRE(r.exit_code == 0);
    CHECK(read_safetensors(tmp / "off.safetensors").tensors.at("layers.2.weight").bytes ==
          tftest::pattern_bytes(200'000, 4));
    CHECK(s3.requests().empty());
  }

  SECTION("a prefix without an index or model.safetensors: every listed .safetensors file") {
    auto r = run({"inspect", "s3://models/loose/", "--json"});
    REQUIRE(r.exit_code == 0);
    const json j = json::parse(r.out);
    REQUIRE(j["files"].size() == 2);
    CHECK(j["files"][0]["path"] == "part-a.safetensors");
    CHECK(j["files"][1]["path"] == "part-b.safetensors");
    CHECK(j["tensors"].size() == 2);
  }

  SECTION("the index named directly, and a bucket prefix with no checkpoint (exit 3, how many objects were listed)") {
    auto r = run({"inspect", "s3://models/sharded/model.safetensors.index.json"});
    CHECK(r.exit_code == 0);
    r = run({"inspect", "s3://models/empty/"});
    CHECK(r.exit_code == 3);
    CHECK_THAT(r.err, Catch::Contains("s3://models/empty/") && Catch::Contains("no .safetensors file or index"));
  }

  SECTION("get --plan: presigned URLs valid for the stated time, fetched by a client with no credentials") {
    auto r = run({"get", "s3://models/single/model.safetensors", "layers.2.weight", "--plan", "--window", "4096",
                  "--presign-expires", "900"});
    REQUIRE(r.exit_code == 0);
    const json plan = json::parse(r.out);
    REQUIRE(plan["transfers"].size() == 1);
    const json& t = plan["transfers"][0];
    const auto now = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch()).count();
    CHECK(t["expires_at"].get<std::int64_t>() >= now + 890);
    CHECK(t["expires_at"].get<std::int64_t>() <= now + 910);
    const std::string url = t["url"];
    CHECK_THAT(url, Catch::Contains("X-Amz-Expires=900") && Catch::Contains("X-Amz-Signature="));
    s3.clear();
    httplib::Client client("127.0.0.1", s3.port());
    client.set_url_encode(false);
    const std::string path = url.substr(url.find('/', 8));
    auto res = client.Get(path, httplib::Headers{{"Range", t["range"].get<std::string>()},
                                                 {"If-Match", t["if_match"].get<std::string>()}});
    REQUIRE(res);
    CHECK(res->status == 206);
    CHECK(res->body == tftest::pattern_bytes(300'000, 3));
    CHECK(s3.requests().at(0)["auth"] == "query");
    // The same URL with its signature changed is refused by the verifying proxy.
    std::string forged = path;
    forged[forged.size() - 1] = forged.back() == '0' ? '1' : '0';
    res = client.Get(forged, httplib::Headers{{"Range", t["range"].get<std::string>()}});
    REQUIRE(res);
    CHECK(res->status == 403);
    CHECK_THAT(res->body, Catch::Contains("SignatureDoesNotMatch"));
  }
}

TEST_CASE("s3: a listing of many pages follows NextContinuationToken") {
  if (!s3_available()) return;
  TempDir tmp("tf-s3-pages");
  for (int i = 0; i < 5; ++i) {
    tftest::write_file(tmp / "tree/many" / ("part-" + std::to_string(i) + ".safetensors"), store_checkpoint(i, 1, 64, 9));
  }
  S3Server s3({"pages=" + (tmp / "tree").string()}, {"--max-keys", "2"});
  S3Env env(tmp / "cache", s3.endpoint());
  auto r = run({"inspect", "s3://pages/many/", "--json"});
  REQUIRE(r.exit_code == 0);
  CHECK(json::parse(r.out)["files"].size() == 5);
  int pages = 0;
  for (const auto& q : s3.requests()) {
    if (q["query"].contains("list-type")) {
      ++pages;
      CHECK(q["query"].contains("continuation-token") == (pages > 1));
    }
  }
  CHECK(pages == 3);
}

TEST_CASE("s3: errors in words, exit 3, naming bucket, key and where the credentials came from, never a secret") {
  if (!s3_available()) return;
  S3World world({"--public", "public", "--expired-token", "expired-token-DO-NOT-LEAK"}, {"public"});
  const S3Server& s3 = world.s3;
  const std::string object = "s3://models/single/model.safetensors";
  struct Row {
    const char* name;
    std::vector<std::pair<std::string, std::optional<std::string>>> env;
    std::vector<std::string> args;
    std::vector<std::string> words;
  };
  const std::vector<Row> rows = {
      {"SignatureDoesNotMatch: a wrong secret", {{"AWS_SECRET_ACCESS_KEY", "wrong-secret"}}, {"inspect", object},
       {"SignatureDoesNotMatch", "the secret key does not match the access key", kKeyId, "AWS_ACCESS_KEY_ID", object}},
      {"InvalidAccessKeyId: an unknown key id", {{"AWS_ACCESS_KEY_ID", "AKIDUNKNOWN"}}, {"inspect", object},
       {"InvalidAccessKeyId", "does not know the access key AKIDUNKNOWN"}},
      {"ExpiredToken", {{"AWS_SESSION_TOKEN", "expired-token-DO-NOT-LEAK"}}, {"inspect", object},
       {"ExpiredToken", "has expired"}},
      {"NoSuchKey", {}, {"inspect", "s3://models/single/absent.safetensors"},
       {"NoSuchKey", "s3://models/single/absent.safetensors", "no such key"}},
      {"NoSuchBucket", {}, {"inspect", "s3://no-such-bucket/m.safetensors"}, {"NoSuchBucket", "no such bucket"}},
      {"AccessDenied: unsigned request to a private bucket", {}, {"inspect", object, "--no-sign-request"},
       {"AccessDenied", "unsigned request"}},
      {"no credentials found: where it looked",
       {{"AWS_ACCESS_KEY_ID", std::nullopt}, {"AWS_SECRET_ACCESS_KEY", std::nullopt}, {"AWS_SESSION_TOKEN", std::nullopt}},
       {"inspect", object},
       {"no AWS credentials found", "AWS_ACCESS_KEY_ID", "AWS_SHARED_CREDENTIALS_FILE", "no-credentials", "--no-sign-request"}},
  };
  for (const auto& row : rows) {
    DYNAMIC_SECTION(row.name) {
      tftest::ScopedEnv scoped;
      for (const auto& [k, v] : row.env) scoped.set(k, v);
      std::vector<std::string> args = row.args;
      const auto r = run(args);
      CHECK(r.exit_code == 3);
      for (const auto& w : row.words) CHECK_THAT(r.err, Catch::Contains(w));
      check_no_secrets(r);
      CHECK(r.err.find("expired-token-DO-NOT-LEAK") == std::string::npos);
      CHECK(r.err.find("wrong-secret") == std::string::npos);
      CHECK(r.err.find("X-Amz-") == std::string::npos);
    }
  }
  SECTION("a public bucket read with --no-sign-request: unsigned requests, no credentials looked for") {
    tftest::ScopedEnv scoped;
    scoped.unset("AWS_ACCESS_KEY_ID");
    scoped.unset("AWS_SECRET_ACCESS_KEY");
    s3.clear();
    const auto r = run({"inspect", "s3://public/single/model.safetensors", "--no-sign-request"});
    CHECK(r.exit_code == 0);
    for (const auto& q : s3.requests()) CHECK(q["auth"] == "none");
  }
}

TEST_CASE("s3: SlowDown answers are retried with backoff, then the read succeeds") {
  if (!s3_available()) return;
  S3World world({"--slowdown", "2"});
  const S3Server& s3 = world.s3;
  const auto r = run({"inspect", "s3://models/single/model.safetensors"});
  CHECK(r.exit_code == 0);
  check_no_secrets(r);
  CHECK(r.err.find("X-Amz-") == std::string::npos);  // the wait notice names no presigned URL
  const auto reqs = s3.requests();
  REQUIRE(reqs.size() == 3);
  CHECK(reqs[0]["status"] == 503);
  CHECK(reqs[0]["code"] == "SlowDown");
  CHECK(reqs[1]["status"] == 503);
  CHECK(reqs[2]["status"] == 206);
}

TEST_CASE("s3: credentials from a web identity: the token exchanged at STS (a local endpoint), then every request signed with them") {
  if (!s3_available()) return;
  S3World world;
  const TempDir& tmp = world.tmp;
  const S3Server& s3 = world.s3;
  tftest::write_file(tmp / "token", "eyJ-web-identity-token\n");
  // STS as documented: GET ?Action=AssumeRoleWithWebIdentity&RoleArn=...&WebIdentityToken=...
  httplib::Server sts;
  std::vector<std::map<std::string, std::string>> asked;
  std::mutex mutex;
  sts.Get("/", [&](const httplib::Request& req, httplib::Response& res) {
    std::map<std::string, std::string> params(req.params.begin(), req.params.end());
    {
      std::lock_guard lock(mutex);
      asked.push_back(params);
    }
    if (params["RoleArn"] != "arn:aws:iam::123456789012:role/reader") {
      res.status = 403;
      res.set_content("<ErrorResponse><Error><Type>Sender</Type><Code>AccessDenied</Code><Message>Not authorized to "
                      "perform sts:AssumeRoleWithWebIdentity</Message></Error></ErrorResponse>",
                      "text/xml");
      return;
    }
    res.set_content(std::string("<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult><Credentials>"
                                "<AccessKeyId>") + kKeyId + "</AccessKeyId><SecretAccessKey>" + kSecret +
                        "</SecretAccessKey><SessionToken>" + kToken +
                        "</SessionToken><Expiration>2099-01-01T00:00:00Z</Expiration></Credentials>"
                        "</AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>",
                    "text/xml");
  });
  const int sts_port = sts.bind_to_any_port("127.0.0.1");
  std::thread sts_thread([&] { sts.listen_after_bind(); });
  tftest::ScopedEnv web;
  web.unset("AWS_ACCESS_KEY_ID");
  web.unset("AWS_SECRET_ACCESS_KEY");
  web.unset("AWS_SESSION_TOKEN");
  web.set("AWS_WEB_IDENTITY_TOKEN_FILE", (tmp / "token").string());
  web.set("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/reader");
  web.set("AWS_ROLE_SESSION_NAME", "tf-test");
  web.set("AWS_ENDPOINT_URL_STS", "http://127.0.0.1:" + std::to_string(sts_port));

  auto r = run({"inspect", "s3://models/sharded/"});
  CHECK(r.exit_code == 0);
  check_no_secrets(r);
  {
    std::lock_guard lock(mutex);
    REQUIRE(asked.size() == 1);  // once per process: the chain keeps them until shortly before expiry
    CHECK(asked[0]["Action"] == "AssumeRoleWithWebIdentity");
    CHECK(asked[0]["WebIdentityToken"] == "eyJ-web-identity-token");
    CHECK(asked[0]["RoleSessionName"] == "tf-test");
  }
  for (const auto& q : s3.requests()) CHECK(q["access_key"] == kKeyId);

  web.set("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/other");
  r = run({"inspect", "s3://models/sharded/"});
  CHECK(r.exit_code == 3);
  CHECK_THAT(r.err, Catch::Contains("web identity") && Catch::Contains("role/other") &&
                        Catch::Contains("AccessDenied") && Catch::Contains("Not authorized"));
  CHECK(r.err.find("eyJ-web-identity-token") == std::string::npos);
  sts.stop();
  sts_thread.join();
}

TEST_CASE("s3: credentials from container credentials and from EC2 instance metadata (IMDSv2) at local endpoints; every request signed with them") {
  if (!s3_available()) return;
  S3World world;
  const S3Server& s3 = world.s3;
  std::mutex mutex;
  std::vector<std::string> asked;  // "METHOD PATH" of every metadata request
  const std::string credentials = std::string(R"({"Code":"Success","AccessKeyId":")") + kKeyId +
                                  R"(","SecretAccessKey":")" + kSecret + R"(","Token":")" + kToken +
                                  R"(","Expiration":"2099-01-01T00:00:00Z"})";
  httplib::Server meta;
  meta.Get("/creds", [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard lock(mutex);
    asked.push_back("GET /creds " + req.get_header_value("Authorization"));
    res.set_content(credentials, "application/json");
  });
  meta.Put("/latest/api/token", [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard lock(mutex);
    asked.push_back("PUT /latest/api/token " + req.get_header_value("X-aws-ec2-metadata-token-ttl-seconds"));
    res.set_content("imds-token", "text/plain");
  });
  meta.Get(R"(/latest/meta-data/iam/security-credentials/(.*))", [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard lock(mutex);
    asked.push_back("GET " + req.path + " " + req.get_header_value("X-aws-ec2-metadata-token"));
    if (req.get_header_value("X-aws-ec2-metadata-token") != "imds-token") {
      res.status = 401;
      return;
    }
    res.set_content(req.matches[1].str().empty() ? std::string("reader-role") : credentials, "text/plain");
  });
  const int port = meta.bind_to_any_port("127.0.0.1");
  std::thread meta_thread([&] { meta.listen_after_bind(); });
  tftest::ScopedEnv scoped;
  scoped.unset("AWS_ACCESS_KEY_ID");
  scoped.unset("AWS_SECRET_ACCESS_KEY");
  scoped.unset("AWS_SESSION_TOKEN");
  const std::string url = "http://127.0.0.1:" + std::to_string(port);

  SECTION("container credentials: FULL_URI with the authorization token") {
    scoped.set("AWS_CONTAINER_CREDENTIALS_FULL_URI", url + "/creds");
    scoped.set("AWS_CONTAINER_AUTHORIZATION_TOKEN", "container-auth-DO-NOT-LEAK");
    const auto r = run({"inspect", "s3://models/sharded/"});
    CHECK(r.exit_code == 0);
    check_no_secrets(r);
    CHECK(r.err.find("container-auth-DO-NOT-LEAK") == std::string::npos);
    std::lock_guard lock(mutex);
    CHECK(asked == std::vector<std::string>{"GET /creds container-auth-DO-NOT-LEAK"});
  }
  SECTION("instance metadata: the IMDSv2 token, the role, its credentials") {
    scoped.set("AWS_EC2_METADATA_DISABLED", std::nullopt);
    scoped.set("AWS_EC2_METADATA_SERVICE_ENDPOINT", url);
    const auto r = run({"inspect", "s3://models/sharded/"});
    CHECK(r.exit_code == 0);
    check_no_secrets(r);
    std::lock_guard lock(mutex);
    CHECK(asked == std::vector<std::string>{"PUT /latest/api/token 21600",
                                            "GET /latest/meta-data/iam/security-credentials/ imds-token",
                                            "GET /latest/meta-data/iam/security-credentials/reader-role imds-token"});
  }
  const auto reqs = s3.requests();
  CHECK(reqs.size() == 4);
  for (const auto& q : reqs) {
    CHECK(q["access_key"] == kKeyId);
    CHECK(q["status"].get<int>() < 300);
  }
  meta.stop();
  meta_thread.join();
}

TEST_CASE("s3: a bucket in another region than the one configured: S3's answer names it, and the open asks again there once") {
  if (!s3_available()) return;
  S3World world({"--region", "eu-west-3"});
  const S3Server& s3 = world.s3;
  const auto r = run({"get", "s3://models/sharded/", "layers.3.weight", "-o", (world.tmp / "o.safetensors").string()});
  REQUIRE(r.exit_code == 0);
  const auto reqs = s3.requests();
  REQUIRE(reqs.size() >= 2);
  CHECK(reqs[0]["status"] == 400);
  CHECK(reqs[0]["code"] == "AuthorizationQueryParametersError");
  CHECK(reqs[0]["region"] == "us-east-1");
  for (std::size_t i = 1; i < reqs.size(); ++i) {
    CHECK(reqs[i]["region"] == "eu-west-3");
    CHECK(reqs[i]["status"].get<int>() < 300);
  }
  CHECK(read_safetensors(world.tmp / "o.safetensors").tensors.at("layers.3.weight").bytes ==
        tftest::pattern_bytes(200'000, 5));
}
