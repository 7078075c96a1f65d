// SPDX-License-Identifier: Apache-2.0
// Opening a remote checkpoint from its headers alone, in the fewest round trips:
//  1. a repo: the single-file candidate (first W bytes), the index and config.json at once;
//     a URL: the file's first W bytes, or the index;
//  2. every shard's first W bytes at once, at the commit the first response named;
//  3. only for headers larger than W: the rest of those headers, at once.
// No HEAD: sizes come from Content-Range. Redirects are followed one hop at a time so that the
// token goes to the endpoint host only, and the CDN URL is kept for later range requests.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "base/text.h"
#include "checkpoint/checkpoint_internal.h"
#include "format/index_internal.h"
#include "hub/environment.h"
#include "hub/file_facts.h"
#include "hub/hf_cache.h"
#include "hub/hub_errors.h"
#include "hub/location.h"
#include "net/http_client.h"
#include "net/url.h"
#include "store/azure.h"
#include "store/s3.h"

namespace tensorfetch {

ServerWait server_wait(const detail::HttpWait& w) {
  // A presigned URL's query (an S3 request's, a CDN's) is a capability, for S3 with the session
  // token in it: callers are told the URL without it.
  return ServerWait{detail::redact_signed_urls(w.url), static_cast<int>(w.status),
                    static_cast<double>(w.wait_ms) / 1000.0, detail::redact_signed_urls(detail::describe_wait(w))};
}

using detail::HttpRequest;
using detail::HttpResponse;
using detail::is_commit_id;
using detail::quote_name;

namespace {

constexpr std::uint64_t kMaxConfigSize = 16 << 20;

std::string header_or(const detail::Headers& h, const char* name, std::string fallback = {}) {
  auto it = h.find(name);
  return it == h.end() ? fallback : it->second;
}

// The HTTP settings of an open (and, with `max_parallel` changed, of its fetches).
detail::HttpOptions http_options(const OpenOptions& options) {
  detail::HttpOptions http;
  http.max_parallel = std::max<std::size_t>(1, options.header_connections);
  // One set of TLS sessions and DNS answers for the open and every fetch.
  http.share = std::make_shared<detail::HttpShare>();
  http.max_retries = options.max_retries;
  http.backoff_base_ms = options.retry_backoff_ms;
  http.stall_timeout_ms = options.stall_timeout_ms;
  http.min_rate = options.min_rate;
  http.connect_timeout_ms = options.connect_timeout_ms;
  const char* bundle = std::getenv("CURL_CA_BUNDLE");
  http.ca_file = !options.ca_file.empty() ? options.ca_file : std::string(bundle ? bundle : "");
  http.size_headers = {"x-linked-size"};  // the Hub names an LFS file's size on its redirect
  return http;
}

// The HTTP client of an open: the open's settings, cancelled by the open's token, telling the
// open's wait callback.
detail::HttpClient open_client(const OpenOptions& options) {
  detail::HttpOptions open_http = http_options(options);
  open_http.cancel = options.cancel;  // this open only: fetches take their own token
  if (options.on_wait) {
    open_http.on_wait = [cb = options.on_wait](const detail::HttpWait& w) { cb(server_wait(w)); };
  }
  return detail::HttpClient(open_http);
}

// One remote open: what it asks (the location), whom and how (endpoint, token, HTTP client),
// and its steps, in order (open_remote runs them):
//  1. resolve the location: endpoint, token, the Hugging Face cache's directory of the repo;
//  2. read what the location names: a repo's candidates at once (round 1), or a URL's index;
//  3. read the index, when there is one: its shards become the files;
//  4. read every file's header (at most two rounds), unless this cache recorded them for the
//     commit, or the Hugging Face cache holds the file;
//  5. pin the commit the first response named (every file and config.json is read at it);
//  6. use the Hugging Face cache's copies of the files it holds.
struct Remote {
  Checkpoint::Impl& impl;
  const OpenOptions& options;
  detail::HttpClient client;
  detail::Location location;
  std::string endpoint;
  std::string token;
  std::string token_authority;
  std::string token_source;  // where the token came from ("" = anonymous), for messages
  // `[datasets/]ORG/NAME` as the Hub names the repo in its resolve URLs: the location's, or the
  // canonical name a rename redirect (`/gpt2/resolve/...` -> `/openai-community/gpt2/...`) gave.
  std::string repo_path;
  std::string hf_repo_dir;                       // HF_HUB_CACHE/models--ORG--NAME ("" = none)
  std::optional<RemoteFileState> pending_state;  // first bytes already read in round 1
  // Per file, the first read of its header when an index sized it (see `first_window`).
  std::vector<std::uint64_t> index_windows;
  // S3: the bucket and key or prefix, and the signer every request's URL goes through.
  detail::S3Location s3_location;
  std::shared_ptr<detail::S3Signer> s3;
  // Azure: the account, container and blob or prefix, and its signer (a SAS for every request).
  detail::AzureLocation azure_location;
  std::shared_ptr<detail::AzureSigner> azure;
  // The region an S3 answer said the bucket is in (a request sent to or signed for another):
  // the open asks again there, once.
  mutable std::string s3_region_hint;

  Remote(Checkpoint::Impl& into, const OpenOptions& open_options, detail::Location where)
      : impl(into), options(open_options), client(open_client(open_options)), location(std::move(where)) {}

  // The object store's signer (S3 or Azure), null for other locations.
  std::shared_ptr<const detail::UrlSigner> signer() const {
    if (s3) return s3;
    return azure;
  }

  HttpRequest request(std::string url, std::optional<ByteRange> range, std::uint64_t max_body) const {
    HttpRequest r;
    r.url = std::move(url);
    if (auto store = signer()) {
      // Checked when the open began (resolve_s3): credentials were found then, and the chain
      // keeps them. Should they be gone now, the unsigned request's 403 says so.
      if (auto signed_url = store->presign(r.url, detail::unix_now(), options.s3_presign_seconds)) r.url = *signed_url;
    }
    r.range = range;
    r.max_body = max_body;
    r.bearer_token = token;
    r.token_authority = token_authority;
    r.restart_after_redirect_fault = true;  // a CDN fault: resolve again, then retry
    return r;
  }

  std::string repo_text() const {
    return (location.hub.dataset ? "dataset " : "") + location.hub.repo_id;
  }

  // Maps a non-success response to an error that names what was asked and what to do (the
  // Hub's rules: lib/hub/hub_errors.h). A CDN that kept failing on a valid request after every
  // retry and fresh redirect is a network fault, not the repo's answer.
  Error response_error(const HttpResponse& r, const std::string& what) const {
    if (s3) {
      const detail::S3Reply reply{r.status, r.body, header_or(r.headers, "x-amz-bucket-region")};
      if (auto region = detail::s3_region_hint(reply); !region.empty() && s3_region_hint.empty()) s3_region_hint = region;
      return detail::s3_error(reply,
                              what.starts_with("s3://") ? what : s3_text(what),
                              s3->credentials_source(detail::unix_now()));
    }
    if (azure) {
      const detail::AzureReply reply{r.status, r.body, header_or(r.headers, "x-ms-error-code")};
      return detail::azure_error(reply, what.starts_with("az://") ? what : azure_text(what),
                                 azure->credentials_source(detail::unix_now()));
    }
    const std::string first_url = r.redirects.empty() ? r.url : r.redirects.front().url;
    if ((r.status == 400 || r.status == 403 || r.status == 416) && !r.redirects.empty() &&
        detail::url_authority(r.url) != detail::url_authority(first_url)) {
      return {ErrorCode::Network, what + ": the download server answered HTTP " + std::to_string(r.status) +
                                      " after " + std::to_string(r.attempts) +
                                      (r.attempts == 1 ? " attempt" : " attempts") +
                                      ", each through a fresh redirect from " + first_url +
                                      " (a CDN fault that persisted; try again later): " + r.url};
    }
    detail::HubReply reply{r.status, r.url, header_or(r.headers, "x-error-code"),
                           header_or(r.headers, "x-error-message"), header_or(r.headers, "ratelimit"),
                           header_or(r.headers, "ratelimit-policy"), r.attempts};
    detail::HubAsk ask;
    if (location.kind == detail::LocationKind::Hub) {
      ask.repo = repo_text();
      ask.revision = location.hub.revision;
      ask.endpoint = endpoint;
      ask.repo_path = repo_path;
    }
    ask.what = what;
    ask.token_source = token.empty() ? std::string() : token_source;
    return detail::hub_error(reply, ask);
  }

  // Records the commit a response named; refuses a second, different one, and anything that is
  // not a commit id (it becomes a path in the Hugging Face cache).
  // The commit a response names (X-Repo-Commit): the first one named is kept, and every later
  // one must be the same (else the revision moved during the read: Integrity).
  Result<void> note_commit(const HttpResponse& r, const std::string& what) {
    auto facts = detail::hub_file_facts(r, what);
    if (!facts) return fail(facts.error());
    return note_commit(*facts, what);
  }

  Result<void> note_commit(const detail::HubFileFacts& facts, const std::string& what) {
    if (facts.commit.empty()) return {};
    if (!impl.commit) {
      impl.commit = facts.commit;
    } else if (*impl.commit != facts.commit) {
      return fail(ErrorCode::Integrity, what + ": the server answered at commit " + facts.commit +
                                            " after " + *impl.commit +
                                            " (the revision moved during the read)");
    }
    return {};
  }

  // Where a file's header bytes were received: fills size, etag, url of `file`; returns the
  // bytes and what later range requests need.
  Result<RemoteFileState> file_prefix(const HttpResponse& r, CheckpointFile& file, const std::string& what,
                                      std::uint64_t asked) {
    std::uint64_t size = 0;
    if (r.status == 206) {
      size = r.content_range->total;
    } else if (r.status == 200) {
      // The server ignored Range: the body is the file's first bytes, the size its length.
      std::uint64_t length = 0;
      std::string cl = header_or(r.headers, "content-length");
      if (!cl.empty()) length = std::strtoull(cl.c_str(), nullptr, 10);
      size = r.truncated ? length : r.body.size();
      if (r.truncated && length == 0) {
        return fail(ErrorCode::BadResponse, what + ": the server ignored Range and sent no Content-Length (" +
                                                r.url + ")");
      }
    } else if (r.status == 416 && known_size(r).value_or(0) == 0) {
      // Believed only when nothing says the file has bytes (X-Linked-Size, `bytes */N`): the
      // HTTP client retried the other 416s as the CDN faults they are.
      return fail(ErrorCode::FileTooSmall, what + ": the file is empty (HTTP 416 for bytes=0-): " + r.url);
    } else if (r.status == 416) {
      return fail(ErrorCode::Network, what + ": HTTP 416 for bytes 0-" + std::to_string(asked - 1) + " of a file of " +
                                          std::to_string(*known_size(r)) + " bytes, after " + std::to_string(r.attempts) +
                                          " attempts (a CDN fault that persisted; try again later): " + r.url);
    } else {
      return fail(response_error(r, what));
    }
    auto facts = detail::hub_file_facts(r, what);
    if (!facts) return fail(facts.error());
    if (facts->size() && *facts->size() != size) {
      return fail(ErrorCode::BadResponse, what + ": X-Linked-Size " + facts->linked_size +
                                              " disagrees with the size " + std::to_string(size) +
                                              " the download reported (" + r.url + ")");
    }
    file.size = size;
    RemoteFileState state;
    state.resolve_url = r.redirects.empty() ? r.url : r.redirects.front().url;
    const std::string& linked = facts->linked_etag;
    std::string etag = header_or(r.headers, "etag");
    if (!linked.empty()) state.linked_etag = linked;
    if (!etag.empty()) state.range_etag = etag;
    if (!linked.empty() || !etag.empty()) file.etag = linked.empty() ? etag : linked;
    file.url = r.url;
    if (signer()) {
      // The object's plain URL (no signature, no session token, no SAS): the blob's identity, what
      // snapshots record and messages name. Every request signs it afresh.
      file.url = detail::without_query(r.url);
      state.resolve_url = file.url;
    }
    if (auto c = note_commit(*facts, what); !c) return fail(c.error());
    state.prefix = r.body;
    state.prefix_received = true;
    return state;
  }

  std::uint64_t window() const { return std::max<std::uint64_t>(options.header_window, 64); }

  // The first read of file `i`'s header: W, or less for a shard whose header the index says is
  // smaller (a shard's first window crosses the open's one multiplexed connection with all the
  // others before any tensor byte moves; what it holds past the header is not needed yet).
  std::uint64_t first_window(std::size_t i) const {
    return i < index_windows.size() ? std::min(window(), index_windows[i]) : window();
  }

  // The file's size as a 416 response says it (`bytes */N`) or a redirect hop named it
  // (X-Linked-Size).
  static std::optional<std::uint64_t> known_size(const HttpResponse& r) {
    if (auto linked = detail::find_header(r, "x-linked-size"); !linked.empty()) {
      return std::strtoull(linked.c_str(), nullptr, 10);
    }
    const std::string cr = header_or(r.headers, "content-range");
    if (cr.starts_with("bytes */")) return std::strtoull(cr.c_str() + 8, nullptr, 10);
    return std::nullopt;
  }

  // Step 4, shard headers, from the Hugging Face cache: a file of this commit the cache holds
  // (snapshots/COMMIT/PATH) gives its header from there, and later its bytes too, with no
  // request; fills the file's size and ETag (its sha256, from the blob's name).
  std::optional<RemoteFileState> from_hf_snapshot(std::size_t i) {
    if (location.kind != detail::LocationKind::Hub || !impl.commit || hf_repo_dir.empty()) return std::nullopt;
    CheckpointFile& file = impl.files[i].info;
    const auto slash = impl.index_name.rfind('/');
    const std::string dir = impl.index && slash != std::string::npos ? impl.index_name.substr(0, slash + 1) : "";
    const std::string rel = detail::hf_snapshot_path(*impl.commit, dir + file.path);
    // The snapshot entry is a link into ../../blobs/: followed only while it stays inside the
    // repo's directory of the Hugging Face cache.
    auto root = detail::open_hf_repo(hf_repo_dir);
    if (!root) return std::nullopt;
    std::string resolved;
    auto fd = detail::open_file_within(root->get(), rel, hf_repo_dir, &resolved);
    if (!fd) return std::nullopt;
    struct stat st {};
    if (::fstat(fd->get(), &st) != 0) return std::nullopt;
    const auto size = static_cast<std::uint64_t>(st.st_size);
    char len8[8];
    if (::pread(fd->get(), len8, 8, 0) != 8) return std::nullopt;
    auto n = parse_header_size(std::as_bytes(std::span(len8)), size);
    if (!n) return std::nullopt;  // not valid: let the server's copy decide
    RemoteFileState state;
    state.prefix.resize(static_cast<std::size_t>(kPrefixSize + *n));
    if (::pread(fd->get(), state.prefix.data(), state.prefix.size(), 0) != static_cast<ssize_t>(state.prefix.size())) {
      return std::nullopt;
    }
    state.resolve_url = file.url;
    state.local_path = hf_repo_dir + "/" + rel;
    if (resolved.starts_with("blobs/")) {
      if (auto sha = detail::sha256_of_linked_etag(resolved.substr(6))) state.linked_etag = "\"" + *sha + "\"";
    }
    file.size = size;
    file.etag = state.linked_etag;
    return state;
  }

  // Step 4, shard headers, first round: the first W bytes of every file no earlier step read,
  // all at once (fills each file's size, ETag and URL).
  Result<void> read_first_windows(std::vector<std::optional<RemoteFileState>>& states) {
    std::vector<HttpRequest> reqs;
    std::vector<std::size_t> which;
    for (std::size_t i = 0; i < states.size(); ++i) {
      if (states[i]) continue;
      const std::uint64_t w = first_window(i);
      reqs.push_back(request(impl.files[i].info.url, ByteRange{0, w}, w));
      which.push_back(i);
    }
    auto results = client.perform(reqs);
    for (std::size_t k = 0; k < which.size(); ++k) {
      const std::size_t i = which[k];
      const std::string what = impl.files[i].info.path;
      if (!results[k]) return fail(results[k].error().with_context(what));
      auto state = file_prefix(*results[k], impl.files[i].info, what, first_window(i));
      if (!state) return fail(state.error());
      states[i] = std::move(*state);
    }
    return {};
  }

  // Step 4, shard headers, second round: the rest of every header larger than W, all at once,
  // each at the ETag its first window had (a file that changed in between is an Integrity
  // error).
  Result<void> read_header_rests(std::vector<std::optional<RemoteFileState>>& states) {
    std::vector<HttpRequest> reqs;
    std::vector<std::size_t> which;
    for (std::size_t i = 0; i < states.size(); ++i) {
      const CheckpointFile& file = impl.files[i].info;
      auto& bytes = states[i]->prefix;
      auto size = parse_header_size(std::as_bytes(std::span(bytes)), file.size);
      if (!size) return fail(size.error().with_context(file.path + " (" + file.url + ")"));
      const std::uint64_t need = kPrefixSize + *size;
      if (need > bytes.size()) {
        HttpRequest r = request(file.url, ByteRange{bytes.size(), need - bytes.size()}, need - bytes.size());
        r.if_match = states[i]->range_etag;
        reqs.push_back(std::move(r));
        which.push_back(i);
      }
    }
    if (reqs.empty()) return {};
    auto results = client.perform(reqs);
    for (std::size_t k = 0; k < which.size(); ++k) {
      const std::size_t i = which[k];
      const CheckpointFile& file = impl.files[i].info;
      const std::string& what = file.path;
      if (!results[k]) return fail(results[k].error().with_context(what));
      const HttpResponse& r = *results[k];
      if (r.status != 206) {
        return fail(r.status == 412 ? Error{ErrorCode::Integrity,
                                            what + ": the file changed between two reads of its header "
                                                   "(ETag no longer matches): " + r.url}
                                    : response_error(r, what));
      }
      if (r.content_range->total != file.size) {
        return fail(ErrorCode::Integrity, what + ": the file's size changed from " + std::to_string(file.size) +
                                              " to " + std::to_string(r.content_range->total) + ": " + r.url);
      }
      states[i]->prefix += r.body;
    }
    return {};
  }

  // Step 4, shard headers: reads and parses the header of every file in impl.files, whose
  // `info.url` holds the URL to ask (a resolve URL or a direct URL), in at most two rounds;
  // `states` may already hold the first bytes of some (read by an earlier step).
  Result<void> load_headers(std::vector<std::optional<RemoteFileState>> states) {
    const std::size_t n = impl.files.size();
    states.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      if (!states[i]) states[i] = from_hf_snapshot(i);
    }
    if (auto r = read_first_windows(states); !r) return r;
    if (auto r = read_header_rests(states); !r) return r;
    HeaderParser parser;
    for (std::size_t i = 0; i < n; ++i) {
      OpenFile& file = impl.files[i];
      auto header = parser.parse_file_prefix(std::as_bytes(std::span(states[i]->prefix)), file.info.size);
      if (!header) return fail(header.error().with_context(file.info.path + " (" + file.info.url + ")"));
      file.header = std::move(*header);
    }
    for (std::size_t i = 0; i < n; ++i) impl.files[i].remote = std::move(*states[i]);
    return {};
  }

  // Adds a file, known so far by its name and the URL to ask for it.
  void add_file(std::string path, std::string url) {
    impl.files.push_back(OpenFile{CheckpointFile{std::move(path), 0, std::nullopt, std::move(url), std::nullopt}, {}, {}, {}});
  }

  // Step 3, the index: parses it and adds the shards it names, each at the URL `shard_url`
  // makes of its name.
  Result<void> use_index(const std::string& text, const std::string& index_path,
                         const std::function<std::string(const std::string&)>& shard_url) {
    auto index = parse_index(std::as_bytes(std::span(text)));
    if (!index) return fail(index.error().with_context(index_path));
    impl.index = std::move(*index);
    impl.index_name = index_path;
    impl.index_text = text;
    impl.files.reserve(impl.index->shards.size());
    for (const auto& shard : impl.index->shards) add_file(shard, shard_url(shard));
    index_windows = detail::estimate_shard_header_sizes(*impl.index);
    return {};
  }

  // Step 2 for a URL: an index is read now (its shards are added); a file is only added (its
  // first window is read with the shard headers).
  Result<void> open_url() {
    const std::string& url = location.url;
    const std::string_view without_query = std::string_view(url).substr(0, url.find_first_of("?#"));
    const std::string name(without_query.substr(without_query.rfind('/') + 1));
    if (detail::is_index_path(name)) {
      std::vector<HttpRequest> reqs{request(url, std::nullopt, kMaxIndexSize)};
      auto results = client.perform(reqs);
      if (!results[0]) return fail(results[0].error().with_context(name));
      const HttpResponse& r = *results[0];
      if (r.status != 200) return fail(response_error(r, name));
      return use_index(r.body, name, [&](const std::string& shard) { return detail::sibling_url(url, shard); });
    }
    add_file(name.empty() ? url : name, url);
    return {};
  }

  // The `[datasets/]ORG/NAME` part of a resolve URL on the endpoint ("" if it is not one).
  std::string repo_part(std::string_view url) const {
    if (!url.starts_with(endpoint + "/")) return {};
    url.remove_prefix(endpoint.size() + 1);
    const auto at = url.find("/resolve/");
    return at == std::string_view::npos ? std::string() : std::string(url.substr(0, at));
  }

  // Follows a rename: a redirect on the endpoint from one repo's resolve URL to another's.
  void learn_canonical_name(const HttpResponse& r) {
    std::vector<std::string_view> urls;
    for (const auto& hop : r.redirects) urls.push_back(hop.url);
    urls.push_back(r.url);
    for (std::size_t i = 0; i + 1 < urls.size(); ++i) {
      const std::string from = repo_part(urls[i]), to = repo_part(urls[i + 1]);
      const bool plain = to.size() <= 200 && std::all_of(to.begin(), to.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' || c == '/';
      });
      if (!from.empty() && !to.empty() && plain && from != to && from == repo_path && to.find("..") == std::string::npos) {
        repo_path = to;
        impl.canonical_repo = to;
        return;
      }
    }
  }

  // The resolve URL of `path` at revision `rev`, under the repo's canonical name.
  std::string resolve(const std::string& rev, const std::string& path) const {
    detail::HubRef canonical{false, repo_path, rev, std::nullopt};  // repo_path has datasets/
    return detail::resolve_url(endpoint, canonical, rev, path);
  }

  // One request per path of the repo at the revision given, all at once: safetensors files
  // for their first window, other files (index, config.json) whole up to their limit.
  std::vector<Result<HttpResponse>> ask_hub(const std::vector<std::string>& paths) {
    std::vector<HttpRequest> reqs;
    for (const auto& p : paths) {
      const bool safetensors = p.ends_with(".safetensors");
      const std::uint64_t limit = safetensors ? window() : (p == "config.json" ? kMaxConfigSize : kMaxIndexSize);
      reqs.push_back(request(resolve(location.hub.revision, p),
                             safetensors ? std::optional(ByteRange{0, window()}) : std::nullopt, limit));
    }
    return client.perform(reqs);
  }

  // Step 2 for a repo, round 1b: the diffusers layouts, asked only of repos that have neither
  // of the usual files; the first one found is put into `paths` and `results` before their
  // last entry (config.json). Returns its position, if one was found.
  Result<std::optional<std::size_t>> ask_diffusers(std::vector<std::string>& paths,
                                                   std::vector<Result<HttpResponse>>& results) {
    std::vector<std::string> more;
    for (auto c : detail::checkpoint_candidates()) {
      if (c != "model.safetensors" && c != "model.safetensors.index.json") more.emplace_back(c);
    }
    auto more_results = ask_hub(more);
    const std::size_t config_k = paths.size() - 1;
    for (std::size_t k = 0; k < more.size(); ++k) {
      if (!more_results[k]) return fail(more_results[k].error().with_context(more[k]));
      if (more_results[k]->status == 200 || more_results[k]->status == 206) {
        paths.insert(paths.begin() + static_cast<std::ptrdiff_t>(config_k), more[k]);
        results.insert(results.begin() + static_cast<std::ptrdiff_t>(config_k), std::move(more_results[k]));
        return std::optional<std::size_t>(config_k);
      }
    }
    return std::optional<std::size_t>();
  }

  // Step 2 for a repo, the error when no candidate was found: "not a safetensors repo" for a
  // 404, else what the first candidate's answer says.
  Error no_checkpoint(const std::vector<std::string>& paths, const HttpResponse& r) const {
    const auto& hub = location.hub;
    if (r.status != 404) return response_error(r, paths[0]);
    return {ErrorCode::RemoteNotFound,
            repo_text() + " at revision '" + hub.revision + "' has no " +
                (hub.path ? *hub.path : std::string("model.safetensors, model.safetensors.index.json or diffusers checkpoint")) +
                ": not a safetensors repo (" + r.url + ")"};
  }

  // Step 5, pin the commit: config.json found in round 1 that came from another commit than
  // the checkpoint (the branch moved) is read again at the pinned one.
  void config_at_commit(const HttpResponse& config, const std::string& rev) {
    if (note_commit(config, "config.json")) return;
    std::vector<HttpRequest> again{request(resolve(rev, "config.json"), std::nullopt, kMaxConfigSize)};
    auto res = client.perform(again);
    impl.config_json.reset();
    if (res[0] && res[0]->status == 200) impl.config_json = res[0]->body;
  }

  // Step 2 for a repo: round 1 asks for the candidates at once (the index given, or the single
  // file, the index and config.json), round 1b for the diffusers layouts when none was found.
  // The chosen candidate pins the commit every other file is read at: an index adds its
  // shards (step 3); a single file keeps its first window in `pending_state`.
  Result<void> open_hub() {
    const auto& hub = location.hub;
    if (hub.path && !detail::is_index_path(*hub.path)) {  // one file
      add_file(*hub.path, resolve(hub.revision, *hub.path));
      return {};
    }
    std::vector<std::string> paths;
    if (hub.path) {
      paths = {*hub.path, "config.json"};
    } else {
      paths = {"model.safetensors", "model.safetensors.index.json", "config.json"};
    }
    auto results = ask_hub(paths);
    // A response that says the repo, revision or access is wrong decides at once.
    for (std::size_t k = 0; k < results.size(); ++k) {
      if (!results[k]) return fail(results[k].error().with_context(paths[k]));
      const HttpResponse& r = *results[k];
      if (detail::hub_error_is_final(detail::HubReply{r.status, r.url, header_or(r.headers, "x-error-code"), {}, {}, {}, 1})) {
        return fail(response_error(r, paths[k]));
      }
    }
    // A renamed repo or a legacy id answered with a redirect to its canonical name: every
    // later resolve goes there directly (one request less per file, and the Hub's quota).
    for (const auto& res : results) learn_canonical_name(*res);
    auto found = [&](std::size_t k) { return results[k]->status == 200 || results[k]->status == 206; };
    const std::size_t config_k = paths.size() - 1;
    const bool has_config = found(config_k);
    if (has_config) impl.config_json = results[config_k]->body;
    std::optional<std::size_t> chosen;
    for (std::size_t k = 0; k < config_k && !chosen; ++k) {
      if (found(k)) chosen = k;
    }
    if (!chosen && !hub.path) {
      auto diffusers = ask_diffusers(paths, results);
      if (!diffusers) return fail(diffusers.error());
      chosen = *diffusers;
    }
    if (!chosen) return fail(no_checkpoint(paths, *results[0]));
    const std::string path = paths[*chosen];
    const HttpResponse& r = *results[*chosen];
    if (auto c = note_commit(r, path); !c) return fail(c.error());
    // Every other file is read at the commit this response named.
    const std::string rev = impl.commit ? *impl.commit : hub.revision;
    if (has_config) config_at_commit(*results[paths.size() - 1], rev);
    if (detail::is_index_path(path)) {
      const auto dir = path.substr(0, path.rfind('/') + 1);  // shards sit beside the index
      return use_index(r.body, path, [&](const std::string& shard) { return resolve(rev, dir + shard); });
    }
    CheckpointFile file{path, 0, std::nullopt, resolve(rev, path), std::nullopt};
    auto state = file_prefix(r, file, path, window());
    if (!state) return fail(state.error());
    state->resolve_url = resolve(rev, path);  // resolved again (expired URLs) at the pinned commit
    impl.files.push_back(OpenFile{std::move(file), {}, {}, {}});
    pending_state = std::move(*state);
    return {};
  }

  // `s3://BUCKET/KEY` of a file of this checkpoint (or of `what`, a key's last part), for messages.
  std::string s3_text(const std::string& what) const {
    std::string key = s3_location.key;
    if (!s3_location.is_prefix()) key = key.substr(0, key.rfind('/') + 1);
    if (what.find('/') == std::string::npos && !what.empty() && what.find(' ') == std::string::npos) key += what;
    return "s3://" + s3_location.bucket + "/" + key;
  }

  // A store's "directory" (`where`, for messages): of the `names` listed directly under it (of
  // `listed` objects in all), the checkpoint is the index there (model.safetensors.index.json
  // first, else the only index), else model.safetensors, else the only .safetensors file, else
  // every .safetensors file listed.
  static Result<std::vector<std::string>> pick_listed(const std::string& where, const std::vector<std::string>& listed_names,
                                                      std::size_t listed) {
    std::vector<std::string> names, indexes;
    for (const auto& name : listed_names) {
      if (name.empty() || name.find('/') != std::string::npos) continue;
      if (!detail::is_index_path(name) && !name.ends_with(".safetensors")) continue;
      // A listed name becomes a file name (download -o DIR): the rules of an index's shard names.
      if (auto ok = check_shard_name(name); !ok) return fail(ok.error().with_context(where + " (listing)"));
      if (detail::is_index_path(name)) indexes.push_back(name);
      if (name.ends_with(".safetensors")) names.push_back(name);
    }
    auto has = [](const std::vector<std::string>& v, const char* n) { return std::find(v.begin(), v.end(), n) != v.end(); };
    if (has(indexes, "model.safetensors.index.json")) return std::vector<std::string>{"model.safetensors.index.json"};
    if (indexes.size() == 1) return indexes;
    if (!indexes.empty()) {
      return fail(ErrorCode::InvalidArgument, where + " holds " + std::to_string(indexes.size()) +
                                                  " indexes and none is model.safetensors.index.json: name one (" +
                                                  indexes[0] + ", " + indexes[1] + (indexes.size() > 2 ? ", ..." : "") + ")");
    }
    if (has(names, "model.safetensors")) return std::vector<std::string>{"model.safetensors"};
    if (names.empty()) {
      return fail(ErrorCode::RemoteNotFound, where + ": no .safetensors file or index under this prefix (" +
                                                 std::to_string(listed) + " objects listed)");
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  // One page of a listing: its answer, asked at the plain URL `url` (signed here).
  Result<HttpResponse> list_page(const std::string& url, const std::string& where) {
    std::vector<HttpRequest> reqs{request(url, std::nullopt, 64 << 20)};
    auto results = client.perform(reqs);
    if (!results[0]) return fail(results[0].error().with_context(where + " (listing)"));
    if (results[0]->status != 200) return fail(response_error(*results[0], where + " (listing)"));
    return std::move(*results[0]);
  }

  // Step 2 for S3, a prefix: ListObjectsV2 (delimiter '/', every page), then `pick_listed`.
  Result<std::vector<std::string>> list_s3_prefix() {
    std::vector<std::string> names;
    std::size_t listed = 0;
    std::string continuation;
    const std::string where = "s3://" + s3_location.bucket + "/" + s3_location.key;
    for (int page = 0;; ++page) {
      if (page == 10'000) return fail(ErrorCode::BadResponse, where + ": more than 10000 pages of listing");
      auto r = list_page(detail::s3_list_url(s3->endpoint(), s3_location.bucket, s3_location.key, continuation), where);
      if (!r) return fail(r.error());
      auto parsed = detail::parse_list_objects_v2(r->body);
      if (!parsed) return fail(parsed.error().with_context(where));
      listed += parsed->objects.size();
      for (const auto& o : parsed->objects) {
        if (o.key.starts_with(s3_location.key)) names.push_back(o.key.substr(s3_location.key.size()));
      }
      if (!parsed->truncated) break;
      continuation = parsed->continuation;
    }
    return pick_listed(where, names, listed);
  }

  // Step 2 for Azure, a prefix: List Blobs (delimiter '/', every page, NextMarker), then
  // `pick_listed`.
  Result<std::vector<std::string>> list_azure_prefix() {
    std::vector<std::string> names;
    std::size_t listed = 0;
    std::string marker;
    const std::string where = azure_location.text();
    const auto& setup = azure->setup();
    for (int page = 0;; ++page) {
      if (page == 10'000) return fail(ErrorCode::BadResponse, where + ": more than 10000 pages of listing");
      auto r = list_page(detail::azure_list_url(setup.endpoint, azure_location.container, azure_location.blob, marker), where);
      if (!r) return fail(r.error());
      auto parsed = detail::parse_list_blobs(r->body);
      if (!parsed) return fail(parsed.error().with_context(where));
      listed += parsed->blobs.size();
      for (const auto& b : parsed->blobs) {
        if (b.name.starts_with(azure_location.blob)) names.push_back(b.name.substr(azure_location.blob.size()));
      }
      if (parsed->next_marker.empty()) break;
      if (parsed->next_marker == marker) return fail(ErrorCode::BadResponse, where + ": the listing's NextMarker repeats");
      marker = parsed->next_marker;
    }
    return pick_listed(where, names, listed);
  }

  // Step 2 for a store: `names` (files under the "directory" `url_of("")`): an index is read
  // now (its shards are added beside it); files are added.
  Result<void> open_store_files(const std::vector<std::string>& names,
                                const std::function<std::string(const std::string&)>& url_of) {
    if (names.size() == 1 && detail::is_index_path(names[0])) {
      const std::string url = url_of(names[0]);
      std::vector<HttpRequest> reqs{request(url, std::nullopt, kMaxIndexSize)};
      auto results = client.perform(reqs);
      if (!results[0]) return fail(results[0].error().with_context(names[0]));
      const HttpResponse& r = *results[0];
      if (r.status != 200) return fail(response_error(r, names[0]));
      return use_index(r.body, names[0], [&](const std::string& shard) { return detail::sibling_url(url, shard); });
    }
    for (const auto& name : names) add_file(name, url_of(name));
    return {};
  }

  // Step 2 for S3: an object (an index is read now; a file is added) or a prefix (listed).
  Result<void> open_s3() {
    std::vector<std::string> names;
    if (s3_location.is_prefix()) {
      auto listed = list_s3_prefix();
      if (!listed) return fail(listed.error());
      names = std::move(*listed);
    } else {
      const auto slash = s3_location.key.rfind('/');
      names.push_back(slash == std::string::npos ? s3_location.key : s3_location.key.substr(slash + 1));
    }
    const std::string dir = s3_location.is_prefix() ? s3_location.key
                                                    : s3_location.key.substr(0, s3_location.key.rfind('/') + 1);
    return open_store_files(names, [&](const std::string& name) {
      return detail::s3_object_url(s3->endpoint(), s3_location.bucket, dir + name);
    });
  }

  // Step 2 for Azure: a blob (an index is read now; a file is added) or a prefix (listed).
  Result<void> open_azure() {
    const std::string& blob = azure_location.blob;
    std::vector<std::string> names;
    if (azure_location.is_prefix()) {
      auto listed = list_azure_prefix();
      if (!listed) return fail(listed.error());
      names = std::move(*listed);
    } else {
      const auto slash = blob.rfind('/');
      names.push_back(slash == std::string::npos ? blob : blob.substr(slash + 1));
    }
    const std::string dir = azure_location.is_prefix() ? blob : blob.substr(0, blob.rfind('/') + 1);
    return open_store_files(names, [&](const std::string& name) {
      return detail::azure_blob_url(azure->setup().endpoint, azure_location.container, dir + name);
    });
  }

  // `az://ACCOUNT/CONTAINER/BLOB` of a file of this checkpoint (or of `what`, a blob name's last
  // part), for messages.
  std::string azure_text(const std::string& what) const {
    std::string blob = azure_location.blob;
    if (!azure_location.is_prefix()) blob = blob.substr(0, blob.rfind('/') + 1);
    if (what.find('/') == std::string::npos && !what.empty() && what.find(' ') == std::string::npos) blob += what;
    return "az://" + azure_location.account + "/" + azure_location.container + "/" + blob;
  }

  // Step 2: what the location names, read in the fewest round trips (see the top of this file).
  Result<void> open_location() {
    if (location.kind == detail::LocationKind::S3) return open_s3();
    if (location.kind == detail::LocationKind::Azure) return open_azure();
    return location.kind == detail::LocationKind::Http ? open_url() : open_hub();
  }

  // The name of the snapshot manifest of this location at `revision` (a Hub repo) or of its URL.
  std::string snapshot_key(const std::string& revision) const {
    if (location.kind == detail::LocationKind::Http) return detail::sha256_hex("url\n" + location.url);
    if (location.kind == detail::LocationKind::S3) {
      // The store, bucket and key (or prefix): the same manifest whatever the credentials.
      return detail::sha256_hex("s3\n" + (s3 ? s3->endpoint().endpoint : std::string()) + "\n" + s3_location.bucket +
                                "\n" + s3_location.key);
    }
    if (location.kind == detail::LocationKind::Azure) {
      // The endpoint, account, container and blob (or prefix): the same whatever the credentials.
      return detail::sha256_hex("az\n" + (azure ? azure->setup().endpoint : std::string()) + "\n" +
                                azure_location.account + "\n" + azure_location.container + "\n" + azure_location.blob);
    }
    return detail::sha256_hex("hub\n" + endpoint + "\n" + (location.hub.dataset ? "datasets/" : "") +
                              location.hub.repo_id + "\n" + revision + "\n" + location.hub.path.value_or(""));
  }
};

// Step 1, resolve the location: the endpoint (the option, else HF_ENDPOINT), the token (the
// option, else the environment's) and where the Hub repo's files are in the Hugging Face cache;
// refuses an endpoint or token that cannot be sent.
Result<void> resolve_location(Remote& remote, const detail::HubEnvironment& hf) {
  const OpenOptions& options = remote.options;
  if (remote.location.kind == detail::LocationKind::Hub) {
    remote.hf_repo_dir = detail::hf_repo_dir(!options.hf_hub_cache.empty() ? options.hf_hub_cache : hf.hub_cache,
                                             remote.location.hub);
    remote.repo_path = (remote.location.hub.dataset ? "datasets/" : "") + remote.location.hub.repo_id;
  }
  remote.endpoint = options.endpoint;
  while (!remote.endpoint.empty() && remote.endpoint.back() == '/') remote.endpoint.pop_back();
  if (remote.endpoint.empty()) remote.endpoint = hf.endpoint;
  if (auto ok = detail::check_url_text(remote.endpoint, options.endpoint.empty() ? "HF_ENDPOINT" : "the endpoint"); !ok) {
    return fail(ok.error());
  }
  if (options.token) {
    const std::string source = "the token option (OpenOptions::token, tf_open_options.token)";
    if (auto ok = detail::check_token(*options.token, source); !ok) return fail(ok.error());
    remote.token = *options.token;
    remote.token_source = source;
  } else if (hf.token) {
    remote.token = hf.token->value;
    remote.token_source = hf.token->source;
  }
  remote.token_authority = detail::url_authority(remote.endpoint);
  if (remote.location.kind == detail::LocationKind::S3 || remote.location.kind == detail::LocationKind::Azure) {
    remote.token.clear();  // a Hugging Face token never goes to an object store
    remote.token_authority.clear();
    remote.token_source.clear();
  }
  return {};
}

// Step 1 for S3: the bucket and key, the endpoint and region (options, environment, profile),
// and the credential chain (not asked yet: an offline open needs none).
Result<void> resolve_s3(Remote& remote) {
  const OpenOptions& options = remote.options;
  auto where = detail::parse_s3_location(remote.location.url);
  if (!where) return fail(where.error());
  remote.s3_location = std::move(*where);
  const auto env = detail::process_environment();
  const auto files = detail::AwsSharedFiles::from(env);
  auto profile = files.settings();
  if (!profile) return fail(profile.error());
  auto endpoint = detail::resolve_s3_endpoint(env, *profile, {options.s3_endpoint, options.s3_no_sign_request});
  if (!endpoint) return fail(endpoint.error());
  remote.s3 = std::make_shared<detail::S3Signer>(
      std::move(*endpoint), options.s3_no_sign_request ? nullptr : detail::default_credential_chain(env));
  return {};
}

// Step 1 for Azure: the account, container and blob, the endpoint and the credentials
// (environment, a SAS URL; none looked for with --no-sign-request).
Result<void> resolve_azure(Remote& remote) {
  auto where = detail::parse_azure_location(remote.location.url);
  if (!where) return fail(where.error());
  remote.azure_location = std::move(*where);
  auto setup = detail::resolve_azure(detail::process_environment(), remote.azure_location,
                                     remote.options.s3_no_sign_request);
  if (!setup) return fail(setup.error().with_context(remote.azure_location.text()));
  remote.azure = std::make_shared<detail::AzureSigner>(std::move(*setup));
  return {};
}

// Before the first S3 request: credentials must exist (else "no AWS credentials found", listing
// where the chain looked), unless the open is anonymous.
Result<void> check_s3_credentials(const Remote& remote, std::string_view location_text) {
  auto probe = remote.s3->presign(remote.s3->endpoint().endpoint + "/", detail::unix_now(), 60);
  if (!probe) return fail(probe.error().with_context(std::string(location_text)));
  return {};
}

// Records in `impl` what its fetches need later (HTTP settings, endpoint, token, the cache and
// its snapshot key, offline or not) and what it is (a Hub repo at a revision).
void record_settings(Checkpoint::Impl& impl, const Remote& remote, const detail::HubEnvironment& hf) {
  const OpenOptions& options = remote.options;
  if (remote.location.kind == detail::LocationKind::Hub) {
    impl.hub = true;
    impl.revision = remote.location.hub.revision;
    impl.hf_repo_dir = remote.hf_repo_dir;
    impl.hub_repo_path = remote.repo_path;
  }
  // The open's settings, with its share: the fetches resume the TLS sessions the open made (and
  // use its DNS answers); a fresh share would make every data connection a full handshake
  // (certificate, signature) again. Not the open's cancel token or wait callback.
  impl.http = remote.client.options();
  impl.http.cancel = {};
  impl.http.on_wait = nullptr;
  impl.connections = options.connections;
  impl.max_connections = std::max<std::size_t>(1, options.max_connections);
  impl.max_rate = options.max_rate;
  impl.endpoint = remote.endpoint;
  impl.signer = remote.signer();
  impl.presign_seconds = options.s3_presign_seconds;
  impl.token = remote.token;
  impl.token_authority = remote.token_authority;
  impl.cache_root = !options.cache_dir.empty() ? options.cache_dir : detail::default_cache_root();
  impl.cache_sharing = !options.shared_cache ? detail::default_cache_sharing()
                       : *options.shared_cache ? detail::Sharing::Group
                                               : detail::Sharing::Private;
  impl.snapshot_keys = {remote.snapshot_key(remote.location.hub.revision)};
  impl.offline = options.offline.value_or(hf.offline);
  impl.on_stale_cache = options.on_stale_cache;
}

// Offline, a location tensorfetch never fetched: the Hugging Face cache's snapshot of it, as
// huggingface_hub left it (refs/<rev> names the commit, unless the revision is one), opened as
// local files, every one inside the repo's directory of that cache (links followed only
// there). False when that cache has no such snapshot.
Result<bool> open_hf_snapshot(Checkpoint::Impl& impl, const Remote& remote, std::string_view location_text) {
  const auto& hub = remote.location.hub;
  std::string commit = hub.revision;
  auto repo = detail::open_hf_repo(remote.hf_repo_dir);
  if (repo) {
    auto ref = detail::read_hf_ref(repo->get(), remote.hf_repo_dir, hub.revision);
    if (!ref) return fail(ref.error());
    if (*ref) commit = **ref;
  }
  if (!repo || !detail::has_hf_snapshot(repo->get(), commit)) return false;
  const std::string dir = remote.hf_repo_dir + "/snapshots/" + commit;
  impl.remote = false;
  impl.commit = commit;
  impl.confine_root = remote.hf_repo_dir;
  auto local = open_local(impl, hub.path ? dir + "/" + *hub.path : dir);
  if (!local) return fail(local.error().with_context(std::string(location_text)));
  return true;
}

// Offline (no request at all): what an earlier fetch recorded in the cache, else the Hugging
// Face cache's snapshot.
Result<void> open_without_network(Checkpoint::Impl& impl, const Remote& remote, std::string_view location_text) {
  auto r = open_offline(impl, impl.snapshot_keys);
  if (!r && r.error().code == ErrorCode::NotFetched && !remote.hf_repo_dir.empty()) {
    auto opened = open_hf_snapshot(impl, remote, location_text);
    if (!opened) return fail(opened.error());
    if (*opened) return {};
  }
  if (!r) return fail(r.error().with_context(std::string(location_text)));
  open_existing_blobs(impl);
  return {};
}

// Step 4 without requests: a commit read before (by any fetch into this cache) is immutable,
// so the files and headers its snapshot manifest recorded are used. True when they were.
bool reuse_recorded_headers(Checkpoint::Impl& impl, const Remote& remote) {
  if (!impl.commit || remote.location.kind != detail::LocationKind::Hub) return false;
  Checkpoint::Impl cached;
  cached.cache_root = impl.cache_root;
  cached.cache_sharing = impl.cache_sharing;
  if (!open_offline(cached, {remote.snapshot_key(*impl.commit)}) || cached.commit != impl.commit ||
      cached.files.size() != impl.files.size() || cached.index_name != impl.index_name) {
    return false;
  }
  impl.files = std::move(cached.files);
  impl.cache = std::move(cached.cache);
  if (!impl.config_json) impl.config_json = std::move(cached.config_json);
  return true;
}

// Step 6: files the Hugging Face cache already holds (its snapshot of this commit, or a blob with
// the same sha256) are read from there: no download. Only files inside the repo's directory of
// that cache are read (a link leading elsewhere is not followed).
Result<void> use_hf_cache_copies(Checkpoint::Impl& impl, const std::string& hf_repo_dir) {
  if (hf_repo_dir.empty()) return {};
  auto hf_repo = detail::open_hf_repo(hf_repo_dir);
  if (!hf_repo) return {};
  for (auto& file : impl.files) {
    auto& rf = file.remote;
    std::string rel;
    if (rf.local_path.empty()) {
      auto sha = detail::sha256_of_linked_etag(rf.linked_etag);
      if (!sha) continue;
      rel = detail::hf_blob_path(*sha);
    } else {
      rel = rf.local_path.substr(hf_repo_dir.size() + 1);
    }
    auto fd = detail::open_file_within(hf_repo->get(), rel, hf_repo_dir);
    if (!fd) {
      if (rf.local_path.empty()) continue;
      return fail(fd.error().with_context("the Hugging Face cache"));
    }
    auto map = detail::MappedFile::map_fd(fd->get(), hf_repo_dir + "/" + rel);
    if (!map || map->size() != file.info.size) {
      if (rf.local_path.empty()) continue;
      return fail(ErrorCode::Io, rf.local_path + ": the Hugging Face cache file could not be read");
    }
    rf.local_path = hf_repo_dir + "/" + rel;
    file.map = std::move(*map);
  }
  return {};
}

}  // namespace

Result<std::optional<std::string>> url_config_json(const Checkpoint::Impl& impl) {
  if (!impl.remote || impl.hub || impl.offline) return std::optional<std::string>{};
  std::lock_guard lock(impl.url_config_mutex);  // one request, also for concurrent callers
  if (impl.url_config) return *impl.url_config;
  // Beside the location; for a store beside its first file (a location `s3://...` is no URL).
  const std::string url = detail::sibling_url(impl.signer && !impl.files.empty() ? impl.files[0].info.url : impl.location,
                                              "config.json");
  // On the open's client, whose idle connection to that host saves a TCP and TLS handshake;
  // with the checkpoint's settings (not the open's cancel token). Nothing else uses it now.
  std::optional<detail::HttpClient> own;
  detail::HttpClient* client = impl.open_client.get();
  if (client == nullptr || !client->reconfigure(impl.http)) client = &own.emplace(impl.http);
  HttpRequest r;
  r.url = url;
  if (impl.signer) {
    auto signed_url = impl.signer->presign(url, detail::unix_now(), impl.presign_seconds);
    if (!signed_url) return fail(signed_url.error());
    r.url = *signed_url;
  }
  r.max_body = kMaxConfigSize;
  r.bearer_token = impl.token;
  r.token_authority = impl.token_authority;  // the token goes to the endpoint's host only
  auto results = client->perform(std::vector<HttpRequest>{r});
  if (!results[0]) return fail(results[0].error().with_context(url));
  const HttpResponse& res = *results[0];
  if (res.status == 200) {
    impl.url_config = std::optional<std::string>(res.body);
  } else if (res.status == 404 || res.status == 410) {
    impl.url_config = std::optional<std::string>{};
  } else {
    return fail(ErrorCode::Network, url + ": HTTP " + std::to_string(res.status) + " (reading the model's config.json)");
  }
  return *impl.url_config;
}

Result<void> open_remote(Checkpoint::Impl& impl, std::string_view location_text, const OpenOptions& options,
                         const std::string* manifest) {
  auto location = detail::parse_location(location_text, false);
  if (!location) return fail(location.error());
  // The environment as huggingface_hub reads it; options given explicitly win (a token given
  // as an option: the token variables and file are not read at all).
  auto hf = detail::read_hub_environment(detail::process_environment(), !options.token);
  if (!hf) return fail(hf.error());
  if (options.s3_presign_seconds < 1 || options.s3_presign_seconds > 604800) {
    return fail(ErrorCode::InvalidArgument, "s3_presign_seconds " + std::to_string(options.s3_presign_seconds) +
                                                " is outside 1 to 604800 (SigV4's limit of 7 days)");
  }
  Remote remote(impl, options, std::move(*location));
  if (auto r = resolve_location(remote, *hf); !r) return r;
  if (remote.location.kind == detail::LocationKind::S3) {
    if (auto r = resolve_s3(remote); !r) return r;
  }
  if (remote.location.kind == detail::LocationKind::Azure) {
    if (auto r = resolve_azure(remote); !r) return r;
  }
  record_settings(impl, remote, *hf);
  // Step 5: a later open at the commit these files were read at finds what a fetch records.
  auto add_commit_key = [&] {
    if (impl.commit && remote.location.kind == detail::LocationKind::Hub && *impl.commit != remote.location.hub.revision) {
      impl.snapshot_keys.push_back(remote.snapshot_key(*impl.commit));
    }
  };
  if (manifest) {
    // Another process opened it (one set of header requests for a whole job): its files, ETags
    // and headers, as its snapshot manifest records them.
    if (auto r = load_snapshot(impl, *manifest, "the manifest of " + std::string(location_text), nullptr); !r) return r;
    add_commit_key();
    open_existing_blobs(impl);
    return use_hf_cache_copies(impl, remote.hf_repo_dir);
  }
  if (impl.offline) return open_without_network(impl, remote, location_text);
  if (remote.s3) {
    if (auto r = check_s3_credentials(remote, location_text); !r) return r;
  }
  // The data connections, opened while the index and headers are read (a URL's files lie
  // beside it, on its host): each by a GET of the location's first byte, redirects not
  // followed. Not toward the Hub endpoint: its resolves count against a rate limit, and the
  // data comes from the CDN they redirect to.
  if (options.warm_connections && remote.location.kind == detail::LocationKind::Http && !impl.data &&
      detail::url_authority(remote.location.url) != detail::url_authority(remote.endpoint)) {
    HttpRequest warm = remote.request(remote.location.url, ByteRange{0, 1}, 1);
    warm.max_redirects = 0;
    impl.data = std::make_unique<detail::DataConnections>(
        impl.http, std::move(warm), detail::data_connections_to_start(impl, detail::url_authority(remote.location.url)));
  }

  auto read = [&]() -> Result<void> {
    Result<void> r = remote.open_location();  // steps 2 and 3
    if (r && !reuse_recorded_headers(impl, remote)) {
      std::vector<std::optional<RemoteFileState>> states;
      if (remote.pending_state) states.push_back(std::move(remote.pending_state));
      r = remote.load_headers(std::move(states));  // step 4
    }
    return r;
  };
  Result<void> opened = read();
  if (!opened && remote.s3 && !remote.s3_region_hint.empty() &&
      remote.s3_region_hint != remote.s3->endpoint().region) {
    // S3 said the bucket is in another region (the configured one, or us-east-1 by default, was
    // wrong): everything is asked again there, once.
    remote.s3 = remote.s3->in_region(remote.s3_region_hint);
    impl.signer = remote.s3;
    impl.files.clear();
    impl.index.reset();
    impl.index_name.clear();
    impl.index_text.clear();
    remote.index_windows.clear();
    remote.pending_state.reset();
    opened = read();
  }
  impl.requests = remote.client.stats().requests;
  if (!opened && remote.signer()) {
    // No presigned URL (signature, session token, SAS) in a message.
    Error e = opened.error();
    if (!e.message.starts_with(std::string(location_text) + ":")) e = e.with_context(std::string(location_text));
    e.message = detail::redact_signed_urls(e.message);
    return fail(e);
  }
  if (!opened) return fail(opened.error().with_context(std::string(location_text)));
  impl.open_client = std::make_unique<detail::HttpClient>(std::move(remote.client));
  add_commit_key();  // step 5
  // What earlier fetches left in the cache can be viewed at once (blobs are not created here:
  // inspecting writes nothing).
  open_existing_blobs(impl);
  return use_hf_cache_copies(impl, remote.hf_repo_dir);  // step 6
}

}  // namespace tensorfetch
