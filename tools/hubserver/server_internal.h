// SPDX-License-Identifier: Apache-2.0
// HubServer::Impl: the state of one server (options, log, switches, repos, the httplib
// server and its thread) and the members that answer requests. Its members are defined in
// server.cc (lifecycle), response.cc (bodies and errors), routes.cc (resolve, resolve-cache,
// api, dispatch), cdn.cc, access.cc (who may see a repo) and admin.cc (/_admin). Private to
// tools/hubserver.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "hub_server.hpp"
#include "repo_store_internal.h"
#include "request_internal.h"
#include "request_log_internal.h"
#include "switches_internal.h"

namespace tensorfetch::testing {

struct HubServer::Impl {
  using PendingPtr = std::shared_ptr<detail::Pending>;

  explicit Impl(Options o);

  Options opt;
  detail::RequestLog log;
  detail::SwitchBoard switches;
  detail::RepoStore repos;

  // ------------------------------------------------------------ lifecycle (server.cc)
  std::unique_ptr<httplib::Server> svr;
  std::thread th;
  std::atomic<bool> started{false}, stopping{false}, listen_done{false};
  std::mutex stop_mu;
  std::condition_variable stop_cv;
  int port = 0;
  int listen_fd = -1;

  std::string scheme() const { return opt.tls_cert.empty() ? "http" : "https"; }
  /// Waits d (or until stop); true if stopping.
  bool sleep_or_stop(std::chrono::milliseconds d);
  void wait_for_stop();
  /// Shuts down (without closing: httplib owns them) the accepted sockets of this server, so
  /// idle keep-alive connections and blocked writes end now rather than after their timeouts.
  void shutdown_connections() const;

  // ------------------------------------------------------------ responses (response.cc)
  /// Writes the bytes that complete the response, committing the record first.
  bool final_write(httplib::DataSink& sink, detail::Pending& p, const char* d, std::size_t n,
                   bool payload);
  /// Small in-memory body, framed with Content-Length.
  void set_body(httplib::Response& res, const PendingPtr& p, std::string body,
                const char* content_type);
  /// An error: STATUS, X-Error-Code (unless empty), X-Error-Message, {"error": message}.
  void error(httplib::Response& res, const PendingPtr& p, int status, const std::string& code,
             const std::string& message);
  /// Serves a file (or a range of it) with `etag`; shared by the Hub's small files and the
  /// CDN. `xor_change`: the bytes are changed (change_etag_after); `match_file` is what
  /// switch patterns are matched against besides the target.
  void serve_file(const httplib::Request& req, httplib::Response& res, const PendingPtr& p,
                  const std::filesystem::path& path, const std::string& etag, bool xor_change,
                  const std::string& content_type, const std::string& match_file);
  struct BodyPlan;
  bool write_body(const BodyPlan& plan, detail::Pending& p, httplib::DataSink& sink);

  // ------------------------------------------------------------ routes (routes.cc, cdn.cc)
  /// Every logged route: latency, injected failures, the rate limit, dispatch, the header
  /// switch.
  void handle(const httplib::Request& req, httplib::Response& res, HubServer& self);
  void handle_resolve(const httplib::Request& req, httplib::Response& res, const PendingPtr& p,
                      detail::Route r);
  void handle_resolve_cache(const httplib::Request& req, httplib::Response& res,
                            const PendingPtr& p, const detail::Route& r);
  void handle_cdn(const httplib::Request& req, httplib::Response& res, const PendingPtr& p,
                  const detail::Route& r);
  void handle_api(const httplib::Request& req, httplib::Response& res, const PendingPtr& p,
                  const detail::Route& r);
  /// Counts a resolve request in the "resolvers" window and sets the RateLimit headers;
  /// false after writing the 429 past the quota.
  bool count_resolver(httplib::Response& res, const PendingPtr& p);
  /// A renamed repo or legacy id: writes the 307 to the same path under the new id.
  bool redirect_alias(const httplib::Request& req, httplib::Response& res, const PendingPtr& p,
                      const detail::Route& r);
  /// A 307 to `location` (relative).
  void redirect(httplib::Response& res, const PendingPtr& p, const std::string& location);
  /// The file rev_segments[file_from...] names in the repo, if it is a servable file.
  std::optional<std::filesystem::path> entry_path(const detail::Route& r, std::size_t file_from);
  /// The X-Repo-Commit value to send: the real commit, or what set_hostile_commit() asked for.
  std::string commit_header(const std::string& commit, const PendingPtr& p);
  /// The absolute, signed CDN URL of a blob.
  std::string make_cdn_url(const std::string& sha256);

  // ------------------------------------------------------------ access (access.cc)
  /// Who may see the repo (tokens, unknown, private, disabled, gated). Returns false after
  /// writing the error the Hub would send.
  bool check_repo(const httplib::Request& req, httplib::Response& res, const PendingPtr& p,
                  const detail::Route& r);
  /// With enforce_hosts: 421 when a route is asked on the other host name.
  bool host_ok(const httplib::Request& req, httplib::Response& res, const PendingPtr& p,
               bool cdn_route);

  // ------------------------------------------------------------ admin (admin.cc)
  void handle_admin(const httplib::Request& req, httplib::Response& res, const PendingPtr& p,
                    const detail::Route& r, HubServer& self);
  static void apply_admin_set(const httplib::Request& req, HubServer& self);
};

}  // namespace tensorfetch::testing
