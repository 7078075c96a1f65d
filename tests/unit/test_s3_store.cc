// SPDX-License-Identifier: Apache-2.0
// The store layer's S3 pieces that need no server (lib/store/s3.h, aws_credentials.h):
// locations, endpoint and region resolution, URLs, ListObjectsV2 and error parsing, S3 error
// codes in words, redaction of presigned URLs, the shared files and the credential chain.
#include <catch2/catch.hpp>

#include <map>

#include "store/aws_credentials.h"
#include "store/s3.h"
#include "store/web_identity.h"
#include "support/env.hpp"
#include "support/files.hpp"

using namespace tensorfetch;
using namespace tensorfetch::detail;
using tftest::env_of;

TEST_CASE("s3:// locations: bucket and key, prefixes, refusals") {
  auto a = parse_s3_location("s3://my-bucket/models/llama/model.safetensors");
  REQUIRE(a);
  CHECK(a->bucket == "my-bucket");
  CHECK(a->key == "models/llama/model.safetensors");
  CHECK_FALSE(a->is_prefix());
  CHECK(parse_s3_location("s3://my-bucket/models/")->is_prefix());
  CHECK(parse_s3_location("s3://my-bucket")->is_prefix());
  CHECK(parse_s3_location("s3://my-bucket/")->key.empty());
  struct Bad {
    const char* text;
    const char* words;
  };
  for (const Bad& b : {Bad{"s3://UPPER/x", "not a valid bucket name"}, Bad{"s3://ab/x", "not a valid bucket name"},
                       Bad{"s3://b-/x", "not a valid bucket name"}, Bad{"s3://bucket/a/../b", "'..' segment"},
                       Bad{"s3://bucket//a", "starts with '/'"}, Bad{"s3://bucket/a//b", "empty segment"},
                       Bad{"s3://bucket/a\nb", "control character"}}) {
    auto r = parse_s3_location(b.text);
    REQUIRE_FALSE(r);
    CHECK(r.error().code == ErrorCode::InvalidArgument);
    CHECK_THAT(r.error().message, Catch::Contains(b.words));
  }
}

TEST_CASE("S3 endpoint and region: option, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, profile; AWS's own by default") {
  const std::map<std::string, std::string> none;
  auto ep = resolve_s3_endpoint(env_of({}), none, {});
  REQUIRE(ep);
  CHECK(ep->region == "us-east-1");
  CHECK(ep->endpoint == "https://s3.us-east-1.amazonaws.com");
  CHECK_FALSE(ep->path_style);
  CHECK(s3_object_url(*ep, "bkt", "a b/c+d.safetensors") == "https://bkt.s3.us-east-1.amazonaws.com/a%20b/c%2Bd.safetensors");
  CHECK(s3_object_url(*ep, "with.dot", "k") == "https://s3.us-east-1.amazonaws.com/with.dot/k");

  ep = resolve_s3_endpoint(env_of({{"AWS_DEFAULT_REGION", "eu-west-1"}, {"AWS_ENDPOINT_URL", "http://h:1/"}}), none, {});
  REQUIRE(ep);
  CHECK(ep->region == "eu-west-1");
  CHECK(ep->endpoint == "http://h:1");
  CHECK(ep->endpoint_source == "AWS_ENDPOINT_URL");
  CHECK(ep->path_style);
  CHECK(s3_object_url(*ep, "bkt", "k/x") == "http://h:1/bkt/k/x");
  CHECK(s3_list_url(*ep, "bkt", "m d/", "") == "http://h:1/bkt/?delimiter=%2F&list-type=2&prefix=m%20d%2F");

  ep = resolve_s3_endpoint(env_of({{"AWS_REGION", "ap-south-1"}, {"AWS_DEFAULT_REGION", "eu-west-1"},
                                   {"AWS_ENDPOINT_URL_S3", "http://s3only"}, {"AWS_ENDPOINT_URL", "http://all"}}),
                           {{"region", "x"}}, {});
  CHECK(ep->region == "ap-south-1");
  CHECK(ep->endpoint == "http://s3only");
  ep = resolve_s3_endpoint(env_of({{"AWS_ENDPOINT_URL_S3", "http://s3only"}}), none, {"http://opt:9", false});
  CHECK(ep->endpoint == "http://opt:9");
  ep = resolve_s3_endpoint(env_of({}), {{"region", "us-west-2"}, {"endpoint_url", "http://prof"}}, {});
  CHECK(ep->region == "us-west-2");
  CHECK(ep->endpoint == "http://prof");
  ep = resolve_s3_endpoint(env_of({}), {{"endpoint_url", "http://prof"}, {"s3.endpoint_url", "http://prof-s3"}}, {});
  CHECK(ep->endpoint == "http://prof-s3");

  auto bad = resolve_s3_endpoint(env_of({{"AWS_ENDPOINT_URL", "ftp://x"}}), none, {});
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().message, Catch::Contains("AWS_ENDPOINT_URL"));
  CHECK_FALSE(resolve_s3_endpoint(env_of({{"AWS_REGION", "us east"}}), none, {}));
}

TEST_CASE("ListObjectsV2 answers parse with expat: objects, prefixes, continuation; malformed ones are refused") {
  const std::string xml = R"(<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Name>bkt</Name><Prefix>m/</Prefix><KeyCount>2</KeyCount><MaxKeys>1000</MaxKeys>
  <IsTruncated>true</IsTruncated><NextContinuationToken>tok/en==</NextContinuationToken>
  <Contents><Key>m/a &amp; b.safetensors</Key><LastModified>2026-01-01T00:00:00.000Z</LastModified>
    <ETag>&quot;abc&quot;</ETag><Size>1234</Size><StorageClass>STANDARD</StorageClass></Contents>
  <Contents><Size>5</Size><Key>m/model.safetensors.index.json</Key><ETag>"def"</ETag></Contents>
  <CommonPrefixes><Prefix>m/sub/</Prefix></CommonPrefixes>
</ListBucketResult>)";
  auto page = parse_list_objects_v2(xml);
  REQUIRE(page);
  REQUIRE(page->objects.size() == 2);
  CHECK(page->objects[0].key == "m/a & b.safetensors");
  CHECK(page->objects[0].size == 1234);
  CHECK(page->objects[0].etag == "\"abc\"");
  CHECK(page->objects[1].key == "m/model.safetensors.index.json");
  CHECK(page->objects[1].size == 5);
  CHECK(page->truncated);
  CHECK(page->continuation == "tok/en==");
  CHECK(page->common_prefixes == std::vector<std::string>{"m/sub/"});

  CHECK_FALSE(parse_list_objects_v2("<ListBucketResult><Contents>"));
  CHECK_FALSE(parse_list_objects_v2("<Error><Code>AccessDenied</Code></Error>"));
  CHECK_FALSE(parse_list_objects_v2("<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>"));
  CHECK_FALSE(parse_list_objects_v2("<ListBucketResult><Contents><Key>k</Key><Size>12x</Size></Contents></ListBucketResult>"));
  std::string deep;
  for (int i = 0; i < 40; ++i) deep += "<a>";
  auto r = parse_list_objects_v2("<ListBucketResult>" + deep);
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message, Catch::Contains("nested more than 16 levels"));
  auto entities = parse_list_objects_v2(
      "<!DOCTYPE l [<!ENTITY a \"aaaaaaaaaa\"><!ENTITY b \"&a;&a;&a;&a;\">]><ListBucketResult><Name>&b;</Name></ListBucketResult>");
  CHECK_FALSE(entities);
}

TEST_CASE("S3 error codes in words: kind, bucket and key, the store's words, where the credentials came from") {
  auto body = [](const char* code, const char* message) {
    return std::string("<?xml version=\"1.0\"?><Error><Code>") + code + "</Code><Message>" + message +
           "</Message><Region>eu-west-1</Region></Error>";
  };
  const std::string what = "s3://bkt/m/model.safetensors";
  const std::string creds = "the access key AKIDX from the environment (AWS_ACCESS_KEY_ID)";
  struct Row {
    long status;
    const char* code;
    ErrorCode kind;
    const char* words;
  };
  for (const Row& row : {Row{404, "NoSuchKey", ErrorCode::RemoteNotFound, "no such key"},
                         Row{404, "NoSuchBucket", ErrorCode::RemoteNotFound, "no such bucket"},
                         Row{403, "AccessDenied", ErrorCode::Unauthorized, "access denied to the access key AKIDX"},
                         Row{403, "InvalidAccessKeyId", ErrorCode::Unauthorized, "does not know the access key AKIDX"},
                         Row{403, "SignatureDoesNotMatch", ErrorCode::Unauthorized,
                             "the secret key does not match the access key"},
                         Row{400, "ExpiredToken", ErrorCode::Unauthorized, "has expired"},
                         Row{503, "SlowDown", ErrorCode::RateLimited, "slow down"},
                         Row{301, "PermanentRedirect", ErrorCode::Network, "region eu-west-1 (set AWS_REGION=eu-west-1)"}}) {
    DYNAMIC_SECTION(row.code) {
      const Error e = s3_error(S3Reply{row.status, body(row.code, "S3 says so"), ""}, what, creds);
      CHECK(e.code == row.kind);
      CHECK_THAT(e.message, Catch::Contains(what) && Catch::Contains(row.code) && Catch::Contains("S3 says so") &&
                                Catch::Contains(row.words));
      if (row.kind == ErrorCode::Unauthorized) CHECK_THAT(e.message, Catch::Contains("AWS_ACCESS_KEY_ID"));
    }
  }
  const Error anon = s3_error(S3Reply{403, "", ""}, what, "");
  CHECK(anon.code == ErrorCode::Unauthorized);
  CHECK_THAT(anon.message, Catch::Contains("unsigned request"));
}

TEST_CASE("wrong-region answers name the bucket's region; a signer moves there (AWS's endpoint with it)") {
  const std::string malformed = "<Error><Code>AuthorizationQueryParametersError</Code><Region>eu-west-3</Region></Error>";
  CHECK(s3_region_hint(S3Reply{400, malformed, ""}) == "eu-west-3");
  CHECK(s3_region_hint(S3Reply{301, "<Error><Code>PermanentRedirect</Code></Error>", "ap-south-1"}) == "ap-south-1");
  CHECK(s3_region_hint(S3Reply{400, "<Error><Code>InvalidArgument</Code><Region>x</Region></Error>", ""}).empty());
  CHECK(s3_region_hint(S3Reply{403, malformed, ""}).empty());
  CHECK(s3_region_hint(S3Reply{301, "", "evil/../host"}).empty());
  auto aws = resolve_s3_endpoint(env_of({}), {}, {});
  REQUIRE(aws);
  const S3Signer signer(*aws, nullptr);
  auto moved = signer.in_region("eu-west-3");
  CHECK(moved->endpoint().region == "eu-west-3");
  CHECK(moved->endpoint().endpoint == "https://s3.eu-west-3.amazonaws.com");
  auto custom = resolve_s3_endpoint(env_of({{"AWS_ENDPOINT_URL", "http://minio:9000"}}), {}, {});
  CHECK(S3Signer(*custom, nullptr).in_region("eu-west-3")->endpoint().endpoint == "http://minio:9000");
}

TEST_CASE("presigned URLs lose their query in messages; other URLs keep theirs") {
  CHECK(redact_signed_urls("GET http://h/b/k?X-Amz-Algorithm=A&X-Amz-Security-Token=SECRET: HTTP 500") ==
        "GET http://h/b/k: HTTP 500");
  CHECK(redact_signed_urls("(http://h/b/k?x=1&X-Amz-Signature=abc) and 'http://h/?a=b'") ==
        "(http://h/b/k) and 'http://h/?a=b'");
  CHECK(redact_signed_urls("no url") == "no url");
}

TEST_CASE("AWS shared files: sections, profiles, nested s3 settings, comments") {
  const auto s = parse_aws_ini(
      "# comment\n[default]\naws_access_key_id = AK1\n; other\n[profile dev]\nregion=eu-west-1\ns3 =\n"
      "  endpoint_url = http://minio:9000\n[profile   spaced]\nX = y\n");
  CHECK(s.at("default").at("aws_access_key_id") == "AK1");
  CHECK(s.at("profile dev").at("region") == "eu-west-1");
  CHECK(s.at("profile dev").at("s3.endpoint_url") == "http://minio:9000");
  CHECK(s.at("profile spaced").at("x") == "y");
}

TEST_CASE("credential chain: environment first, then the profile's files; 'none found' says where it looked") {
  tftest::TempDir dir("tf-aws");
  tftest::write_file(dir / "credentials", "[default]\naws_access_key_id = AKDEFAULT\naws_secret_access_key = sd\n"
                                          "[dev]\naws_access_key_id = AKDEV\naws_secret_access_key = s2\naws_session_token = T2\n");
  tftest::write_file(dir / "config", "[profile cfg]\naws_access_key_id = AKCFG\naws_secret_access_key = s3\nregion = x\n");
  // (no instance metadata: the test machine may be an EC2 instance)
  const std::map<std::string, std::string> files{{"AWS_SHARED_CREDENTIALS_FILE", (dir / "credentials").string()},
                                                 {"AWS_CONFIG_FILE", (dir / "config").string()},
                                                 {"AWS_EC2_METADATA_DISABLED", "true"}};
  auto with = [&](std::map<std::string, std::string> extra) {
    extra.insert(files.begin(), files.end());
    return env_of(extra);
  };
  auto env_creds = default_credential_chain(with({{"AWS_ACCESS_KEY_ID", "AKENV"}, {"AWS_SECRET_ACCESS_KEY", "se"},
                                                  {"AWS_SESSION_TOKEN", "TE"}, {"AWS_PROFILE", "dev"}}))
                       ->get(0);
  REQUIRE(env_creds);
  CHECK(env_creds->access_key_id == "AKENV");
  CHECK(env_creds->session_token == "TE");
  CHECK_THAT(env_creds->source, Catch::Contains("environment"));

  auto dev = default_credential_chain(with({{"AWS_PROFILE", "dev"}}))->get(0);
  REQUIRE(dev);
  CHECK(dev->access_key_id == "AKDEV");
  CHECK(dev->session_token == "T2");
  CHECK_THAT(dev->source, Catch::Contains("profile 'dev'") && Catch::Contains((dir / "credentials").string()));
  auto def = default_credential_chain(with({}))->get(0);
  REQUIRE(def);
  CHECK(def->access_key_id == "AKDEFAULT");
  auto cfg = default_credential_chain(with({{"AWS_PROFILE", "cfg"}}))->get(0);
  REQUIRE(cfg);
  CHECK(cfg->access_key_id == "AKCFG");
  CHECK_THAT(cfg->source, Catch::Contains("config file"));
  CHECK(AwsSharedFiles::from(with({{"AWS_PROFILE", "cfg"}})).settings()->at("region") == "x");

  auto none = default_credential_chain(with({{"AWS_PROFILE", "nobody"}}))->get(0);
  REQUIRE_FALSE(none);
  CHECK(none.error().code == ErrorCode::Unauthorized);
  CHECK_THAT(none.error().message, Catch::Contains("no AWS credentials found") && Catch::Contains("AWS_ACCESS_KEY_ID") &&
                                       Catch::Contains("profile 'nobody'") && Catch::Contains("--no-sign-request") &&
                                       Catch::Contains("container credentials") && Catch::Contains("EC2 instance metadata"));
  auto half = default_credential_chain(with({{"AWS_ACCESS_KEY_ID", "AKENV"}}))->get(0);
  REQUIRE_FALSE(half);
  CHECK_THAT(half.error().message, Catch::Contains("not AWS_SECRET_ACCESS_KEY"));
}

namespace {

// A provider handing out temporary credentials, counting its loads.
class Expiring final : public CredentialProvider {
 public:
  explicit Expiring(int* loads) : loads_(loads) {}
  Result<std::optional<AwsCredentials>> load(std::int64_t now) override {
    ++*loads_;
    return std::optional<AwsCredentials>(
        AwsCredentials{"ASIA" + std::to_string(*loads_), "s", "t", now + 3600, "a test provider"});
  }
  std::string where() const override { return "a test provider"; }

 private:
  int* loads_;
};

}  // namespace

TEST_CASE("credential chain keeps temporary credentials until 5 minutes before they expire, then refreshes") {
  int loads = 0;
  std::vector<std::unique_ptr<CredentialProvider>> providers;
  providers.push_back(std::make_unique<Expiring>(&loads));
  CredentialChain chain(std::move(providers));
  CHECK(chain.get(1000)->access_key_id == "ASIA1");
  CHECK(chain.get(1000 + 3600 - 301)->access_key_id == "ASIA1");
  CHECK(loads == 1);
  CHECK(chain.get(1000 + 3600 - 299)->access_key_id == "ASIA2");
  CHECK(loads == 2);
}

TEST_CASE("web identity: STS AssumeRoleWithWebIdentity answers give temporary credentials; STS errors in words") {
  const std::string ok = R"(<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult>
    <SubjectFromWebIdentityToken>system:serviceaccount:ns:sa</SubjectFromWebIdentityToken>
    <Credentials>
      <SessionToken>FwoTOKEN</SessionToken><SecretAccessKey>wJalSECRET</SecretAccessKey>
      <Expiration>2026-11-27T05:00:00Z</Expiration><AccessKeyId>ASIAWEB</AccessKeyId>
    </Credentials>
  </AssumeRoleWithWebIdentityResult>
</AssumeRoleWithWebIdentityResponse>)";
  auto c = parse_assume_role_with_web_identity(ok, 200, "web identity (role r)");
  REQUIRE(c);
  CHECK(c->access_key_id == "ASIAWEB");
  CHECK(c->secret_access_key == "wJalSECRET");
  CHECK(c->session_token == "FwoTOKEN");
  CHECK(c->expires_at == 1795755600);
  CHECK(c->source == "web identity (role r)");
  auto denied = parse_assume_role_with_web_identity(
      "<ErrorResponse><Error><Type>Sender</Type><Code>AccessDenied</Code><Message>Not authorized to perform "
      "sts:AssumeRoleWithWebIdentity</Message></Error></ErrorResponse>",
      403, "web identity (role r)");
  REQUIRE_FALSE(denied);
  CHECK(denied.error().code == ErrorCode::Unauthorized);
  CHECK_THAT(denied.error().message, Catch::Contains("HTTP 403 AccessDenied") && Catch::Contains("Not authorized"));
  CHECK_FALSE(parse_assume_role_with_web_identity("<AssumeRoleWithWebIdentityResponse/>", 200, "w"));
  CHECK(parse_iso8601_utc("1970-01-01T00:01:00Z") == 60);
  CHECK(parse_iso8601_utc("2026-11-27T05:00:00.123Z") == 1795755600);
  CHECK_FALSE(parse_iso8601_utc("2026-11-27 05:00"));
}
