// SPDX-License-Identifier: Apache-2.0
// The Hub's routes of the test server: resolve (302 to the CDN, 200 direct, or 307 to the
// resolve cache), resolve-cache, the API, renamed-repo redirects, the "resolvers" rate limit,
// and the dispatch of every logged request. The CDN is in cdn.cc, access checks in access.cc.
#include <nlohmann/json.hpp>

#include "server_internal.h"

namespace tensorfetch::testing {

namespace fs = std::filesystem;
using json = nlohmann::json;
using detail::Route;
using detail::Switches;

namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// "datasets/org/name" → "org/name".
std::string bare_id(const std::string& repo) {
  return repo.rfind("datasets/", 0) == 0 ? repo.substr(9) : repo;
}

std::string content_type_of(const std::string& file) {
  return ends_with(file, ".json") ? "application/json" : "text/plain; charset=utf-8";
}

}  // namespace

std::string HubServer::Impl::make_cdn_url(const std::string& sha256) {
  auto [ttl, base] =
      switches.with([](Switches& sw) { return std::pair(sw.cdn_url_ttl_ms, sw.cdn_base); });
  if (base.empty()) base = scheme() + "://" + opt.cdn_host + ":" + std::to_string(port);
  return base + repos.signed_cdn_path(sha256, ttl);
}

std::string HubServer::Impl::commit_header(const std::string& commit, const PendingPtr& p) {
  std::string hostile = switches.with([](Switches& sw) { return sw.hostile_commit; });
  if (hostile.empty()) return commit;
  p->rec.fault = "hostile_commit";
  return hostile;
}

void HubServer::Impl::redirect(httplib::Response& res, const PendingPtr& p,
                               const std::string& location) {
  res.status = 307;
  res.set_header("Location", location);
  set_body(res, p, "Temporary Redirect. Redirecting to " + location, "text/plain; charset=utf-8");
}

bool HubServer::Impl::redirect_alias(const httplib::Request& req, httplib::Response& res,
                                     const PendingPtr& p, const Route& r) {
  std::string to = switches.with([&](Switches& sw) {
    auto it = sw.aliases.find(r.repo);
    return it == sw.aliases.end() ? std::string() : it->second;
  });
  if (to.empty()) return false;
  std::string head = r.kind == "api"
                         ? std::string("/api/") + (r.dataset ? "datasets/" : "models/") +
                               detail::pct_encode(bare_id(to), true)
                         : "/" + detail::pct_encode(to, true);
  redirect(res, p, head + req.target.substr(r.repo_end));
  return true;
}

std::optional<fs::path> HubServer::Impl::entry_path(const Route& r, std::size_t file_from) {
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
  if (!safe || !fs::is_regular_file(path, ec)) return std::nullopt;
  return path;
}

void HubServer::Impl::handle_resolve(const httplib::Request& req, httplib::Response& res,
                                     const PendingPtr& p, Route r) {
  if (!host_ok(req, res, p, false) || redirect_alias(req, res, p, r) ||
      !check_repo(req, res, p, r)) {
    return;
  }
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
  auto path = entry_path(r, file_from);
  if (!path) {
    error(res, p, 404, "EntryNotFound", r.file + " does not exist on \"" + r.revision + "\"");
    return;
  }
  std::error_code ec;
  auto size = static_cast<std::uint64_t>(fs::file_size(*path, ec));
  std::string repo_file = r.repo + "/" + r.file;
  struct Shape {
    bool lfs_without_etag, resolve_cache;
  };
  auto shape = switches.with([](Switches& sw) {
    return Shape{sw.lfs_without_etag, sw.resolve_cache};
  });
  if (repos.is_lfs(r.file, size)) {
    std::string sha = repos.register_blob(*path, r.repo, r.file);
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
    if (!shape.lfs_without_etag) res.set_header("ETag", "\"" + git_blob_sha1(pointer) + "\"");
    res.set_header("Accept-Ranges", "bytes");
    set_body(res, p, "Found. Redirecting to " + url, "text/plain; charset=utf-8");
    return;
  }
  std::string etag = "\"" + repos.git_blob(*path) + "\"";
  if (shape.resolve_cache) {
    // As huggingface.co: /api/resolve-cache/models/ORG/NAME/COMMIT/PATH?%2F...resolve...=&etag=..
    std::string path_part = req.target.substr(0, req.target.find('?'));
    redirect(res, p,
             std::string("/api/resolve-cache/") + (r.dataset ? "datasets/" : "models/") +
                 detail::pct_encode(bare_id(r.repo), true) + "/" + commit + "/" +
                 detail::pct_encode(r.file, true) + "?" + detail::pct_encode(path_part, false) +
                 "=&etag=" + detail::pct_encode(etag, false));
    return;
  }
  serve_file(req, res, p, *path, etag, false, content_type_of(r.file), repo_file);
}

void HubServer::Impl::handle_resolve_cache(const httplib::Request& req, httplib::Response& res,
                                           const PendingPtr& p, const Route& r) {
  if (!host_ok(req, res, p, false) || !check_repo(req, res, p, r)) return;
  std::string commit = repos.resolve_rev(r.repo, r.revision);
  if (commit.empty()) {
    error(res, p, 404, "RevisionNotFound", "Invalid rev id: " + r.revision);
    return;
  }
  res.set_header("X-Repo-Commit", commit_header(commit, p));
  auto path = entry_path(r, 1);
  if (!path) {
    error(res, p, 404, "EntryNotFound", r.file + " does not exist on \"" + r.revision + "\"");
    return;
  }
  serve_file(req, res, p, *path, "\"" + repos.git_blob(*path) + "\"", false,
             content_type_of(r.file), r.repo + "/" + r.file);
}

void HubServer::Impl::handle_api(const httplib::Request& req, httplib::Response& res,
                                 const PendingPtr& p, const Route& r) {
  if (!host_ok(req, res, p, false) || redirect_alias(req, res, p, r) ||
      !check_repo(req, res, p, r)) {
    return;
  }
  repos.count_request(r.repo);
  std::string commit = repos.resolve_rev(r.repo, r.revision);
  if (commit.empty()) {
    error(res, p, 404, "RevisionNotFound", "Invalid rev id: " + r.revision);
    return;
  }
  auto [gated, priv] = switches.with([&](Switches& sw) {
    return std::pair(sw.gated.count(r.repo) > 0, sw.priv.count(r.repo) > 0);
  });
  std::string id = bare_id(r.repo);
  json siblings = json::array();
  // As huggingface.co with `?blobs=true` (huggingface_hub's files_metadata=True): each file's
  // size and git blob id, and for LFS files `lfs: {sha256, size, pointerSize}` (their blobId is
  // the pointer file's).
  const std::string blobs = req.get_param_value("blobs");
  const bool with_blobs = blobs == "true" || blobs == "1";
  for (const auto& f : repos.list_files(r.repo_rel)) {
    json entry = {{"rfilename", f}};
    if (with_blobs) {
      const fs::path path = repos.dir(r.repo_rel) / f;
      std::error_code ec;
      const auto size = static_cast<std::uint64_t>(fs::file_size(path, ec));
      entry["size"] = size;
      if (repos.is_lfs(f, size)) {
        const std::string sha = repos.register_blob(path, r.repo, f);
        const std::string pointer = "version https://git-lfs.github.com/spec/v1\noid sha256:" + sha +
                                    "\nsize " + std::to_string(size) + "\n";
        entry["blobId"] = git_blob_sha1(pointer);
        entry["lfs"] = {{"sha256", sha}, {"size", size}, {"pointerSize", pointer.size()}};
      } else {
        entry["blobId"] = repos.git_blob(path);
      }
    }
    siblings.push_back(std::move(entry));
  }
  json body = {{"_id", id},         {"id", id},
               {"modelId", id},     {"sha", commit},
               {"private", priv},   {"gated", gated ? json("manual") : json(false)},
               {"disabled", false}, {"siblings", siblings}};
  res.status = 200;
  res.set_header("X-Repo-Commit", commit_header(commit, p));
  set_body(res, p, body.dump(), "application/json; charset=utf-8");
}

bool HubServer::Impl::count_resolver(httplib::Response& res, const PendingPtr& p) {
  auto verdict = switches.with([](Switches& sw) { return sw.ratelimit.count_one(); });
  if (!verdict) return true;
  res.set_header("RateLimit", verdict->ratelimit);
  res.set_header("RateLimit-Policy", verdict->policy);
  if (!verdict->limited) return true;
  p->rec.fault = "ratelimit";
  error(res, p, 429, "",
        "You have exceeded our rate limit for \"resolvers\"; retry after the time in the "
        "RateLimit header.");
  return false;
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
      res.set_header("RateLimit", "\"resolvers\";r=0;t=" + std::to_string(fail->retry_after_s));
      res.set_header("RateLimit-Policy",
                     switches.with([](Switches& sw) { return sw.ratelimit.policy(); }));
    } else {
      res.set_header("Retry-After", std::to_string(fail->retry_after_s));
    }
    error(res, p, fail->status, "",
          fail->status == 429 ? "Too Many Requests" : "Service Unavailable (injected)");
    return;
  }
  if (r.kind == "resolve") {
    if (count_resolver(res, p)) handle_resolve(req, res, p, r);
  } else if (r.kind == "resolve_cache") {
    handle_resolve_cache(req, res, p, r);
  } else if (r.kind == "cdn") {
    handle_cdn(req, res, p, r);
  } else if (r.kind == "api") {
    handle_api(req, res, p, r);
  } else {
    error(res, p, 404, "", "Not Found");
  }
  switches.with([&](Switches& sw) {
    if (!sw.header.when.take(req.target, p->rec.repo + "/" + p->rec.file)) return;
    res.headers.erase(sw.header.name);
    res.set_header(sw.header.name, sw.header.value);
    p->rec.fault = "header";
  });
}

}  // namespace tensorfetch::testing
