// SPDX-License-Identifier: Apache-2.0
// The Hub's rules (lib/hub, private): the environment as huggingface_hub reads it, error
// responses turned into messages, RateLimit headers, ETag comparison.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "hub/environment.h"
#include "hub/hub_errors.h"
#include "net/http_client.h"
#include "support/env.hpp"
#include "support/files.hpp"

using namespace tensorfetch;
using namespace tensorfetch::detail;
using tftest::env_of;

namespace {

// A directory holding a file `token` with this content.
struct TokenFile {
  tftest::TempDir tmp{"tf-hub-env"};
  std::filesystem::path dir = tmp.path();
  explicit TokenFile(const std::string& content) { tftest::write_file(dir / "token", content); }
};

}  // namespace

TEST_CASE("hub environment: defaults and the variables huggingface_hub reads, in its order", "[hub][env]") {
  auto e = read_hub_environment(env_of({{"HOME", "/home/u"}}));
  REQUIRE(e);
  CHECK(e->endpoint == "https://huggingface.co");
  CHECK(e->hf_home == "/home/u/.cache/huggingface");
  CHECK(e->hub_cache == "/home/u/.cache/huggingface/hub");
  CHECK_FALSE(e->offline);
  CHECK_FALSE(e->token);

  // HF_HOME defaults to $XDG_CACHE_HOME/huggingface; HF_HUB_CACHE beats the legacy name.
  e = read_hub_environment(env_of({{"HOME", "/home/u"}, {"XDG_CACHE_HOME", "/x"}}));
  CHECK(e->hf_home == "/x/huggingface");
  CHECK(e->hub_cache == "/x/huggingface/hub");
  e = read_hub_environment(env_of({{"HF_HOME", "/h"}, {"HUGGINGFACE_HUB_CACHE", "/legacy"}}));
  CHECK(e->hub_cache == "/legacy");
  e = read_hub_environment(env_of({{"HF_HOME", "/h"}, {"HUGGINGFACE_HUB_CACHE", "/legacy"}, {"HF_HUB_CACHE", "/new"}}));
  CHECK(e->hub_cache == "/new");
  e = read_hub_environment(env_of({{"HF_ENDPOINT", "http://mirror:8080//"}}));
  CHECK(e->endpoint == "http://mirror:8080");

  // Offline: HF_HUB_OFFLINE, else TRANSFORMERS_OFFLINE; 1/true/yes/on in any case.
  for (const char* v : {"1", "true", "TRUE", "Yes", "on"}) {
    CHECK(read_hub_environment(env_of({{"HF_HUB_OFFLINE", v}}))->offline);
    CHECK(read_hub_environment(env_of({{"TRANSFORMERS_OFFLINE", v}}))->offline);
  }
  for (const char* v : {"0", "false", "no", "", "2"}) CHECK_FALSE(read_hub_environment(env_of({{"HF_HUB_OFFLINE", v}}))->offline);
  CHECK_FALSE(read_hub_environment(env_of({{"HF_HUB_OFFLINE", "0"}, {"TRANSFORMERS_OFFLINE", "1"}}))->offline);
}

TEST_CASE("hub environment: the token comes from HF_TOKEN, HUGGING_FACE_HUB_TOKEN, then the token file", "[hub][env]") {
  TokenFile file("  hf_from_file\n");
  const std::string home = file.dir.string();
  auto e = read_hub_environment(env_of({{"HF_HOME", home}}));
  REQUIRE(e);
  REQUIRE(e->token);
  CHECK(e->token->value == "hf_from_file");
  CHECK(e->token->source == "the file " + home + "/token");

  e = read_hub_environment(env_of({{"HF_HOME", home}, {"HUGGING_FACE_HUB_TOKEN", "hf_legacy"}}));
  CHECK(e->token->value == "hf_legacy");
  CHECK(e->token->source == "HUGGING_FACE_HUB_TOKEN");
  e = read_hub_environment(env_of({{"HF_HOME", home}, {"HUGGING_FACE_HUB_TOKEN", "hf_legacy"}, {"HF_TOKEN", " hf_env "}}));
  CHECK(e->token->value == "hf_env");
  CHECK(e->token->source == "HF_TOKEN");
  // An empty HF_TOKEN does not hide the file.
  e = read_hub_environment(env_of({{"HF_HOME", home}, {"HF_TOKEN", ""}}));
  CHECK(e->token->value == "hf_from_file");

  TokenFile other("hf_other");
  e = read_hub_environment(env_of({{"HF_HOME", home}, {"HF_TOKEN_PATH", (other.dir / "token").string()}}));
  CHECK(e->token->value == "hf_other");
  CHECK_THAT(e->token->source, Catch::Contains("HF_TOKEN_PATH"));
  // A missing token file means anonymous.
  e = read_hub_environment(env_of({{"HF_TOKEN_PATH", "/nonexistent/token"}}));
  REQUIRE(e);
  CHECK_FALSE(e->token);
}

TEST_CASE("hub environment: a token with a line break or control character is refused, naming its source only",
          "[hub][env][security]") {
  auto e = read_hub_environment(env_of({{"HF_TOKEN", "abc\r\nX-Evil: 1"}}));
  REQUIRE_FALSE(e);
  CHECK(e.error().code == ErrorCode::InvalidArgument);
  CHECK_THAT(e.error().message, Catch::Contains("HF_TOKEN") && Catch::Contains("line break"));
  CHECK_THAT(e.error().message, !Catch::Contains("abc") && !Catch::Contains("X-Evil"));

  TokenFile file("hf_a\x07z\n");
  e = read_hub_environment(env_of({{"HF_HOME", file.dir.string()}}));
  REQUIRE_FALSE(e);
  CHECK_THAT(e.error().message, Catch::Contains(file.dir.string() + "/token") && Catch::Contains("control character"));
  CHECK_FALSE(check_token("hf in side", "the option"));
  CHECK_FALSE(check_token("hf\xc3\xa9", "the option"));
  CHECK(check_token("hf_AbC123-._~+/=", "the option"));
}

TEST_CASE("hub rate limits: RateLimit and RateLimit-Policy as the Hub sends them", "[hub][ratelimit]") {
  auto info = parse_rate_limit("\"resolvers\";r=0;t=258", "\"fixed window\";\"resolvers\";q=3000;w=300");
  REQUIRE(info);
  CHECK(info->bucket == "resolvers");
  CHECK(info->remaining == 0u);
  CHECK(info->reset_s == 258u);
  CHECK(info->quota == 3000u);
  CHECK(info->window_s == 300u);
  CHECK(describe_rate_limit(*info) ==
        "(0 of 3000 requests left in the 300 s \"resolvers\" window, which resets in 258 seconds)");
  auto bare = parse_rate_limit("\"api\";r=489;t=189");
  REQUIRE(bare);
  CHECK(bare->remaining == 489u);
  CHECK_FALSE(bare->quota);
  CHECK_FALSE(parse_rate_limit(""));
  CHECK_FALSE(parse_rate_limit("\"api\""));
  CHECK_FALSE(parse_rate_limit("r=x;t=-1"));
}

TEST_CASE("hub errors: every error the Hub sends gets its own message and code (exit 3)", "[hub][errors]") {
  HubAsk anon{"org/name", "main", "config.json", "https://hf.co", "org/name", ""};
  HubAsk authed = anon;
  authed.token_source = "HF_TOKEN";
  struct Row {
    const char* name;
    HubReply reply;
    const HubAsk* ask;
    ErrorCode code;
    std::vector<std::string> words;
  };
  const std::vector<Row> rows = {
      {"repo not found, anonymous (401)", {401, "u", "RepoNotFound", "", "", "", 1}, &anon, ErrorCode::RemoteNotFound,
       {"org/name not found", "HTTP 401", "set HF_TOKEN"}},
      {"repo not found, with a token (404)", {404, "u", "RepoNotFound", "", "", "", 1}, &authed, ErrorCode::RemoteNotFound,
       {"not found, or the account of the token from HF_TOKEN cannot see it"}},
      {"revision not found", {404, "u", "RevisionNotFound", "", "", "", 1}, &anon, ErrorCode::RemoteNotFound,
       {"revision 'main' not found in org/name"}},
      {"entry not found", {404, "u", "EntryNotFound", "", "", "", 1}, &anon, ErrorCode::RemoteNotFound,
       {"has no file config.json"}},
      {"gated, anonymous (401)", {401, "u", "GatedRepo", "", "", "", 1}, &anon, ErrorCode::Unauthorized,
       {"is gated", "accept its conditions on the Hub at https://hf.co/org/name", "set HF_TOKEN"}},
      {"gated, token without access (403)", {403, "u", "GatedRepo", "", "", "", 1}, &authed, ErrorCode::Unauthorized,
       {"gated and the account of the token from HF_TOKEN has no access"}},
      {"invalid token (401)", {401, "u", "", "Invalid credentials in Authorization header", "", "", 1}, &authed,
       ErrorCode::Unauthorized, {"refused the token from HF_TOKEN as invalid", "settings/tokens"}},
      {"disabled repo (403)", {403, "u", "", "Access to this resource is disabled.", "", "", 1}, &anon,
       ErrorCode::Unauthorized, {"org/name has been disabled"}},
      {"rate limited", {429, "u", "", "", "\"resolvers\";r=0;t=258", "\"fixed window\";\"resolvers\";q=3000;w=300", 6},
       &anon, ErrorCode::RateLimited, {"HTTP 429 (rate limited) after 6 attempts", "resets in 258 seconds", "HF_TOKEN"}},
      {"server error", {502, "u", "", "", "", "", 3}, &anon, ErrorCode::Network, {"server error HTTP 502"}},
      {"other", {418, "u", "", "", "", "", 1}, &anon, ErrorCode::BadResponse, {"unexpected HTTP 418"}},
  };
  for (const auto& row : rows) {
    INFO(row.name);
    Error e = hub_error(row.reply, *row.ask);
    CHECK(e.code == row.code);
    CHECK(exit_code(e.code) == 3);
    for (const auto& w : row.words) CHECK_THAT(e.message, Catch::Contains(w));
    CHECK_THAT(e.message, Catch::Contains("u"));
  }
  // Distinct messages for distinct situations.
  std::set<std::string> messages;
  for (const auto& row : rows) messages.insert(hub_error(row.reply, *row.ask).message);
  CHECK(messages.size() == rows.size());
}

TEST_CASE("hub: ETags compare without W/ and quotes; commit and sha256 forms", "[hub]") {
  CHECK(same_etag("W/\"abc\"", "\"abc\""));
  CHECK(same_etag(" abc ", "\"abc\""));
  CHECK_FALSE(same_etag("\"abc\"", "\"abd\""));
  CHECK(bare_etag("W/\"x\"") == "x");
  CHECK(is_commit_id(std::string(40, 'a')));
  CHECK_FALSE(is_commit_id(std::string(40, 'A')));
  CHECK_FALSE(is_commit_id(std::string(41, 'a')));
  CHECK_FALSE(is_commit_id("../../../../tmp/x"));
  CHECK(is_sha256_hex(std::string(64, '0')));
  CHECK_FALSE(is_sha256_hex(std::string(63, '0')));
}
