// SPDX-License-Identifier: Apache-2.0
// Hostile environments and servers against the CLI (issue 14, items 5, 7, 8):
//  - a token (HF_TOKEN, the token file) or an endpoint/URL with CR/LF or other control
//    characters is refused before any request: exit 1, a message naming where it came from,
//    never the token; the server's log stays empty;
//  - an https Hub redirecting to http:// is refused at that hop (exit 3, both URLs named): the
//    plaintext server never sees a request and nothing is cached;
//  - a server dripping bytes is abandoned after the stall window and the retries (exit 3, the
//    rate named), in bounded time;
//  - a hostile server string in an error message is escaped on the terminal.
// The built binary runs against in-process servers whose request logs show what was sent.
#include <chrono>
#include <memory>
#include <thread>

#include "cli_util.hpp"
#include "hub_server.hpp"

using namespace clitest;
using tensorfetch::testing::HubServer;
using tensorfetch::testing::RequestRecord;

namespace {

const std::string kHeader = R"({"__metadata__":{"format":"pt"},)"
                            R"("a.weight":{"dtype":"F32","shape":[4,8],"data_offsets":[0,128]},)"
                            R"("b.weight":{"dtype":"F32","shape":[2,8],"data_offsets":[128,192]}})";

// A Hub root with org/tiny (model.safetensors, config.json), a hermetic environment (no token,
// endpoint, CA bundle or offline mode from the developer's shell) and a server on it.
struct Hub {
  TempDir root;
  TempDir hf_home;  // $HF_HOME: the token file goes here when a test writes one
  TempDir cache;    // TENSORFETCH_CACHE
  tftest::ScopedEnv env;
  std::unique_ptr<HubServer> server;

  explicit Hub(tensorfetch::testing::Options options = {}) {
    fs::create_directories(root / "org" / "tiny");
    std::string data(192, '\0');
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 5);
    write_file(root / "org" / "tiny" / "model.safetensors", make_safetensors(kHeader, data));
    write_file(root / "org" / "tiny" / "config.json", R"({"model_type":"llama"})");
    for (const char* name : {"HF_TOKEN", "HF_ENDPOINT", "CURL_CA_BUNDLE", "HF_HUB_OFFLINE", "HF_HUB_CACHE"}) {
      env.set(name, std::nullopt);
    }
    env.set("HF_HOME", hf_home.path().string());
    env.set("TENSORFETCH_CACHE", cache.path().string());
    options.root = root.path();
    server = std::make_unique<HubServer>(options);
    server->start();
  }
  std::string endpoint() const { return server->endpoint(); }
  fs::path token_file() const { return hf_home / "token"; }
};

std::string log_text(const std::vector<RequestRecord>& log) {
  std::string s;
  for (const auto& r : log) s += r.to_json() + "\n";
  return s;
}

// No C0 control byte other than '\n', no DEL: what reaches the terminal is inert.
bool terminal_safe(const std::string& text) {
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if ((c < 0x20 && c != '\n') || c == 0x7f) return false;
  }
  return true;
}

// The records of `server`'s log for `kind` requests, once there are `count` of them (or after
// 5 s): a request the client abandoned enters the log when the server notices, a little later.
std::vector<RequestRecord> await_log(const HubServer& server, const std::string& kind, std::size_t count) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (true) {
    std::vector<RequestRecord> found;
    for (const auto& rec : server.log()) {
      if (rec.kind == kind) found.push_back(rec);
    }
    if (found.size() >= count || std::chrono::steady_clock::now() > deadline) return found;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Bytes the cache holds, over every blob (`cache ls --json`).
std::uint64_t cached_bytes(const fs::path& cache) {
  auto ls = run({"cache", "ls", "--json", "--cache-dir", cache.string()});
  REQUIRE(ls.exit_code == 0);
  std::uint64_t present = 0;
  for (const auto& e : json::parse(ls.out)) present += e.at("present").get<std::uint64_t>();
  return present;
}

}  // namespace

TEST_CASE("cli hostile: a token with CR/LF or another control character is refused before any request",
          "[cli][hostile][token]") {
  Hub hub;
  struct Row {
    const char* what;
    std::optional<std::string> env_token;   // HF_TOKEN
    std::optional<std::string> file_token;  // $HF_HOME/token contents
    std::string source;                     // what the message must name
  };
  const std::vector<Row> rows = {
      {"HF_TOKEN with CRLF + a header", "hf_secret\r\nX-Evil: 1", std::nullopt, "HF_TOKEN"},
      {"HF_TOKEN with a bare LF", "hf_secret\nX-Evil: 1", std::nullopt, "HF_TOKEN"},
      {"HF_TOKEN with an inner tab (surrounding white space is trimmed, as huggingface_hub does)",
       "hf_sec\tret\n", std::nullopt, "HF_TOKEN"},
      {"HF_TOKEN with a NUL-free control byte", "hf_secret\x01", std::nullopt, "HF_TOKEN"},
      {"token file with a bare CR + a header", std::nullopt, "hf_secret\rX-Evil: 1\n", "the file " + hub.token_file().string()},
      {"token file with two lines", std::nullopt, "hf_secret\r\nX-Evil: 1\r\n", "the file " + hub.token_file().string()},
  };
  for (const auto& row : rows) {
    hub.env.set("HF_TOKEN", row.env_token);
    if (row.file_token) {
      write_file(hub.token_file(), *row.file_token);
    } else {
      fs::remove(hub.token_file());
    }
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"inspect", "hf://org/tiny", "--endpoint", hub.endpoint()},
          std::vector<std::string>{"get", "hf://org/tiny", "-o", (hub.cache / "out.safetensors").string(), "--endpoint",
                                   hub.endpoint()},
          std::vector<std::string>{"inspect", hub.endpoint() + "/org/tiny/resolve/main/model.safetensors"}}) {
      auto res = run(args);
      const auto log = hub.server->take_log();
      INFO(row.what << ": " << describe(args) << "\nstderr: " << res.err << "\nserver log:\n" << log_text(log));
      CHECK(res.exit_code == 1);
      CHECK(res.out.empty());
      CHECK_THAT(res.err, Catch::StartsWith("tensorfetch: error: the Hugging Face token from " + row.source +
                                            " contains a control character"));
      CHECK_THAT(res.err, !Catch::Contains("hf_secret") && !Catch::Contains("Evil"));
      CHECK(terminal_safe(res.err));
      CHECK(log.empty());  // nothing was sent
      CHECK_FALSE(fs::exists(hub.cache / "out.safetensors"));
    }
  }
}

TEST_CASE("cli hostile: the token file's trailing newline is trimmed and the token is sent to the Hub only",
          "[cli][hostile][token]") {
  Hub hub;
  hub.server->set_token("hf_good");
  hub.server->set_private_repos({"org/tiny"});
  write_file(hub.token_file(), "hf_good\r\n");
  const std::vector<std::string> args = {"inspect", "hf://org/tiny", "--endpoint", hub.endpoint()};
  auto res = run(args);
  const auto log = hub.server->log();
  INFO(describe(args) << "\nstderr: " << res.err << "\nserver log:\n" << log_text(log));
  CHECK(res.exit_code == 0);
  REQUIRE_FALSE(log.empty());
  for (const auto& rec : log) {
    INFO(rec.to_json());
    CHECK(rec.status != 401);  // the private repo accepted the token
    CHECK(rec.authorization == (rec.kind == "resolve"));
    if (rec.authorization) CHECK(rec.authorization_sha256 == sha256_hex("Bearer hf_good"));
  }
}

TEST_CASE("cli hostile: an endpoint or URL with a space or control character is refused before libcurl sees it",
          "[cli][hostile][url]") {
  Hub hub;
  const std::string ep = hub.endpoint();
  struct Row {
    const char* what;
    std::vector<std::string> args;
    std::optional<std::string> hf_endpoint;
    std::string names;  // the message names this
  };
  const std::vector<Row> rows = {
      {"--endpoint with CRLF + a header", {"inspect", "hf://org/tiny", "--endpoint", ep + "\r\nX-Evil: 1"}, {}, "the endpoint"},
      {"--endpoint with a space", {"inspect", "hf://org/tiny", "--endpoint", ep + "/ x"}, {}, "the endpoint"},
      {"HF_ENDPOINT with a LF", {"inspect", "hf://org/tiny"}, ep + "\nX-Evil: 1", "HF_ENDPOINT"},
      {"HF_ENDPOINT with an escape sequence", {"get", "hf://org/tiny", "-o", "x.safetensors"}, ep + "/\x1b[2J", "HF_ENDPOINT"},
      {"a URL with a space", {"inspect", ep + "/org/tiny/resolve/main/model .safetensors"}, {}, "model%20.safetensors"},
      {"a URL with CRLF", {"inspect", ep + "/org/tiny/resolve/main/model.safetensors\r\nX-Evil: 1"}, {}, "%0D%0AX-Evil"},
  };
  for (const auto& row : rows) {
    hub.env.set("HF_ENDPOINT", row.hf_endpoint);
    auto res = run(row.args, hub.cache.path());
    const auto log = hub.server->take_log();
    INFO(row.what << ": " << describe(row.args) << "\nstderr: " << res.err << "\nserver log:\n" << log_text(log));
    CHECK(res.exit_code == 1);
    CHECK_THAT(res.err, Catch::StartsWith("tensorfetch: error: ") && Catch::Contains(row.names));
    CHECK_THAT(res.err, Catch::Contains("space") || Catch::Contains("control character"));
    CHECK(terminal_safe(res.err));
    CHECK(log.empty());
  }
}

TEST_CASE("cli hostile: an https Hub redirecting to http:// is refused (exit 3): no plaintext request, nothing cached",
          "[cli][hostile][tls]") {
  TempDir certs;
  const auto tls = tensorfetch::testing::generate_self_signed_cert(certs / "tls");
  tensorfetch::testing::Options o;
  o.tls_cert = tls.cert;
  o.tls_key = tls.key;
  Hub hub(o);
  REQUIRE(hub.endpoint().starts_with("https://"));
  // The plaintext "CDN": the same repos over http, on another port.
  tensorfetch::testing::Options plain_options;
  plain_options.root = hub.root.path();
  HubServer plain(plain_options);
  plain.start();
  const std::string plain_base = "http://127.0.0.1:" + std::to_string(plain.port());
  hub.server->set_cdn_base(plain_base);

  const fs::path out = hub.cache / "out.safetensors";
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"inspect", "hf://org/tiny"}, std::vector<std::string>{"get", "hf://org/tiny", "-o", out.string()},
        std::vector<std::string>{"download", "hf://org/tiny", "-o", (hub.cache / "dl").string()}}) {
    auto full = args;
    full.insert(full.end(), {"--endpoint", hub.endpoint(), "--cacert", tls.cert.string(), "--retries", "0"});
    auto res = run(full);
    const auto log = hub.server->take_log();
    INFO(describe(full) << "\nstderr: " << res.err << "\nTLS server log:\n" << log_text(log)
                        << "\nplain server log:\n" << log_text(plain.log()));
    CHECK(res.exit_code == 3);
    CHECK(res.out.empty());
    CHECK_THAT(res.err, Catch::Contains(hub.endpoint() + "/org/tiny/resolve/main/model.safetensors"));
    CHECK_THAT(res.err, Catch::Contains("refused the redirect from https to " + plain_base + "/cdn/"));
    CHECK_THAT(res.err, Catch::Contains("downgrade"));
    CHECK(plain.log().empty());  // not one plaintext request
    REQUIRE_FALSE(log.empty());
    for (const auto& rec : log) CHECK(rec.kind == "resolve");  // only the Hub's answers were read
    CHECK_FALSE(fs::exists(out));
    CHECK_FALSE(fs::exists(hub.cache / "dl" / "model.safetensors"));
    CHECK(cached_bytes(hub.cache.path()) == 0);
  }

  // The same server with an https CDN: the get works (the refusal is about the downgrade only).
  hub.server->set_cdn_base("");
  const std::vector<std::string> ok_args = {"get", "hf://org/tiny", "-o", out.string(), "--endpoint", hub.endpoint(),
                                            "--cacert", tls.cert.string()};
  auto ok = run(ok_args);
  INFO(describe(ok_args) << "\nstderr: " << ok.err);
  CHECK(ok.exit_code == 0);
  CHECK(fs::exists(out));
}

TEST_CASE("cli hostile: a server dripping 2 bytes per 100 ms is abandoned after the stall window and the retries",
          "[cli][hostile][drip]") {
  Hub hub;
  hub.server->drip(2, 100, -1, "/cdn/");
  const std::vector<std::string> args = {"inspect",          "hf://org/tiny", "--endpoint", hub.endpoint(),
                                         "--stall-timeout",  "1000",          "--retries",  "1",
                                         "--min-rate",       "1KiB"};
  const auto t0 = std::chrono::steady_clock::now();
  auto res = run(args);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto log = hub.server->log();
  INFO(describe(args) << "\nstderr: " << res.err << "\nserver log:\n" << log_text(log) << "\nseconds: " << seconds);
  CHECK(res.exit_code == 3);
  CHECK(res.out.empty());
  CHECK_THAT(res.err, Catch::Contains("/cdn/") && Catch::Contains("(bytes=0-"));
  CHECK_THAT(res.err, Catch::Contains("too slow: ") && Catch::Contains(" B/s over the last 1000 ms, below the "
                                                                       "minimum of 1024 B/s"));
  CHECK_THAT(res.err, Catch::Contains("(after 2 attempts)"));
  CHECK(seconds < 8);  // 2 windows of 1 s, a backoff, process start; never the ~15 s the drip needs
  const auto dripped = await_log(*hub.server, "cdn", 2);
  CHECK(dripped.size() == 2);  // 1 + --retries attempts
  for (const auto& rec : dripped) {
    INFO(rec.to_json());
    CHECK(rec.fault == "drip");
    CHECK(rec.dropped);  // the client went away before the body was complete
    CHECK(rec.range == "bytes=0-262143");
  }
  CHECK(cached_bytes(hub.cache.path()) == 0);
}

TEST_CASE("cli hostile: a hostile server string in an error message is escaped on the terminal",
          "[cli][hostile][escape]") {
  Hub hub;
  hub.server->set_header("Content-Range", "bytes \x1b]0;pwned\x07\x1b[2J", -1, "/cdn/");
  const std::vector<std::string> args = {"inspect", "hf://org/tiny", "--endpoint", hub.endpoint(), "--retries", "0"};
  auto res = run(args);
  INFO(describe(args) << "\nstderr: " << res.err << "\nserver log:\n" << log_text(hub.server->log()));
  CHECK(res.exit_code == 3);
  CHECK(terminal_safe(res.err));
  CHECK_THAT(res.err, Catch::Contains("Content-Range 'bytes \\x1b]0;pwned\\x07\\x1b[2J'"));
}
