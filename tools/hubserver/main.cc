// SPDX-License-Identifier: Apache-2.0
// tensorfetch-test-server: the Hub-like test server as a process (demo, benchmarks).
// Prints the endpoint (one line) on stdout once listening; runs until SIGINT/SIGTERM.
#include <pthread.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "hub_server.hpp"

int main(int argc, char** argv) {
  using tensorfetch::testing::HubServer;
  using tensorfetch::testing::Options;

  Options opt;
  std::string root, log_file, cert, key, self_signed_dir;
  bool summary = false;
  bool hash_on_start = true;
  CLI::App app{
      "Hub-like HTTP(S) test server for tensorfetch.\n"
      "Serves ROOT/{org}/{name}/... and ROOT/datasets/{org}/{name}/... at\n"
      "/{repo}/resolve/{rev}/{path}; LFS files redirect to /cdn/{sha256} on --cdn-host.\n"
      "Runtime switches: GET /_admin/set?latency_ms=50&fail_next=3&status=429 ...\n"
      "(see tools/hubserver/README.md); log: GET /_admin/log, /_admin/stats."};
  app.add_option("--root", root, "Directory of repos")->required()->check(CLI::ExistingDirectory);
  app.add_option("--port", opt.port, "Port (0: ephemeral)")->capture_default_str();
  app.add_option("--bind", opt.bind_address, "Address to listen on")->capture_default_str();
  app.add_option("--hub-host", opt.hub_host, "Host name of the printed endpoint")
      ->capture_default_str();
  app.add_option("--cdn-host", opt.cdn_host, "Host name in CDN redirect URLs")
      ->capture_default_str();
  app.add_flag("--enforce-hosts", opt.enforce_hosts,
               "421 for Hub routes on the CDN host name and vice versa");
  app.add_option("--latency-ms", opt.latency_ms, "Latency added to every request")
      ->capture_default_str();
  app.add_option("--log", log_file, "Append one JSON line per request to FILE");
  app.add_option("--tls-cert", cert, "PEM certificate (HTTPS)");
  app.add_option("--tls-key", key, "PEM private key (HTTPS)");
  app.add_option("--tls-self-signed", self_signed_dir,
                 "Generate cert.pem/key.pem for localhost and 127.0.0.1 in DIR and serve HTTPS");
  app.add_option("--threads", opt.threads, "Worker threads")->capture_default_str();
  app.add_flag("--ignore-range", opt.ignore_range,
               "Answer Range requests with 200 and the full body");
  app.add_option("--token", opt.token, "Token accepted for gated/private repos");
  app.add_option("--gated", opt.gated_repos, "Gated repo id (403 GatedRepo without the token)");
  app.add_option("--private", opt.private_repos, "Private repo id (401 without the token)");
  app.add_flag("--unknown-repo-401", opt.unknown_repo_401,
               "Unknown repo without a token → 401 (like the real Hub)");
  app.add_option("--cdn-url-ttl-ms", opt.cdn_url_ttl_ms, "CDN URLs expire after this (0: never)");
  // The real Hub (issue 9); see tools/hubserver/README.md.
  std::vector<std::string> aliases;
  app.add_flag("--real-hub", opt.real_hub,
               "Answer as huggingface.co does today: all of --lfs-without-etag, --xet-etags,\n"
               "--resolve-cache, --hub-errors and the resolvers rate limit (q=3000, w=300)");
  app.add_flag("--lfs-without-etag", opt.lfs_without_etag, "LFS redirects (302) carry no ETag");
  app.add_flag("--xet-etags", opt.xet_etags, "CDN ETags are Xet hashes, not the sha256");
  app.add_flag("--resolve-cache", opt.resolve_cache,
               "Small files: relative 307 to /api/resolve-cache/...");
  app.add_flag("--hub-errors", opt.hub_errors,
               "Access errors exactly as the Hub sends them (401/403/404, invalid tokens)");
  app.add_option("--alias", aliases, "OLD=NEW: renamed repo or legacy id (relative 307)");
  app.add_option("--disabled", opt.disabled_repos, "Disabled repo id (403)");
  app.add_option("--other-token", opt.other_tokens,
                 "A valid token without access to gated/private repos");
  app.add_option("--rate-limit", opt.ratelimit_quota,
                 "Resolve requests per window (\"resolvers\"; 0: off)")
      ->capture_default_str();
  app.add_option("--rate-window", opt.ratelimit_window_s, "Rate limit window in seconds")
      ->capture_default_str();
  app.add_option("--cdn-fault", opt.cdn_fault_status,
                 "Answer CDN requests 416, 400 or 403 (SignatureError)")
      ->check(CLI::IsMember({0, 400, 403, 416}));
  app.add_option("--cdn-fault-n", opt.cdn_fault_n, "... for this many requests (-1: all)")
      ->capture_default_str();
  app.add_option("--cdn-fault-match", opt.cdn_fault_match, "... whose target contains this");
  app.add_flag("--hash-on-start,!--no-hash-on-start", hash_on_start,
               "Hash every file before listening, so requests do not pay for it (default on)");
  app.add_flag("--summary", summary, "On exit, print request statistics (JSON) on stderr");
  CLI11_PARSE(app, argc, argv);
  for (const auto& a : aliases) {
    auto eq = a.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == a.size()) {
      std::cerr << "tensorfetch-test-server: --alias " << a << ": expected OLD=NEW\n";
      return 1;
    }
    opt.repo_aliases[a.substr(0, eq)] = a.substr(eq + 1);
  }

  opt.root = root;
  opt.log_file = log_file;
  if (!self_signed_dir.empty()) {
    auto files = tensorfetch::testing::generate_self_signed_cert(self_signed_dir);
    cert = files.cert.string();
    key = files.key.string();
  }
  opt.tls_cert = cert;
  opt.tls_key = key;

  // Block the signals before any thread starts; wait for them synchronously below.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  std::unique_ptr<HubServer> server;
  try {
    server = std::make_unique<HubServer>(opt);
    if (hash_on_start) server->warm_up();
    server->start();
  } catch (const std::exception& e) {
    std::cerr << "tensorfetch-test-server: " << e.what() << "\n";
    return 1;
  }
  std::cout << server->endpoint() << std::endl;

  int sig = 0;
  sigwait(&set, &sig);
  server->stop();
  if (summary) std::cerr << summarize(server->log()).to_json() << "\n";
  return 0;
}
