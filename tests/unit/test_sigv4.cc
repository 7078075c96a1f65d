// SPDX-License-Identifier: Apache-2.0
// SigV4 (lib/store/sigv4.h) against published vectors and against botocore.
//
// Vectors, as data:
//  - the AWS Signature Version 4 test suite (aws-sig-v4-test-suite, published with the AWS
//    General Reference, "Signature Version 4 test suite"; the same files ship in botocore's and
//    the AWS SDKs' test data): credentials AKIDEXAMPLE / wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY,
//    scope us-east-1/service, 20150830T123600Z; per case the expected hash of the canonical
//    request (where the suite's .creq was used) and the signature of its .authz file;
//  - the Amazon S3 API Reference, "Examples: Signature Calculations in AWS Signature Version 4"
//    (sig-v4-header-based-auth.html: GET object with a Range, GET bucket listing) and
//    "Authenticating Requests: Using Query Parameters" (sigv4-query-string-auth.html: the
//    presigned GET of test.txt): AKIAIOSFODNN7EXAMPLE / wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY,
//    us-east-1/s3, 20130524T000000Z.
// Then requests with a session token, a port in Host and keys needing encoding, compared with
// what botocore (Debian python3-botocore, AWS's own signer) computes for the same request.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "base/hash.h"
#include "base/text.h"
#include "store/sigv4.h"
#include "support/files.hpp"
#include "support/process.hpp"

using namespace tensorfetch::detail;

namespace {

constexpr std::int64_t kSuiteTime = 1440938160;  // 20150830T123600Z
constexpr std::int64_t kS3DocTime = 1369353600;  // 20130524T000000Z

AwsCredentials suite_credentials() {
  return AwsCredentials{"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "", 0, "the test suite"};
}

AwsCredentials s3_doc_credentials() {
  return AwsCredentials{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "", 0, "the S3 docs"};
}

std::string signature_of(const SigV4Pairs& added) {
  const std::string& auth = added.back().second;
  return auth.substr(auth.find("Signature=") + 10);
}

struct SuiteCase {
  const char* name;
  SigV4Request request;     // host and x-amz-date headers added by the signer / the case
  const char* creq_sha256;  // "" where not checked
  const char* signature;
};

}  // namespace

TEST_CASE("amz_date formats UTC as YYYYMMDDTHHMMSSZ") {
  CHECK(amz_date(kSuiteTime) == "20150830T123600Z");
  CHECK(amz_date(kS3DocTime) == "20130524T000000Z");
}

TEST_CASE("SigV4 test suite vectors (aws-sig-v4-test-suite)") {
  const std::string empty(kEmptyPayloadHash);
  const std::vector<SuiteCase> cases = {
      {"get-vanilla", {"GET", "/", {}, {{"Host", "example.amazonaws.com"}}, empty},
       "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63",
       "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"},
      {"get-vanilla-query-order-key-case",
       {"GET", "/", {{"Param2", "value2"}, {"Param1", "value1"}}, {{"Host", "example.amazonaws.com"}}, empty},
       "816cd5b414d056048ba4f7c5386d6e0533120fb1fcfa93762cf0fc39e2cf19e0",
       "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"},
      {"get-vanilla-query-order-value",
       {"GET", "/", {{"Param1", "value2"}, {"Param1", "value1"}}, {{"Host", "example.amazonaws.com"}}, empty},
       "", "5772eed61e12b33fae39ee5e7012498b51d56abc0abb7c60486157bd471c4694"},
      {"get-unreserved",
       {"GET", "/-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", {},
        {{"Host", "example.amazonaws.com"}}, empty},
       "", "07ef7494c76fa4850883e2b006601f940f8a34d404d0cfa977f52a65bbf5f24f"},
      {"post-x-www-form-urlencoded",
       {"POST", "/", {},
        {{"Content-Type", "application/x-www-form-urlencoded"}, {"Host", "example.amazonaws.com"}},
        "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e"},
       "", "ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a"},
  };
  const SigV4Scope scope{"us-east-1", "service"};
  for (const auto& c : cases) {
    DYNAMIC_SECTION(c.name) {
      if (std::string(c.creq_sha256).size()) {
        SigV4Request with_date = c.request;
        with_date.headers.emplace_back("X-Amz-Date", "20150830T123600Z");
        CHECK(sha256_hex(sigv4_canonical_request(with_date)) == c.creq_sha256);
      }
      const auto added = sigv4_sign_headers(c.request, suite_credentials(), scope, kSuiteTime);
      REQUIRE(added.front() == std::pair<std::string, std::string>{"x-amz-date", "20150830T123600Z"});
      CHECK(added.back().first == "Authorization");
      CHECK(added.back().second.starts_with(
          "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders="));
      CHECK(signature_of(added) == c.signature);
    }
  }
}

TEST_CASE("SigV4 canonical request: header names lower-cased, values trimmed and spaces collapsed, repeats joined") {
  SigV4Request r{"GET", "/", {}, {{"Host", "h"}, {"My-Header1", "  a   b  "}, {"my-header1", "c"}}, "X"};
  CHECK(sigv4_canonical_request(r) == "GET\n/\n\nhost:h\nmy-header1:a b,c\n\nhost;my-header1\nX");
  CHECK(sigv4_canonical_query({{"b", "x y"}, {"a", "/"}, {"a", ""}}) == "a=&a=%2F&b=x%20y");
}

TEST_CASE("S3 documentation examples: header signing of a ranged GET and a listing, a presigned GET") {
  const SigV4Scope scope{"us-east-1", "s3"};
  const std::string empty(kEmptyPayloadHash);
  SECTION("GET /test.txt with Range: bytes=0-9") {
    SigV4Request r{"GET", "/test.txt", {},
                   {{"Host", "examplebucket.s3.amazonaws.com"}, {"Range", "bytes=0-9"}, {"x-amz-content-sha256", empty}},
                   empty};
    const auto added = sigv4_sign_headers(r, s3_doc_credentials(), scope, kS3DocTime);
    CHECK(added.back().second ==
          "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
          "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
          "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
  }
  SECTION("GET /?max-keys=2&prefix=J (a listing)") {
    SigV4Request r{"GET", "/", {{"max-keys", "2"}, {"prefix", "J"}},
                   {{"Host", "examplebucket.s3.amazonaws.com"}, {"x-amz-content-sha256", empty}}, empty};
    CHECK(signature_of(sigv4_sign_headers(r, s3_doc_credentials(), scope, kS3DocTime)) ==
          "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
  }
  SECTION("presigned GET /test.txt, valid 86400 s") {
    SigV4Request r{"GET", "/test.txt", {}, {{"Host", "examplebucket.s3.amazonaws.com"}}, ""};
    CHECK(sigv4_presign_query(r, s3_doc_credentials(), scope, kS3DocTime, 86400) ==
          "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2F"
          "aws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host"
          "&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404");
  }
}

TEST_CASE("the secret key appears in nothing the signer returns") {
  AwsCredentials c = s3_doc_credentials();
  c.session_token = "SESSIONTOKEN";
  SigV4Request r{"GET", "/k", {}, {{"Host", "b.s3.amazonaws.com"}}, std::string(kEmptyPayloadHash)};
  const auto added = sigv4_sign_headers(r, c, {"us-east-1", "s3"}, kS3DocTime);
  for (const auto& [name, value] : added) CHECK(value.find(c.secret_access_key) == std::string::npos);
  CHECK(added[1] == std::pair<std::string, std::string>{"x-amz-security-token", "SESSIONTOKEN"});
  const std::string q = sigv4_presign_query(r, c, {"us-east-1", "s3"}, kS3DocTime, 60);
  CHECK(q.find(percent_encode(c.secret_access_key)) == std::string::npos);
  CHECK(q.find("X-Amz-Security-Token=SESSIONTOKEN") != std::string::npos);
}

TEST_CASE("botocore computes the same signatures (session token, port in Host, keys that need encoding)") {
  const std::string python = "/usr/bin/python3";
  const std::string script = tftest::required_env("TENSORFETCH_SOURCE_DIR") + "/tests/http/s3/botocore_sign.py";
  tftest::TempDir dir("tf-sigv4");
  AwsCredentials c{"ASIAEXAMPLEKEY", "s3cr3t/with+chars", "FwoGZXIvYXdzEXAMPLE//token=", 0, "test"};
  const SigV4Scope scope{"eu-west-3", "s3"};
  const std::int64_t now = 1767225600;  // 20260101T000000Z
  struct Row {
    const char* name;
    const char* path;     // encoded, as sent
    SigV4Pairs query;     // decoded
  };
  const std::vector<Row> rows = {
      {"an object key with spaces, plus and unicode", "/bucket/dir%20x/a%2Bb/%C3%A9.safetensors", {}},
      {"a ListObjectsV2 page", "/bucket/", {{"list-type", "2"}, {"delimiter", "/"}, {"prefix", "models/x y/"},
                                           {"continuation-token", "1/abc=="}}},
  };
  auto botocore = [&](const std::vector<std::string>& args) {
    const auto out = dir / "out.txt";
    tftest::Child child(python, args, {"", out.string(), (dir / "err.txt").string()});
    REQUIRE(child.wait() == 0);
    const std::string text = tftest::read_file(out);
    std::vector<std::string> lines;
    for (std::size_t at = 0; at < text.size();) {
      auto nl = text.find('\n', at);
      lines.push_back(text.substr(at, nl - at));
      at = nl == std::string::npos ? text.size() : nl + 1;
    }
    return lines;
  };
  for (const auto& row : rows) {
    DYNAMIC_SECTION(row.name << ", header form") {
      SigV4Request r{"GET", row.path, row.query,
                     {{"host", "127.0.0.1:9000"}, {"x-amz-content-sha256", "UNSIGNED-PAYLOAD"}, {"range", "bytes=0-99"}},
                     "UNSIGNED-PAYLOAD"};
      const auto added = sigv4_sign_headers(r, c, scope, now);
      const std::string url = "http://127.0.0.1:9000" + std::string(row.path) +
                              (row.query.empty() ? "" : "?" + sigv4_canonical_query(row.query));
      const auto lines = botocore({script, "header", "GET", url, amz_date(now), scope.region, "s3", c.access_key_id,
                                   c.secret_access_key, c.session_token, "-", "x-amz-content-sha256:UNSIGNED-PAYLOAD",
                                   "range:bytes=0-99", "x-amz-date:" + amz_date(now),
                                   "x-amz-security-token:" + c.session_token});
      REQUIRE(lines.size() == 3);
      SigV4Request signed_request = r;
      signed_request.headers.insert(signed_request.headers.end(), added.begin(), added.end() - 1);
      CHECK(sha256_hex(sigv4_canonical_request(signed_request)) == lines[0]);
      CHECK(signature_of(added) == lines[2]);
    }
    DYNAMIC_SECTION(row.name << ", presigned form") {
      SigV4Request r{"GET", row.path, row.query, {{"host", "127.0.0.1:9000"}}, ""};
      const std::string query = sigv4_presign_query(r, c, scope, now, 900);
      const auto sig_at = query.find("&X-Amz-Signature=");
      REQUIRE(sig_at != std::string::npos);
      const auto lines = botocore({script, "query", "GET", "http://127.0.0.1:9000" + std::string(row.path) + "?" +
                                                              query.substr(0, sig_at),
                                   amz_date(now), scope.region, "s3", c.access_key_id, c.secret_access_key,
                                   c.session_token, "900"});
      REQUIRE(lines.size() == 3);
      CHECK(query.substr(sig_at + 17) == lines[2]);
    }
  }
}
