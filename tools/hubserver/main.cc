// SPDX-License-Identifier: Apache-2.0
// tensorfetch-test-server: the Hub-like test server as a process (demo, benchmarks).
// Prints the endpoint (one line) on stdout once listening; runs until SIGINT/SIGTERM.
#include <pthread.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <iostream>

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
  app.add_flag("--hash-on-start,!--no-hash-on-start", hash_on_start,
               "Hash every file before listening, so requests do not pay for it (default on)");
  app.add_flag("--summary", summary, "On exit, print request statistics (JSON) on stderr");
  CLI11_PARSE(app, argc, argv);

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

  HubServer server(opt);
  try {
    if (hash_on_start) server.warm_up();
    server.start();
  } catch (const std::exception& e) {
    std::cerr << "tensorfetch-test-server: " << e.what() << "\n";
    return 1;
  }
  std::cout << server.endpoint() << std::endl;

  int sig = 0;
  sigwait(&set, &sig);
  server.stop();
  if (summary) std::cerr << summarize(server.log()).to_json() << "\n";
  return 0;
}
