// SPDX-License-Identifier: Apache-2.0
// Checkpoint::repo_files, fetch_repo_file, repo_file_cached, read_repo_file_cached: every file
// of a Hub repo's pinned commit, for a complete model directory (`tensorfetch mount`), and the
// bytes of those that are not the checkpoint's safetensors files, through the same cache.
//
// The listing is the Hub's model info with file metadata, as huggingface_hub's
// `model_info(files_metadata=True)` asks for it: one `GET /api/models/REPO/revision/COMMIT
// ?blobs=true` whose `siblings` name every file with `size`, `blobId` (the git blob id) and,
// for LFS/Xet files, `lfs: {sha256, size}`.
//
// A listed file's first fetch is one request through `/resolve/` at the pinned commit (its
// first range, or the whole file): its answer must name that commit, the listed size and the
// listed sha256, and gives the server and ETag later ranges are asked of (the fetcher's plan,
// chunks and commits, as for tensors). Whole files are verified: a sha256 by the blob
// (`Blob::finish`), a git blob id here before anything is recorded.
#include <algorithm>
#include <cstring>

#include <nlohmann/json.hpp>

#include "base/fs.h"
#include "base/hash.h"
#include "base/range_set.h"
#include "base/text.h"
#include "checkpoint/checkpoint_internal.h"
#include "fetch/fetcher.h"
#include "hub/file_facts.h"
#include "hub/hub_errors.h"
#include "hub/location.h"
#include "net/url.h"

namespace tensorfetch {

namespace {

using nlohmann::json;

bool is_hex(std::string_view s, std::size_t n) {
  return s.size() == n && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

std::string header_of(const detail::Headers& h, const char* name) {
  auto it = h.find(name);
  return it == h.end() ? std::string() : it->second;
}

std::string range_text(ByteRange r) {
  return "bytes " + std::to_string(r.offset) + "-" + std::to_string(r.end() - (r.length ? 1 : 0));
}

// `[datasets/]ORG/NAME` under its canonical name (a rename redirect's), and its API URL.
std::string repo_in_urls(const Checkpoint::Impl& impl) {
  return impl.canonical_repo.empty() ? impl.hub_repo_path : impl.canonical_repo;
}

std::string listing_url(const Checkpoint::Impl& impl, const std::string& rev) {
  std::string repo = repo_in_urls(impl);
  const bool dataset = repo.starts_with("datasets/");
  if (dataset) repo.erase(0, 9);
  return impl.endpoint + "/api/" + (dataset ? "datasets/" : "models/") + repo + "/revision/" +
         detail::percent_encode(rev) + "?blobs=true";
}

detail::HttpRequest request_for(const Checkpoint::Impl& impl, std::string url) {
  detail::HttpRequest r;
  r.url = std::move(url);
  r.bearer_token = impl.token;
  r.token_authority = impl.token_authority;
  r.restart_after_redirect_fault = true;
  return r;
}

Error hub_reply_error(const Checkpoint::Impl& impl, const detail::HttpResponse& r, const std::string& what) {
  detail::HubReply reply{r.status, r.url, header_of(r.headers, "x-error-code"), header_of(r.headers, "x-error-message"),
                         header_of(r.headers, "ratelimit"), header_of(r.headers, "ratelimit-policy"), r.attempts};
  detail::HubAsk ask;
  std::string repo = repo_in_urls(impl);
  if (repo.starts_with("datasets/")) repo = "dataset " + repo.substr(9);
  ask.repo = repo;
  ask.revision = impl.revision;
  ask.what = what;
  ask.endpoint = impl.endpoint;
  ask.repo_path = repo_in_urls(impl);
  ask.token_source = impl.token.empty() ? std::string() : "the token";
  return detail::hub_error(reply, ask);
}

// The Hub's listing (`siblings`) as RepoFiles, every path checked (they become file names).
Result<std::vector<RepoFile>> parse_listing(const std::string& body, const std::string& url,
                                            const std::optional<std::string>& commit) {
  auto bad = [&](const std::string& why) { return Error{ErrorCode::BadResponse, url + ": " + why}; };
  json doc = json::parse(body, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return fail(bad("the repo's listing is not a JSON object"));
  if (commit && doc.contains("sha") && doc["sha"].is_string() && doc["sha"].get<std::string>() != *commit) {
    return fail(ErrorCode::Integrity, url + ": the listing is of commit " + doc["sha"].get<std::string>() +
                                          ", not of the pinned " + *commit);
  }
  if (!doc.contains("siblings") || !doc["siblings"].is_array()) return fail(bad("the listing has no \"siblings\" array"));
  std::vector<RepoFile> out;
  for (const auto& s : doc["siblings"]) {
    if (!s.is_object() || !s.contains("rfilename") || !s["rfilename"].is_string()) {
      return fail(bad("a sibling without an \"rfilename\" string"));
    }
    RepoFile f;
    f.path = s["rfilename"].get<std::string>();
    if (auto ok = detail::check_relative_path(f.path, "listed file"); !ok) return fail(bad(ok.error().message));
    if (!s.contains("size") || !s["size"].is_number_unsigned()) {
      return fail(bad(detail::quote_name(f.path) + " is listed without a size (was ?blobs=true ignored?)"));
    }
    f.size = s["size"].get<std::uint64_t>();
    if (s.contains("blobId") && s["blobId"].is_string()) {
      const std::string oid = s["blobId"].get<std::string>();
      if (!is_hex(oid, 40)) return fail(bad(detail::quote_name(f.path) + ": blobId " + detail::quote_name(oid) + " is not a git blob id"));
      f.git_oid = oid;
    }
    if (s.contains("lfs") && s["lfs"].is_object()) {
      const auto& lfs = s["lfs"];
      if (!lfs.contains("sha256") || !lfs["sha256"].is_string() || !is_hex(lfs["sha256"].get<std::string>(), 64)) {
        return fail(bad(detail::quote_name(f.path) + ": lfs.sha256 is not 64 lower-case hex digits"));
      }
      if (lfs.contains("size") && (!lfs["size"].is_number_unsigned() || lfs["size"].get<std::uint64_t>() != f.size)) {
        return fail(bad(detail::quote_name(f.path) + ": lfs.size disagrees with size " + std::to_string(f.size)));
      }
      f.sha256 = lfs["sha256"].get<std::string>();
      f.git_oid.reset();  // the pointer file's id, not the content's
    }
    out.push_back(std::move(f));
  }
  std::sort(out.begin(), out.end(), [](const RepoFile& a, const RepoFile& b) { return a.path < b.path; });
  for (std::size_t i = 1; i < out.size(); ++i) {
    if (out[i].path == out[i - 1].path) return fail(bad(detail::quote_name(out[i].path) + " is listed twice"));
  }
  return out;
}

// The local listing: the safetensors files and the text files, in path order.
Result<std::vector<RepoFile>> own_files(const Checkpoint& cp) {
  std::vector<RepoFile> out;
  const auto& files = cp.files();
  for (std::size_t i = 0; i < files.size(); ++i) {
    RepoFile f;
    f.path = cp.repo_path(i);
    f.size = files[i].size;
    f.sha256 = files[i].sha256;
    f.checkpoint_file = i;
    out.push_back(std::move(f));
  }
  auto texts = cp.text_files();
  if (!texts) return fail(texts.error());
  for (const auto& t : *texts) {
    if (std::any_of(out.begin(), out.end(), [&](const RepoFile& f) { return f.path == t.path; })) continue;
    RepoFile f;
    f.path = t.path;
    f.size = t.text.size();
    out.push_back(std::move(f));
  }
  std::sort(out.begin(), out.end(), [](const RepoFile& a, const RepoFile& b) { return a.path < b.path; });
  return out;
}

detail::HttpClient& listing_client(Checkpoint::Impl& impl) {
  if (!impl.repo.client) {
    detail::HttpOptions http = impl.http;
    http.max_parallel = 8;
    impl.repo.client = std::make_unique<detail::HttpClient>(http);
  }
  return *impl.repo.client;
}

// Under repo.fetch_mutex: the client for requests to the Hub (the listing, first resolves): the
// open's, whose idle connection to the endpoint saves a TCP and TLS handshake (for a Hub repo
// nothing else uses it after the open: url_config_json is for plain URLs only), else our own.
detail::HttpClient& hub_client(Checkpoint::Impl& impl) {
  if (impl.hub && impl.open_client && impl.open_client->reconfigure(impl.http)) return *impl.open_client;
  return listing_client(impl);
}

// Under repo.fetch_mutex: `req` on hub_client; when that fails without an answer (an idle
// connection the server closed meanwhile, which a proxy may not show until it is used), once more
// on our own client's fresh connections.
Result<detail::HttpResponse> perform_hub(Checkpoint::Impl& impl, const detail::HttpRequest& req) {
  detail::HttpClient& first = hub_client(impl);
  auto res = first.perform(std::span(&req, 1));
  if (!res[0] && &first != &listing_client(impl)) res = listing_client(impl).perform(std::span(&req, 1));
  return std::move(res[0]);
}

// Under repo.fetch_mutex: the listing, asked once.
Result<void> ensure_listed(Checkpoint::Impl& impl, const Checkpoint& cp) {
  {
    std::lock_guard lock(impl.repo.mutex);
    if (impl.repo.listed) return {};
  }
  std::vector<RepoFile> files;
  if (!impl.remote || !impl.hub || impl.offline || impl.endpoint.empty() || impl.hub_repo_path.empty()) {
    auto own = own_files(cp);
    if (!own) return fail(own.error());
    files = std::move(*own);
  } else {
    const std::string rev = impl.commit ? *impl.commit : impl.revision;
    auto req = request_for(impl, listing_url(impl, rev));
    req.max_body = 64 << 20;  // 100,000 files of ~300 bytes each, with room
    auto res = perform_hub(impl, req);
    if (!res) return fail(res.error().with_context(impl.location + ": listing the repo's files"));
    if (res->status != 200) return fail(hub_reply_error(impl, *res, "the repo's file listing"));
    auto listed = parse_listing(res->body, res->url, impl.commit);
    if (!listed) return fail(listed.error());
    files = std::move(*listed);
    // The checkpoint's files must be listed, with the sizes the open read.
    for (std::size_t i = 0; i < impl.files.size(); ++i) {
      const std::string path = cp.repo_path(i);
      auto it = std::lower_bound(files.begin(), files.end(), path,
                                 [](const RepoFile& f, const std::string& p) { return f.path < p; });
      if (it == files.end() || it->path != path) {
        return fail(ErrorCode::BadResponse, res->url + ": the listing lacks " + detail::quote_name(path) +
                                                ", which the open read");
      }
      if (it->size != impl.files[i].info.size) {
        return fail(ErrorCode::BadResponse, res->url + ": the listing gives " + detail::quote_name(path) + " " +
                                                std::to_string(it->size) + " bytes, the open read " +
                                                std::to_string(impl.files[i].info.size));
      }
      it->checkpoint_file = i;
    }
  }
  std::lock_guard lock(impl.repo.mutex);
  for (const auto& f : files) {
    if (f.checkpoint_file) continue;
    ListedFile l;
    l.info = f;
    if (impl.remote && impl.hub && !impl.hub_repo_path.empty()) {
      detail::HubRef ref{false, repo_in_urls(impl), impl.commit ? *impl.commit : impl.revision, std::nullopt};
      l.resolve_url = detail::resolve_url(impl.endpoint, ref, ref.revision, f.path);
    }
    if (f.sha256) l.linked_etag = "\"" + *f.sha256 + "\"";
    impl.repo.others.emplace(f.path, std::move(l));
  }
  impl.repo.files = std::move(files);
  impl.repo.listed = true;
  return {};
}

// Under repo.mutex: the listed file `path` that is not a checkpoint file.
Result<ListedFile*> listed_other(Checkpoint::Impl& impl, const std::string& path) {
  auto it = impl.repo.others.find(path);
  if (it == impl.repo.others.end()) {
    return fail(ErrorCode::NotFound, impl.location + ": " + detail::quote_name(path) +
                                         " is not a listed file other than the checkpoint's safetensors files");
  }
  return &it->second;
}

// The blob of `l` (opened, created when `create`), or null when there is none (not created).
Result<detail::Blob*> blob_of(Checkpoint::Impl& impl, ListedFile& l, bool create) {
  if (l.blob) return l.blob.get();
  if (l.resolve_url.empty()) {
    return fail(ErrorCode::InvalidArgument, impl.location + ": " + l.info.path + " has no remote origin to cache");
  }
  auto cache = detail::CacheDir::open(impl.cache_root, impl.cache_sharing, create);
  if (!cache) {
    if (!create && cache.error().code == ErrorCode::NotFound) return static_cast<detail::Blob*>(nullptr);
    return fail(cache.error().with_context(l.info.path));
  }
  std::optional<std::string> etag;
  if (l.info.git_oid) etag = "\"" + *l.info.git_oid + "\"";
  const auto identity = detail::blob_identity(l.resolve_url, l.linked_etag, etag, l.info.size);
  auto blob = detail::Blob::open(*cache, identity, l.info.size, l.resolve_url, l.linked_etag ? l.linked_etag : etag,
                                 create ? detail::BlobCreate::IfMissing : detail::BlobCreate::No);
  if (!blob) {
    if (!create && blob.error().code == ErrorCode::NotFound) return static_cast<detail::Blob*>(nullptr);
    return fail(blob.error().with_context(l.info.path));
  }
  l.blob = std::move(*blob);
  return l.blob.get();
}

Result<void> check_ranges(const Checkpoint::Impl& impl, const ListedFile& l, std::span<const ByteRange> ranges) {
  for (const auto& r : ranges) {
    if (r.offset > l.info.size || r.length > l.info.size - r.offset) {
      return fail(ErrorCode::InvalidArgument, impl.location + ": " + l.info.path + ": " + range_text(r) +
                                                  " lies outside the file of " + std::to_string(l.info.size) +
                                                  " bytes");
    }
  }
  return {};
}

// The first request of a listed file: `range` through /resolve/ at the pinned commit. Checks
// what the answer says (commit, size, sha256), records where later ranges go, and writes and
// commits the bytes (a whole git file verified against its blob id first).
Result<std::uint64_t> resolve_first(Checkpoint::Impl& impl, ListedFile& l, detail::Blob& blob, ByteRange range,
                                    FetchStats& stats) {
  auto req = request_for(impl, l.resolve_url);
  req.range = range;
  req.max_body = range.length;
  auto res = perform_hub(impl, req);
  const std::string what = impl.location + ": " + l.info.path;
  if (!res) return fail(res.error().with_context(what));
  const detail::HttpResponse& r = *res;
  stats.requests += static_cast<std::uint64_t>(r.attempts) + r.redirects.size();
  stats.retries += static_cast<std::uint64_t>(r.attempts > 0 ? r.attempts - 1 : 0);
  const bool whole = range.offset == 0 && range.length == l.info.size;
  if (r.status == 206) {
    if (!r.content_range || r.content_range->first != range.offset || r.content_range->last + 1 != range.end()) {
      return fail(ErrorCode::BadResponse, what + ": the server answered another range than " + range_text(range) +
                                              " (" + r.url + ")");
    }
    if (r.content_range->total != l.info.size) {
      return fail(ErrorCode::Integrity, what + ": the server says the file has " +
                                            std::to_string(r.content_range->total) + " bytes, the listing " +
                                            std::to_string(l.info.size) + " (" + r.url + ")");
    }
  } else if (!(r.status == 200 && whole)) {
    return fail(hub_reply_error(impl, r, l.info.path));
  }
  if (r.body.size() != range.length) {
    return fail(ErrorCode::BadResponse, what + ": " + std::to_string(r.body.size()) + " bytes received for " +
                                            range_text(range) + " (" + r.url + ")");
  }
  auto facts = detail::hub_file_facts(r, what);
  if (!facts) return fail(facts.error());
  if (!facts->commit.empty() && impl.commit && facts->commit != *impl.commit) {
    return fail(ErrorCode::Integrity, what + ": the server answered at commit " + facts->commit + ", not the pinned " +
                                          *impl.commit + " (" + r.url + ")");
  }
  if (l.info.sha256) {
    const auto named = detail::sha256_of_linked_etag(facts->linked_etag.empty() ? std::nullopt
                                                                                 : std::optional(facts->linked_etag));
    if (named && *named != *l.info.sha256) {
      return fail(ErrorCode::Integrity, what + ": the server names sha256 " + *named + ", the listing " +
                                            *l.info.sha256 + " (" + r.url + ")");
    }
  }
  if (whole && l.info.git_oid && !l.info.sha256) {
    const std::string got = detail::git_blob_id_hex(r.body);
    if (got != *l.info.git_oid) {
      return fail(ErrorCode::Integrity, what + ": the bytes received have git blob id " + got + ", the listing names " +
                                            *l.info.git_oid + " (" + r.url + "); nothing of them is kept");
    }
  }
  const std::string etag = header_of(r.headers, "etag");
  l.range_etag = etag.empty() ? std::nullopt : std::optional(etag);
  l.url = r.url;
  if (auto w = blob.write_at(range.offset, std::as_bytes(std::span(r.body))); !w) return fail(w.error().with_context(what));
  if (auto c = blob.commit(std::span(&range, 1)); !c) return fail(c.error().with_context(what));
  stats.bytes_transferred += r.body.size();
  return r.body.size();
}

}  // namespace

Result<std::vector<RepoFile>> Checkpoint::repo_files() const {
  Impl& impl = *impl_;
  std::lock_guard fetching(impl.repo.fetch_mutex);
  if (auto r = ensure_listed(impl, *this); !r) return fail(r.error());
  std::lock_guard lock(impl.repo.mutex);
  return impl.repo.files;
}

Result<std::vector<ByteRange>> Checkpoint::repo_file_cached(const std::string& path) const {
  Impl& impl = *impl_;
  {
    std::lock_guard fetching(impl.repo.fetch_mutex);
    if (auto r = ensure_listed(impl, *this); !r) return fail(r.error());
  }
  std::lock_guard lock(impl.repo.mutex);
  auto l = listed_other(impl, path);
  if (!l) return fail(l.error());
  auto blob = blob_of(impl, **l, false);
  if (!blob) return fail(blob.error());
  if (!*blob) return std::vector<ByteRange>{};
  auto extents = (*blob)->refresh();
  if (!extents) return fail(extents.error().with_context(path));
  return std::vector<ByteRange>(extents->begin(), extents->end());
}

Result<void> Checkpoint::read_repo_file_cached(const std::string& path, std::uint64_t offset,
                                               std::span<std::byte> out) const {
  Impl& impl = *impl_;
  {
    std::lock_guard fetching(impl.repo.fetch_mutex);
    if (auto r = ensure_listed(impl, *this); !r) return fail(r.error());
  }
  std::lock_guard lock(impl.repo.mutex);
  auto l = listed_other(impl, path);
  if (!l) return fail(l.error());
  const ByteRange range{offset, out.size()};
  if (auto ok = check_ranges(impl, **l, std::span(&range, 1)); !ok) return ok;
  if (range.length == 0) return {};
  auto blob = blob_of(impl, **l, false);
  if (!blob) return fail(blob.error());
  auto held = *blob ? (*blob)->holds(range) : Result<bool>(false);
  if (!held) return fail(held.error().with_context(path));
  if (!*held) {
    return fail(ErrorCode::NotFetched, path + ": " + range_text(range) + " is not in the cache; fetch it first");
  }
  auto bytes = (*blob)->map();
  if (!bytes) return fail(bytes.error().with_context(path));
  std::memcpy(out.data(), bytes->data() + offset, out.size());
  return {};
}

Result<FetchStats> Checkpoint::fetch_repo_file(const std::string& path, std::span<const ByteRange> ranges,
                                               const FetchOptions& options) {
  Impl& impl = *impl_;
  FetchStats stats;
  std::lock_guard fetching(impl.repo.fetch_mutex);
  if (auto r = ensure_listed(impl, *this); !r) return fail(r.error());
  ListedFile* l = nullptr;
  detail::Blob* blob = nullptr;
  {
    std::lock_guard lock(impl.repo.mutex);
    auto found = listed_other(impl, path);
    if (!found) return fail(found.error());
    l = *found;
    if (auto ok = check_ranges(impl, *l, ranges); !ok) return fail(ok.error());
    auto b = blob_of(impl, *l, !impl.offline);
    if (!b) return fail(b.error());
    blob = *b;
  }
  // (`l` stays valid: `others` never changes after the listing; its fetch state is this
  // function's, under fetch_mutex, and `blob` is never replaced once set.)
  std::vector<ByteRange> wanted;
  for (const auto& r : ranges) {
    if (r.length > 0) wanted.push_back(r);
  }
  if (wanted.empty()) return stats;
  // What the cache lacks.
  detail::RangeSet held;
  if (blob) {
    auto extents = blob->refresh();
    if (!extents) return fail(extents.error().with_context(path));
    held = *extents;
  }
  const detail::RangeSet want = detail::normalize(wanted);
  std::vector<ByteRange> missing = detail::subtract(want, held);
  stats.bytes_cached = detail::total_bytes(want) - detail::total_bytes(missing);
  if (missing.empty()) {
    if (blob && !blob->complete() && detail::covers(held, ByteRange{0, l->info.size})) {
      if (auto f = blob->finish(impl.location + ": " + path); !f) return fail(f.error());
    }
    return stats;
  }
  if (impl.offline || !blob) {
    return fail(ErrorCode::NotFetched, impl.location + ": offline (HF_HUB_OFFLINE / --offline), and " + path + " " +
                                           range_text(missing.front()) + " is not in the cache");
  }
  if (l->url.empty()) {
    // The first request resolves the file: the first range missing (at most 16 MiB; a whole
    // small file in one go), the rest afterwards from the server it names.
    ByteRange first = missing.front();
    first.length = std::min<std::uint64_t>(first.length, 16 << 20);
    auto got = resolve_first(impl, *l, *blob, first, stats);
    if (!got) return fail(got.error());
    missing.front() = ByteRange{first.end(), missing.front().end() - first.end()};
    if (missing.front().length == 0) missing.erase(missing.begin());
  }
  if (!missing.empty()) {
    detail::FetchFile f;
    f.what = path;
    f.url = l->url;
    f.resolve_url = l->url == l->resolve_url ? std::string() : l->resolve_url;
    f.if_match = l->range_etag;
    f.linked_etag = l->linked_etag;
    f.size = l->info.size;
    f.blob = blob;
    f.wanted = missing;
    detail::FetchSettings settings;
    settings.http = impl.http;
    const std::size_t fixed = options.connections ? options.connections : impl.connections;
    settings.http.max_parallel = fixed ? fixed : 8;
    settings.http.max_rate = impl.max_rate;
    settings.http.cancel = options.cancel;
    settings.token = impl.token;
    settings.token_authority = impl.token_authority;
    settings.max_gap = options.coalesce_gap;
    settings.overfetch_percent = options.coalesce_overfetch_percent;
    settings.max_chunk = options.chunk_size;
    settings.progress = options.progress;
    auto& client = listing_client(impl);
    settings.client = [&client] { return &client; };
    auto report = detail::fetch_ranges(std::span(&f, 1), settings);
    l->url = f.url;  // (an expired URL resolved again)
    if (!report) return fail(report.error().with_context(impl.location));
    stats.bytes_transferred += report->bytes_transferred;
    stats.requests += report->requests;
    stats.retries += report->retries;
    stats.chunks += report->chunks;
    stats.connections = report->connections;
    stats.peak_connections = report->peak_connections;
  }
  auto whole = blob->holds(ByteRange{0, l->info.size});
  if (!whole) return fail(whole.error().with_context(path));
  if (*whole && !blob->complete()) {
    if (auto f = blob->finish(impl.location + ": " + path); !f) return fail(f.error());
  }
  return stats;
}

}  // namespace tensorfetch
