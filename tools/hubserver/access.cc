// SPDX-License-Identifier: Apache-2.0
// Who may see a repo, and the errors the Hub answers when not: unknown, private, disabled and
// gated repos; valid and invalid tokens; host names. Shared by resolve, resolve-cache and api.
#include "server_internal.h"

namespace tensorfetch::testing {

using detail::Route;
using detail::Switches;

namespace {

// Who asks.
enum class Caller {
  Anonymous,  // no Authorization header
  Full,       // "Bearer <Options::token>": may see every repo
  Other,      // "Bearer <one of other_tokens>": a valid account without special access
  Invalid,    // any other credential
};

struct Access {
  Caller caller = Caller::Anonymous;
  bool gated = false, priv = false, disabled = false, unknown_401 = false, hub_errors = false;
};

}  // namespace

bool HubServer::Impl::check_repo(const httplib::Request& req, httplib::Response& res,
                                 const PendingPtr& p, const Route& r) {
  const bool has_auth = req.has_header("Authorization");
  const std::string auth = req.get_header_value("Authorization");
  Access a = switches.with([&](Switches& sw) {
    Access x;
    if (!has_auth)
      x.caller = Caller::Anonymous;
    else if (!sw.token.empty() && auth == "Bearer " + sw.token)
      x.caller = Caller::Full;
    else if (auth.rfind("Bearer ", 0) == 0 && sw.other_tokens.count(auth.substr(7)) > 0)
      x.caller = Caller::Other;
    else
      x.caller = Caller::Invalid;
    x.gated = sw.gated.count(r.repo) > 0;
    x.priv = sw.priv.count(r.repo) > 0;
    x.disabled = sw.disabled.count(r.repo) > 0;
    x.unknown_401 = sw.unknown_repo_401;
    x.hub_errors = sw.hub_errors;
    return x;
  });
  const bool full = a.caller == Caller::Full;
  const bool missing = r.bad_repo_name || !repos.exists(r.repo_rel);
  const std::string kind = r.dataset ? "dataset" : "model";
  const std::string id = r.dataset ? r.repo.substr(9) : r.repo;
  if (a.hub_errors) {
    // As huggingface.co: a bad token is refused everywhere; a private repo looks missing.
    if (a.caller == Caller::Invalid) {
      error(res, p, 401, "", "Invalid credentials in Authorization header");
      return false;
    }
    if (missing || (a.priv && !full)) {
      if (a.caller == Caller::Anonymous)
        error(res, p, 401, "RepoNotFound", "Invalid username or password.");
      else
        error(res, p, 404, "RepoNotFound", "Repository not found");
      return false;
    }
  } else {
    if (missing) {
      if (a.unknown_401 && !has_auth) {
        error(res, p, 401, "RepoNotFound",
              "Repository not found (401: invalid or missing credentials)");
      } else {
        error(res, p, 404, "RepoNotFound", "Repository not found");
      }
      return false;
    }
    if (a.priv && !full) {
      error(res, p, 401, "RepoNotFound",
            has_auth ? "Invalid credentials in Authorization header" : "Repository not found");
      return false;
    }
  }
  if (a.disabled) {
    error(res, p, 403, "", "Access to this resource is disabled.");
    return false;
  }
  // The Hub shows a gated repo's metadata to everyone; only its files are gated.
  if (!a.gated || full || (a.hub_errors && r.kind == "api")) return true;
  if (!a.hub_errors) {
    error(res, p, 403, "GatedRepo",
          "Access to model " + r.repo +
              " is restricted. You must have access to it and be authenticated to access it.");
  } else if (a.caller == Caller::Anonymous) {
    error(res, p, 401, "GatedRepo",
          "Access to " + kind + " " + id +
              " is restricted. You must have access to it and be authenticated to access it. "
              "Please log in.");
  } else {
    error(
        res, p, 403, "GatedRepo",
        "Access to " + kind + " " + id +
            " is restricted and you are not in the authorized list. Visit https://huggingface.co/" +
            (r.dataset ? "datasets/" : "") + id + " to ask for access.");
  }
  return false;
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

}  // namespace tensorfetch::testing
