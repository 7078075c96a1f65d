// SPDX-License-Identifier: Apache-2.0
// The Hub's routes of the test server: resolve, the CDN, the API; access checks; dispatch.
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "server_internal.h"

namespace tensorfetch::testing {

namespace fs = std::filesystem;
using json = nlohmann::json;
using detail::Route;
using detail::Switches;

namespace {

std::string query_param(const httplib::Request& req, const char* key) {
  return req.has_param(key) ? req.get_param_value(key) : std::string();
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::string HubServer::Impl::make_cdn_url(const std::string& sha256) {
  auto [ttl, base] =
      switches.with([](Switches& sw) { return std::pair(sw.cdn_url_ttl_ms, sw.cdn_base); });
  if (base.empty()) base = scheme() + "://" + opt.cdn_host + ":" + std::to_string(port);
  return base + repos.signed_cdn_path(sha256, ttl);
}

bool HubServer::Impl::check_repo(const httplib::Request& req, httplib::Response& res,
                                 const PendingPtr& p, const Route& r) {
  std::string auth = req.get_header_value("Authorization");
  bool has_auth = req.has_header("Authorization");
  struct Access {
    std::string token;
    bool gated, priv, unknown_401;
  };
  Access a = switches.with([&](Switches& sw) {
    return Access{sw.token, sw.gated.count(r.repo) > 0, sw.priv.count(r.repo) > 0,
                  sw.unknown_repo_401};
  });
  bool authorized = !a.token.empty() && auth == "Bearer " + a.token;
  if (r.bad_repo_name || !repos.exists(r.repo_rel)) {
    if (a.unknown_401 && !has_auth) {
      error(res, p, 401, "RepoNotFound",
            "Repository not found (401: invalid or missing credentials)");
    } else {
      error(res, p, 404, "RepoNotFound", "Repository not found");
    }
    return false;
  }
  if (a.priv && !authorized) {
    error(res, p, 401, "RepoNotFound",
          has_auth ? "Invalid credentials in Authorization header" : "Repository not found");
    return false;
  }
  if (a.gated && !authorized) {
    error(res, p, 403, "GatedRepo",
          "Access to model " + r.repo +
              " is restricted. You must have access to it and be authenticated to access it.");
    return false;
  }
  return true;
}

std::string HubServer::Impl::commit_header(const std::string& commit, const PendingPtr& p) {
  std::string hostile = switches.with([](Switches& sw) { return sw.hostile_commit; });
  if (hostile.empty()) return commit;
  p->rec.fault = "hostile_commit";
  return hostile;
}

bool HubServer::Impl::host_ok(const httplib::Request& req, httplib::Response& res,
                              const PendingPtr& p, bool cdn_route) {
  if (!opt.enforce_hosts || opt.hub_host == opt.cdn_host) return true;
  std::string host = detail::strip_port(req.get_header_value("Host"));
  const std::string& want = cdn_route ? opt.cdn_host : opt.hub_host;
  if (host == want) return true;
  p->rec.fault = "misdirected";
  error(res, p, 421, "", "Misdirected request: " + host + " does not serve this route");
  return false;
}

void HubServer::Impl::handle_resolve(const httplib::Request& req, httplib::Response& res,
                                     const PendingPtr& p, Route r) {
  if (!host_ok(req, res, p, false) || !check_repo(req, res, p, r)) return;
  repos.count_request(r.repo);
  // Revision: the first segment (refs%2Fpr%2F1 is one segment), or refs/x/y unencoded.
  std::string commit = repos.resolve_rev(r.repo, r.revision);
  std::size_t file_from = 1;
  if (commit.empty() && r.rev_segments[0] == "refs" && r.rev_segments.size() >= 4) {
    std::string rev3 = detail::join(r.rev_segments, 0, 3);
    commit = repos.resolve_rev(r.repo, rev3);
    if (!commit.empty()) {
      r.revision = rev3;
      file_from = 3;
    }
  }
  r.file = detail::join(r.rev_segments, file_from, r.rev_segments.size());
  p->rec.revision = r.revision;
  p->rec.file = r.file;
  if (commit.empty()) {
    error(res, p, 404, "RevisionNotFound", "Invalid rev id: " + r.revision);
    return;
  }
  res.set_header("X-Repo-Commit", commit_header(commit, p));
  bool safe = file_from < r.rev_segments.size();
  for (std::size_t i = file_from; i < r.rev_segments.size(); ++i) {
    const auto& s = r.rev_segments[i];
    if (s.empty() || s == "." || s == "..") safe = false;
    for (char c : s) {
      if (static_cast<unsigned char>(c) < 0x20) safe = false;
    }
  }
  if (detail::RepoStore::is_control_file(r.file)) safe = false;
  fs::path path = repos.dir(r.repo_rel) / r.file;
  std::error_code ec;
  if (!safe || !fs::is_regular_file(path, ec)) {
    error(res, p, 404, "EntryNotFound", r.file + " does not exist on \"" + r.revision + "\"");
    return;
  }
  auto size = static_cast<std::uint64_t>(fs::file_size(path, ec));
  std::string repo_file = r.repo + "/" + r.file;
  if (repos.is_lfs(r.file, size)) {
    std::string sha = repos.register_blob(path, r.repo, r.file);
    std::string pointer = "version https://git-lfs.github.com/spec/v1\noid sha256:" + sha +
                          "\nsize " + std::to_string(size) + "\n";
    std::string url = make_cdn_url(sha);
    res.status = 302;
    res.set_header("Location", url);
    std::string claimed = switches.with([&](Switches& sw) {
      if (!sw.linked_lie.when.take(req.target, repo_file)) return sha;
      p->rec.fault = "linked_etag";
      return sw.linked_lie.value;
    });
    res.set_header("X-Linked-Etag", "\"" + claimed + "\"");
    res.set_header("X-Linked-Size", std::to_string(size));
    res.set_header("ETag", "\"" + git_blob_sha1(pointer) + "\"");
    res.set_header("Accept-Ranges", "bytes");
    set_body(res, p, "Found. Redirecting to " + url, "text/plain; charset=utf-8");
    return;
  }
  std::string etag = "\"" + repos.git_blob(path) + "\"";
  std::string ctype = ends_with(r.file, ".json") ? "application/json" : "text/plain; charset=utf-8";
  serve_file(req, res, p, path, etag, false, ctype, repo_file);
}

void HubServer::Impl::handle_cdn(const httplib::Request& req, httplib::Response& res,
                                 const PendingPtr& p, const Route& r) {
  if (!host_ok(req, res, p, true)) return;
  auto cdn_error = [&](int status, const std::string& code, const std::string& msg) {
    res.status = status;
    set_body(res, p,
             "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>" + code +
                 "</Code><Message>" + msg + "</Message></Error>",
             "application/xml");
  };
  std::string expires = query_param(req, "expires");
  if (!repos.signature_ok(r.blob, expires, query_param(req, "sig"))) {
    p->rec.fault = "bad_signature";
    cdn_error(403, "AccessDenied", "Invalid signature");
    return;
  }
  if (detail::epoch_ms() > std::strtoll(expires.c_str(), nullptr, 10)) {
    p->rec.fault = "expired";
    cdn_error(403, "AccessDenied", "Request has expired");
    return;
  }
  auto blob = repos.blob(r.blob);
  if (!blob) {
    cdn_error(404, "NoSuchKey", "The specified key does not exist.");
    return;
  }
  p->rec.repo = blob->repo;
  p->rec.file = blob->file;
  const std::string blob_file = blob->repo + "/" + blob->file;
  std::string etag = "\"" + r.blob + "\"";
  bool changed = switches.with([&](Switches& sw) {
    ++sw.cdn_count;
    if (sw.etag_change_after >= 0 && sw.cdn_count > sw.etag_change_after) {
      etag = changed_etag(r.blob);
      p->rec.fault = "etag_changed";
      return true;
    }
    if (sw.cdn_etag.when.take(req.target, blob_file)) {
      etag = "\"" + sw.cdn_etag.value + "\"";
      p->rec.fault = "cdn_etag";
    }
    return false;
  });
  serve_file(req, res, p, blob->path, etag, changed, "binary/octet-stream", blob_file);
}

void HubServer::Impl::handle_api(const httplib::Request& req, httplib::Response& res,
                                 const PendingPtr& p, const Route& r) {
  if (!host_ok(req, res, p, false) || !check_repo(req, res, p, r)) return;
  repos.count_request(r.repo);
  std::string commit = repos.resolve_rev(r.repo, r.revision);
  if (commit.empty()) {
    error(res, p, 404, "RevisionNotFound", "Invalid rev id: " + r.revision);
    return;
  }
  auto [gated, priv] = switches.with([&](Switches& sw) {
    return std::pair(sw.gated.count(r.repo) > 0, sw.priv.count(r.repo) > 0);
  });
  std::string id = r.repo.rfind("datasets/", 0) == 0 ? r.repo.substr(9) : r.repo;
  json siblings = json::array();
  for (const auto& f : repos.list_files(r.repo_rel)) siblings.push_back({{"rfilename", f}});
  json body = {{"_id", id},         {"id", id},
               {"modelId", id},     {"sha", commit},
               {"private", priv},   {"gated", gated ? json("manual") : json(false)},
               {"disabled", false}, {"siblings", siblings}};
  res.status = 200;
  res.set_header("X-Repo-Commit", commit_header(commit, p));
  set_body(res, p, body.dump(), "application/json; charset=utf-8");
}

void HubServer::Impl::handle(const httplib::Request& req, httplib::Response& res, HubServer& self) {
  // Ranges are parsed here; httplib must not apply its own range logic (slicing, multipart
  // Content-Type) to our responses. The Request is not const inside httplib.
  const_cast<httplib::Request&>(req).ranges.clear();
  Route r = detail::classify(req.target);
  if (r.kind == "admin") {
    handle_admin(req, res, log.begin_unlogged(req), r, self);
    return;
  }
  auto p = log.begin(req);
  int latency = switches.with([](Switches& sw) { return sw.latency_ms; });
  if (latency > 0 && sleep_or_stop(std::chrono::milliseconds(latency))) {
    error(res, p, 503, "", "server stopping");
    return;
  }
  std::string file = r.repo.empty() ? std::string() : r.repo + "/" + r.file;
  if (auto fail = switches.with([&](Switches& sw) { return sw.take_fail(req.target, file); })) {
    p->rec.fault = "fail";
    if (fail->ratelimit_header) {
      res.set_header("RateLimit", "\"api\";r=0;t=" + std::to_string(fail->retry_after_s));
      res.set_header("RateLimit-Policy", "\"fixed window\";\"api\";q=500;w=300");
    } else {
      res.set_header("Retry-After", std::to_string(fail->retry_after_s));
    }
    error(res, p, fail->status, "",
          fail->status == 429 ? "Too Many Requests" : "Service Unavailable (injected)");
    return;
  }
  if (r.kind == "resolve")
    handle_resolve(req, res, p, r);
  else if (r.kind == "cdn")
    handle_cdn(req, res, p, r);
  else if (r.kind == "api")
    handle_api(req, res, p, r);
  else
    error(res, p, 404, "", "Not Found");
  switches.with([&](Switches& sw) {
    if (!sw.header.when.take(req.target, p->rec.repo + "/" + p->rec.file)) return;
    res.headers.erase(sw.header.name);
    res.set_header(sw.header.name, sw.header.value);
    p->rec.fault = "header";
  });
}

}  // namespace tensorfetch::testing
