// SPDX-License-Identifier: Apache-2.0
// The store layer's Azure pieces that need no server (lib/store/azure.h): locations, connection
// strings, the order credentials are looked for in, URLs, the service SAS (against a value
// computed independently with Python's hmac), List Blobs and error parsing, Azure's error codes in
// words, redaction of SAS URLs, and base64.
#include <catch2/catch.hpp>

#include "base/text.h"
#include "hub/location.h"
#include "store/azure.h"
#include "support/env.hpp"

using namespace tensorfetch;
using namespace tensorfetch::detail;
using tftest::env_of;

namespace {
// azurite's published account key (devstoreaccount1): no secret.
constexpr const char* kKey = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
}  // namespace

TEST_CASE("base64: RFC 4648 test vectors both ways; invalid text refused") {
  const std::pair<const char*, const char*> vectors[] = {{"", ""},         {"f", "Zg=="},         {"fo", "Zm8="},
                                                         {"foo", "Zm9v"},  {"foob", "Zm9vYg=="},  {"fooba", "Zm9vYmE="},
                                                         {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, encoded] : vectors) {
    CHECK(base64_encode(plain) == encoded);
    CHECK(base64_decode(encoded) == std::string(plain));
  }
  CHECK(base64_decode("Zm9vYg") == std::string("foob"));  // padding optional
  CHECK_FALSE(base64_decode("Zm9v!"));
  CHECK_FALSE(base64_decode("Z"));
  CHECK(base64_decode(kKey)->size() == 64);
}

TEST_CASE("Azure locations: az:// and https://ACCOUNT.blob.core.windows.net, with a SAS; refusals never show the SAS") {
  CHECK(classify_location("az://acct/c/x") == LocationKind::Azure);
  CHECK(classify_location("https://acct.blob.core.windows.net/c/x.safetensors") == LocationKind::Azure);
  CHECK(classify_location("https://example.com/blob.core.windows.net/x") == LocationKind::Http);
  CHECK(classify_location("http://acct.blob.core.windows.net/c/x") == LocationKind::Http);

  auto a = parse_azure_location("az://myacct/models/llama/model.safetensors");
  REQUIRE(a);
  CHECK(a->account == "myacct");
  CHECK(a->container == "models");
  CHECK(a->blob == "llama/model.safetensors");
  CHECK(a->endpoint.empty());
  CHECK_FALSE(a->is_prefix());
  CHECK(parse_azure_location("az://myacct/models/llama/")->is_prefix());
  CHECK(parse_azure_location("az://myacct/models")->is_prefix());

  auto h = parse_azure_location("https://myacct.blob.core.windows.net/models/a%20b/m.safetensors?sv=2022-11-02&sig=abc%3D");
  REQUIRE(h);
  CHECK(h->account == "myacct");
  CHECK(h->endpoint == "https://myacct.blob.core.windows.net");
  CHECK(h->blob == "a b/m.safetensors");
  CHECK(h->sas == "sv=2022-11-02&sig=abc%3D");
  CHECK(h->text() == "az://myacct/models/a b/m.safetensors");

  struct Bad {
    const char* text;
    const char* words;
  };
  for (const Bad& b : {Bad{"az://UPPER/c/x", "not a valid storage account name"}, Bad{"az://ab/c/x", "storage account"},
                       Bad{"az://acct/Bad_Name/x", "not a valid container name"}, Bad{"az://acct/a--b/x", "container"},
                       Bad{"az://acct", "no container"}, Bad{"az://acct/c0ntainer/a/../b", "'..' segment"},
                       Bad{"az://acct/cont/a//b", "empty segment"}, Bad{"az://acct/cont/a\nb", "control character"},
                       Bad{"az://acct/cont/x?sig=SECRETSIG", "has no query"},
                       Bad{"https://acct.blob.core.windows.net/cont/x?foo=SECRETSIG", "not a SAS"}}) {
    auto r = parse_azure_location(b.text);
    REQUIRE_FALSE(r);
    CHECK(r.error().code == ErrorCode::InvalidArgument);
    CHECK_THAT(r.error().message, Catch::Contains(b.words));
    CHECK(r.error().message.find("SECRETSIG") == std::string::npos);
  }
}

TEST_CASE("Azure credentials, in order: the URL's SAS, the connection string, the account key, the SAS token, anonymous") {
  const std::string cs = std::string("DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=") + kKey +
                         ";BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1/;";
  auto loc = *parse_azure_location("az://devstoreaccount1/models/m.safetensors");

  auto s = resolve_azure(env_of({{"AZURE_STORAGE_CONNECTION_STRING", cs}, {"AZURE_STORAGE_SAS_TOKEN", "sv=1&sig=x"}}),
                         loc, false);
  REQUIRE(s);
  CHECK(s->auth == AzureAuth::SharedKey);
  CHECK(s->endpoint == "http://127.0.0.1:10000/devstoreaccount1");
  CHECK(s->account_key == *base64_decode(kKey));
  CHECK(s->source == "AZURE_STORAGE_CONNECTION_STRING");

  s = resolve_azure(env_of({{"AZURE_STORAGE_ACCOUNT_KEY", kKey}, {"AZURE_STORAGE_SAS_TOKEN", "?sv=1&sig=x"}}), loc, false);
  REQUIRE(s);
  CHECK(s->auth == AzureAuth::SharedKey);
  CHECK(s->source == "AZURE_STORAGE_ACCOUNT_KEY");
  CHECK(s->endpoint == "https://devstoreaccount1.blob.core.windows.net");

  // The key belongs to another account: not used.
  s = resolve_azure(env_of({{"AZURE_STORAGE_ACCOUNT", "other"}, {"AZURE_STORAGE_ACCOUNT_KEY", kKey},
                            {"AZURE_STORAGE_SAS_TOKEN", "?sv=1&sig=x"}}),
                    loc, false);
  REQUIRE(s);
  CHECK(s->auth == AzureAuth::Sas);
  CHECK(s->sas == "sv=1&sig=x");
  CHECK(s->source == "AZURE_STORAGE_SAS_TOKEN");

  // A connection string with only the endpoint: the SAS token is still looked for.
  s = resolve_azure(env_of({{"AZURE_STORAGE_CONNECTION_STRING", "BlobEndpoint=http://h:1/devstoreaccount1"},
                            {"AZURE_STORAGE_SAS_TOKEN", "sv=1&sig=x"}}),
                    loc, false);
  REQUIRE(s);
  CHECK(s->auth == AzureAuth::Sas);
  CHECK(s->endpoint == "http://h:1/devstoreaccount1");

  s = resolve_azure(env_of({}), loc, false);
  REQUIRE(s);
  CHECK(s->auth == AzureAuth::Anonymous);
  CHECK(s->source.empty());

  // --no-sign-request: nothing looked for, but the endpoint still from the connection string.
  s = resolve_azure(env_of({{"AZURE_STORAGE_CONNECTION_STRING", cs}}), loc, true);
  REQUIRE(s);
  CHECK(s->auth == AzureAuth::Anonymous);
  CHECK(s->endpoint == "http://127.0.0.1:10000/devstoreaccount1");

  // A SAS URL wins over the environment; its host is the endpoint.
  auto url = *parse_azure_location("https://devstoreaccount1.blob.core.windows.net/models/m.safetensors?sv=2&sig=y");
  s = resolve_azure(env_of({{"AZURE_STORAGE_CONNECTION_STRING", cs}}), url, false);
  REQUIRE(s);
  CHECK(s->auth == AzureAuth::Sas);
  CHECK(s->source == "the location's URL");
  CHECK(s->endpoint == "https://devstoreaccount1.blob.core.windows.net");

  // A connection string with a SAS; the endpoint from its protocol and suffix.
  s = resolve_azure(env_of({{"AZURE_STORAGE_CONNECTION_STRING",
                             "AccountName=devstoreaccount1;SharedAccessSignature=sv=3&sig=z;EndpointSuffix=core.chinacloudapi.cn"}}),
                    loc, false);
  REQUIRE(s);
  CHECK(s->auth == AzureAuth::Sas);
  CHECK(s->sas == "sv=3&sig=z");
  CHECK(s->endpoint == "https://devstoreaccount1.blob.core.chinacloudapi.cn");

  // Refusals name the variable, never the secret.
  struct Bad {
    std::map<std::string, std::string> env;
    const char* words;
  };
  for (const Bad& b : {Bad{{{"AZURE_STORAGE_CONNECTION_STRING", "AccountName=other;AccountKey=SECRETKEY"}}, "for the account 'other'"},
                       Bad{{{"AZURE_STORAGE_CONNECTION_STRING", "garbage SECRETKEY"}}, "not a connection string"},
                       Bad{{{"AZURE_STORAGE_ACCOUNT_KEY", "SECRETKEY!!"}}, "not base64"},
                       Bad{{{"AZURE_STORAGE_SAS_TOKEN", "sv=1&SECRETKEY=2"}}, "is not one"},
                       Bad{{{"AZURE_STORAGE_CONNECTION_STRING", "BlobEndpoint=ftp://h/SECRETKEY"}}, "not an http(s) URL"}}) {
    auto r = resolve_azure(env_of(b.env), loc, false);
    REQUIRE_FALSE(r);
    CHECK(r.error().code == ErrorCode::InvalidArgument);
    CHECK_THAT(r.error().message, Catch::Contains(b.words));
    if (std::string_view(b.words) != "not an http(s) URL") CHECK(r.error().message.find("SECRETKEY") == std::string::npos);
  }
}

TEST_CASE("Azure URLs and the service SAS: blob read and container list, signed as computed independently") {
  CHECK(azure_blob_url("http://h:1/devstoreaccount1", "models", "a b/c+d.safetensors") ==
        "http://h:1/devstoreaccount1/models/a%20b/c%2Bd.safetensors");
  CHECK(azure_list_url("https://a.blob.core.windows.net", "models", "m d/", "") ==
        "https://a.blob.core.windows.net/models?restype=container&comp=list&delimiter=%2F&prefix=m%20d%2F");
  CHECK(azure_list_url("https://a.blob.core.windows.net", "models", "", "2!12!x") ==
        "https://a.blob.core.windows.net/models?restype=container&comp=list&delimiter=%2F&prefix=&marker=2%2112%21x");
  CHECK(azure_time(1800000000) == "2027-01-15T08:00:00Z");

  // Expected signatures: base64(HMAC-SHA256(key, the 2020-12-06 string to sign)), by Python.
  const std::string key = *base64_decode(kKey);
  CHECK(azure_service_sas("devstoreaccount1", key, "models", "a b/model.safetensors", "r", 1800000000) ==
        "sv=2022-11-02&sr=b&sp=r&se=2027-01-15T08%3A00%3A00Z&sig=eSk8HXGCNHvuMaTx7au9%2ByuiGi%2BeJ4jgywTnNqJyvHk%3D");
  CHECK(azure_service_sas("devstoreaccount1", key, "models", "", "l", 1800000000) ==
        "sv=2022-11-02&sr=c&sp=l&se=2027-01-15T08%3A00%3A00Z&sig=rRtPN8O%2BOI8fiF8D2q1MMEMBago6eiRDna8T0842U94%3D");

  AzureSetup setup;
  setup.account = "devstoreaccount1";
  setup.endpoint = "http://h:1/devstoreaccount1";
  setup.auth = AzureAuth::SharedKey;
  setup.account_key = key;
  setup.source = "AZURE_STORAGE_ACCOUNT_KEY";
  const AzureSigner signer(setup);
  auto blob = signer.presign("http://h:1/devstoreaccount1/models/a%20b/model.safetensors", 1800000000 - 600, 600);
  REQUIRE(blob);
  CHECK(*blob == "http://h:1/devstoreaccount1/models/a%20b/model.safetensors?" +
                     azure_service_sas("devstoreaccount1", key, "models", "a b/model.safetensors", "r", 1800000000));
  auto list = signer.presign(azure_list_url(setup.endpoint, "models", "p/", ""), 1800000000 - 600, 600);
  REQUIRE(list);
  CHECK_THAT(*list, Catch::EndsWith("&prefix=p%2F&" + azure_service_sas("devstoreaccount1", key, "models", "", "l", 1800000000)));
  CHECK(signer.expires_at(100, 600) == 700);
  CHECK(signer.credentials_source(0) == "the account key of devstoreaccount1 from AZURE_STORAGE_ACCOUNT_KEY");
  CHECK_FALSE(signer.presign("http://elsewhere/models/x", 0, 600));

  setup.auth = AzureAuth::Sas;
  setup.sas = "sv=2022-11-02&se=2027-01-15T08%3A00%3A00Z&sp=rl&sig=abc";
  const AzureSigner sas(setup);
  CHECK(*sas.presign("http://h:1/devstoreaccount1/models/x", 0, 600) == "http://h:1/devstoreaccount1/models/x?" + setup.sas);
  CHECK(sas.expires_at(0, 600) == 1800000000);  // the SAS's own se
  setup.auth = AzureAuth::Anonymous;
  const AzureSigner anonymous(setup);
  CHECK(*anonymous.presign("http://h:1/devstoreaccount1/models/x", 0, 600) == "http://h:1/devstoreaccount1/models/x");
  CHECK(anonymous.expires_at(0, 600) == 0);
  CHECK(anonymous.credentials_source(0).empty());
}

TEST_CASE("List Blobs answers: blobs with sizes and ETags, prefixes, NextMarker; not a listing refused") {
  const char* xml = R"(<?xml version="1.0" encoding="utf-8"?>
<EnumerationResults ServiceEndpoint="http://127.0.0.1:10000/devstoreaccount1" ContainerName="models">
  <Prefix>m/</Prefix><Delimiter>/</Delimiter>
  <Blobs>
    <Blob><Name>m/model.safetensors</Name><Properties><Content-Length>1234</Content-Length><Etag>0x8DC1</Etag></Properties></Blob>
    <BlobPrefix><Name>m/sub/</Name></BlobPrefix>
    <Blob><Name>m/b.json</Name><Properties><Etag>"0x8DC2"</Etag><Content-Length>7</Content-Length></Properties></Blob>
  </Blobs>
  <NextMarker>2!80!MDAwMDE</NextMarker>
</EnumerationResults>)";
  auto page = parse_list_blobs(xml);
  REQUIRE(page);
  REQUIRE(page->blobs.size() == 2);
  CHECK(page->blobs[0].name == "m/model.safetensors");
  CHECK(page->blobs[0].size == 1234);
  CHECK(page->blobs[0].etag == "0x8DC1");
  CHECK(page->blobs[1].size == 7);
  CHECK(page->prefixes == std::vector<std::string>{"m/sub/"});
  CHECK(page->next_marker == "2!80!MDAwMDE");
  CHECK(parse_list_blobs("<EnumerationResults><Blobs/><NextMarker/></EnumerationResults>")->next_marker.empty());
  CHECK(parse_list_blobs("<Error><Code>X</Code></Error>").error().code == ErrorCode::BadResponse);
  CHECK(parse_list_blobs("<EnumerationResults><Blobs><Blob><Name>x</Name><Properties><Content-Length>1e3</Content-Length>"
                         "</Properties></Blob></Blobs></EnumerationResults>")
            .error()
            .code == ErrorCode::BadResponse);
}

TEST_CASE("Azure errors in words: not found, refused signatures, private containers, busy, changed blobs") {
  auto body = [](const char* code, const char* message) {
    return std::string("<?xml version=\"1.0\"?><Error><Code>") + code + "</Code><Message>" + message +
           "\nRequestId:42\nTime:now</Message><AuthenticationErrorDetail>The MAC signature found in the request "
           "'SIGNATURE' is not the same</AuthenticationErrorDetail></Error>";
  };
  const std::string key_source = "the account key of acct from AZURE_STORAGE_ACCOUNT_KEY";
  struct Row {
    const char* name;
    AzureReply reply;
    std::string source;
    ErrorCode code;
    std::vector<const char*> words;
  };
  const Row rows[] = {
      {"BlobNotFound", {404, body("BlobNotFound", "The specified blob does not exist."), ""}, key_source,
       ErrorCode::RemoteNotFound, {"HTTP 404 BlobNotFound", "The specified blob does not exist.", "no such blob"}},
      {"ContainerNotFound (header only)", {404, "", "ContainerNotFound"}, key_source, ErrorCode::RemoteNotFound,
       {"no such container"}},
      {"AuthenticationFailed with a key", {403, body("AuthenticationFailed", "Server failed to authenticate"), ""},
       key_source, ErrorCode::Unauthorized, {"the account key does not match", "AZURE_STORAGE_ACCOUNT_KEY"}},
      {"AuthenticationFailed with a SAS", {403, body("AuthenticationFailed", "Signature did not match"), ""},
       "the SAS from AZURE_STORAGE_SAS_TOKEN", ErrorCode::Unauthorized, {"the SAS is not valid", "AZURE_STORAGE_SAS_TOKEN"}},
      {"anonymous, private container", {404, body("ResourceNotFound", "The specified resource does not exist."), ""}, "",
       ErrorCode::RemoteNotFound, {"not readable anonymously"}},
      {"anonymous, refused", {403, body("AuthorizationFailure", "no"), ""}, "", ErrorCode::Unauthorized,
       {"the container is not public", "AZURE_STORAGE_CONNECTION_STRING"}},
      {"permission mismatch", {403, body("AuthorizationPermissionMismatch", "no"), ""}, key_source,
       ErrorCode::Unauthorized, {"access denied to the account key of acct"}},
      {"ServerBusy", {503, body("ServerBusy", "busy"), ""}, key_source, ErrorCode::RateLimited, {"slow down"}},
      {"ConditionNotMet", {412, body("ConditionNotMet", "changed"), ""}, key_source, ErrorCode::Integrity,
       {"the blob changed"}},
  };
  for (const auto& row : rows) {
    DYNAMIC_SECTION(row.name) {
      const Error e = azure_error(row.reply, "az://acct/models/m.safetensors", row.source);
      CHECK(e.code == row.code);
      CHECK_THAT(e.message, Catch::StartsWith("az://acct/models/m.safetensors: Azure answered HTTP"));
      for (const char* w : row.words) CHECK_THAT(e.message, Catch::Contains(w));
      CHECK(e.message.find("SIGNATURE") == std::string::npos);  // AuthenticationErrorDetail is never shown
      CHECK(e.message.find("RequestId") == std::string::npos);
    }
  }
}

TEST_CASE("SAS URLs are redacted from messages like presigned S3 URLs") {
  CHECK(redact_signed_urls("GET http://h/c/b?sv=2022-11-02&sr=b&sp=r&se=x&sig=SECRET: HTTP 403") ==
        "GET http://h/c/b: HTTP 403");
  CHECK(redact_signed_urls("http://h/c?sig=SECRET") == "http://h/c");
  CHECK(redact_signed_urls("http://h/c?restype=container&comp=list") == "http://h/c?restype=container&comp=list");
  CHECK(redact_signed_urls("http://h/c?design=1") == "http://h/c?design=1");
}
