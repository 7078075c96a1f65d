// SPDX-License-Identifier: Apache-2.0
// A Hugging Face Hub-like HTTP(S) server for tests, the demo and the benchmarks.
//
// It serves repositories from a directory:
//   ROOT/{org}/{name}/...files               model repos     (repo id "org/name")
//   ROOT/datasets/{org}/{name}/...files      dataset repos   (repo id "datasets/org/name")
// Optional per-repo control files (never served): `.commit` (40-hex commit sha of `main`;
// default sha1 of the repo id) and `.refs` (lines "REF SHA", e.g. "refs/pr/1 <sha>").
//
// Routes (one socket, two host names: the Hub at endpoint(), the "CDN" at cdn_endpoint()):
//   GET|HEAD /{repo}/resolve/{rev}/{path...}   LFS files (*.safetensors, ...): 302 to the CDN
//            with X-Repo-Commit, X-Linked-Etag ("<sha256>"), X-Linked-Size, ETag, Location;
//            small files: 200/206 directly with a git-blob ETag and X-Repo-Commit.
//   GET|HEAD /cdn/{sha256}?expires=MS&sig=HEX  the blob, ETag "<sha256>", If-Match (412), Range.
//   GET      /api/models/{org}/{name}[/revision/{rev}]  (and /api/datasets/...) repo info JSON.
//   GET|HEAD /api/resolve-cache/{models|datasets}/{org}/{name}/{commit}/{path...}  a small
//            file (where resolve_cache redirects), git-blob ETag, X-Repo-Commit, Range.
//   GET      /_admin/log | /_admin/clear | /_admin/stats | /_admin/set?...  (never logged)
// Errors carry X-Error-Code: RepoNotFound, RevisionNotFound, EntryNotFound, GatedRepo.
// The real-Hub profile (Options::real_hub, --real-hub) answers as huggingface.co does today
// (Xet era): see the Options below and tools/hubserver/README.md.
//
// Every request is recorded (RequestRecord) in memory and optionally appended as one JSON
// line to a file. Thread-safe: all setters may be called while requests are in flight.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tensorfetch::testing {

// How a response body longer than declared is framed (see HubServer::overlong_body).
enum class OverlongMode {
  ContentLength,   // Content-Length (and Content-Range) say N, N + extra bytes are sent, then close
  Chunked,         // Transfer-Encoding: chunked; Content-Range says N; N + extra bytes of chunks
  CloseDelimited,  // no Content-Length; Content-Range says N; N + extra bytes, then close
};

struct Options {
  std::filesystem::path root;  // repos are read from here (may be empty: no repos)
  std::string bind_address = "127.0.0.1";
  int port = 0;                               // 0: an ephemeral port, returned by start()
  std::string hub_host = "localhost";         // host name of endpoint()
  std::string cdn_host = "127.0.0.1";         // host name used in the CDN redirect URLs
  bool enforce_hosts = false;                 // 421 when a Hub route is asked on the CDN host or
                                              // vice versa (only when the two names differ)
  std::size_t threads = 64;                   // worker threads (one per open connection)
  int keep_alive_timeout_s = 5;               // idle keep-alive connections are closed after this
  std::size_t keep_alive_max_count = 100000;  // requests per connection
  std::filesystem::path log_file;             // if set, every record is appended as a JSON line
  bool log_authorization_values = false;      // also store the raw Authorization value

  // TLS: both set = HTTPS (see generate_self_signed_cert).
  std::filesystem::path tls_cert;
  std::filesystem::path tls_key;

  // Which files are "LFS" (served through the CDN redirect): these suffixes, or any file of
  // at least lfs_threshold bytes.
  std::vector<std::string> lfs_suffixes = {".safetensors", ".bin", ".pt",      ".pth", ".gguf",
                                           ".onnx",        ".h5",  ".msgpack", ".ckpt"};
  std::uint64_t lfs_threshold = 10 * 1024 * 1024;

  // Switches (all off by default); each also has a runtime setter on HubServer.
  int latency_ms = 0;                      // added before answering any request (Hub and CDN)
  bool ignore_range = false;               // answer 200 with the full body to Range requests
  std::string token;                       // the token gated/private repos accept ("" = none)
  std::vector<std::string> gated_repos;    // 403 GatedRepo unless "Bearer <token>"
  std::vector<std::string> private_repos;  // 401 unless "Bearer <token>"
  bool unknown_repo_401 = false;    // like the real Hub: unknown repo without a token → 401
  std::int64_t cdn_url_ttl_ms = 0;  // signed CDN URLs expire after this (0: 1 year) → 403

  // --- The real Hub as it answers today (issue 9). `real_hub` turns on lfs_without_etag,
  // xet_etags, resolve_cache, hub_errors and the "resolvers" rate limit (q=3000, w=300 unless
  // ratelimit_quota is set). Aliases, disabled repos, other tokens and CDN faults need data
  // of their own and are given separately (they work with or without the profile).
  bool real_hub = false;
  bool lfs_without_etag = false;  // resolve 302 of an LFS file carries no ETag of its own
  bool xet_etags = false;         // CDN ETag "<sha256 of 'xet:' + sha256>" (xet_etag()), not the
                                  // sha256; If-Match is compared to it
  bool resolve_cache = false;     // small (git) files: relative 307 to /api/resolve-cache/...
  // OLD → NEW repo ids: /OLD/resolve/... and /api/models/OLD... answer a relative 307 to the
  // same path under NEW (query kept). OLD: "gpt2", "org/old", "datasets/squad",
  // "datasets/org/old"; NEW: "org/new" or "datasets/org/new" (same kind as OLD).
  std::map<std::string, std::string> repo_aliases;
  int ratelimit_quota = 0;     // "resolvers" requests per fixed window (0: no rate limit)
  int ratelimit_window_s = 300;  // the window (tests: 1-3 s)
  bool hub_errors = false;     // access errors exactly as the Hub sends them (README, "Errors")
  std::vector<std::string> other_tokens;    // valid accounts without access to gated/private
  std::vector<std::string> disabled_repos;  // 403 "Access to this resource is disabled."
  int cdn_fault_status = 0;  // 400, 403 (SignatureError) or 416 on CDN requests (0: off) ...
  int cdn_fault_n = -1;      // ... for this many matching requests (-1: every one)
  std::string cdn_fault_match;
};

// One request, as the server saw it. Times are ms since start(), monotonic.
struct RequestRecord {
  std::uint64_t seq = 0;             // arrival order, from 1
  double start_ms = 0;               // request headers parsed, handler entered
  double end_ms = 0;                 // before the response's last bytes went out, or at close
  std::string method;                // GET, HEAD, ...
  std::string host;                  // Host header as sent ("localhost:1234")
  std::string target;                // raw path + query as sent (still percent-encoded)
  std::string range;                 // Range header ("" = none)
  std::string if_match;              // If-Match header
  bool authorization = false;        // an Authorization header was present
  std::string authorization_sha256;  // hex sha256 of the whole header value ("" = none)
  std::string authorization_value;   // raw value, only with Options::log_authorization_values
  std::string user_agent;
  int client_port = 0;   // the client's port: one value per TCP connection
  std::string kind;      // "resolve", "resolve_cache", "cdn", "api" or "other"
  std::string repo;      // "org/name" or "datasets/org/name" as asked, or a legacy id ("gpt2")
                         // ("" = n/a; cdn: the blob's)
  std::string revision;  // decoded revision asked for (resolve/api)
  std::string file;      // file path in the repo (cdn: of the blob, as last resolved)
  int status = 0;
  std::string content_range;         // Content-Range sent
  std::int64_t content_length = -1;  // Content-Length sent (-1 = none)
  std::uint64_t body_bytes = 0;      // body bytes written to the socket (payload, no framing)
  std::string etag;                  // ETag sent
  std::string location;              // Location sent
  std::string error_code;            // X-Error-Code sent
  std::string retry_after;           // Retry-After (or else RateLimit) sent
  bool dropped = false;              // the server closed the connection before the body was done
  std::string fault;                 // the switch that shaped this response ("" = none): fail,
                                     // drop, stall, drip, wrong_content_range, overlong, header,
                                     // ignore_range, etag_changed, expired, bad_signature,
                                     // misdirected, hostile_commit, linked_etag, cdn_etag,
                                     // cdn_fault, ratelimit (a 429 of the rate limit)
  std::string to_json() const;       // one line, no newline
  static RequestRecord from_json(std::string_view line);  // throws on malformed input
};

// Summary figures of a log.
struct LogSummary {
  std::size_t requests = 0;
  std::size_t resolve_requests = 0;
  std::size_t cdn_requests = 0;
  std::size_t connections = 0;  // distinct client ports
  int round_trips = 0;          // see round_trips()
  std::uint64_t body_bytes = 0;
  double wall_ms = 0;  // first start to last end
  std::string to_json() const;
};

// The length of the longest chain of requests each of which started after the previous one
// ended: the number of sequential round trips the client needed. Meaningful with latency
// (parallel requests then overlap); 0 for an empty log.
int round_trips(const std::vector<RequestRecord>& log);
LogSummary summarize(const std::vector<RequestRecord>& log);
// Reads a JSON-lines log file written by the server (Options::log_file). A record is written
// when it enters the log; if it changes afterwards (its last write failed), it is written
// again with the same seq: the last line for a seq wins, in the order of first appearance.
std::vector<RequestRecord> read_log_file(const std::filesystem::path& path);

// Writes a self-signed certificate (EC P-256, SANs DNS:localhost, IP:127.0.0.1, IP:::1;
// usable as its own CA bundle) and its key into DIR (created if needed) as cert.pem and
// key.pem. Returns {cert, key}. Throws std::runtime_error on failure.
struct TlsFiles {
  std::filesystem::path cert;
  std::filesystem::path key;
};
TlsFiles generate_self_signed_cert(const std::filesystem::path& dir, int valid_days = 30);

// Git blob id: hex sha1 of "blob {size}\0" + content (what the Hub uses as a small file's ETag).
std::string git_blob_sha1(std::string_view content);
// Default commit of a repo without a .commit file: hex sha1 of the repo id.
std::string default_commit(std::string_view repo_id);

class HubServer {
 public:
  // Throws std::invalid_argument for a bad alias or cdn_fault_status in `options`.
  explicit HubServer(Options options);
  ~HubServer();  // stops
  HubServer(const HubServer&) = delete;
  HubServer& operator=(const HubServer&) = delete;

  // Binds and starts serving on a background thread; returns the port. Throws
  // std::runtime_error (bad TLS files, port in use, already started).
  int start();
  // Stops serving: wakes latency waits and stalls, closes open connections, joins threads.
  // Idempotent. The log survives.
  void stop();
  bool running() const;
  int port() const;
  bool tls() const;
  std::string endpoint() const;      // "http(s)://{hub_host}:{port}"
  std::string cdn_endpoint() const;  // "http(s)://{cdn_host}:{port}"

  // --- the request log
  // Completed requests, in completion order. A record is in the log before its client can
  // see the end of the response, so a test may look right after a request returns.
  std::vector<RequestRecord> log() const;
  std::vector<RequestRecord> take_log();   // returns and clears
  void clear_log();
  std::size_t request_count() const;

  // --- repos
  // The commit `rev` resolves to ("" = unknown repo or revision). Reads .commit/.refs.
  std::string commit(std::string_view repo_id, std::string_view rev = "main") const;
  // Points REF of a repo at SHA (e.g. moves "main" mid-load); every sha ever set keeps
  // resolving.
  void set_ref(std::string_view repo_id, std::string_view ref, std::string_view sha);
  // Moves REF to SHA after `requests` more resolve/api requests of that repo (the next
  // `requests` ones still see the old commit): a branch that moves in the middle of a load.
  void move_ref_after(std::string_view repo_id, std::string_view ref, std::string_view sha,
                      int requests);
  // Hashes every file of every repo now (sha256 of LFS files, git ids of the others), so that
  // no request pays for it later (benchmarks). Returns the number of files. Without it, a
  // file is hashed on its first request, once.
  std::size_t warm_up();
  // sha256 of a repo file (computed once, cached); "" if absent.
  std::string file_sha256(std::string_view repo_id, std::string_view path);
  // The CDN URL the server would redirect to for that file ("" if absent).
  std::string cdn_url(std::string_view repo_id, std::string_view path);
  // Rewrites a repo file in place with `bytes` of its size (std::invalid_argument: absent, or
  // another size). A CDN URL made before (`cdn_url`) keeps working and keeps its ETag (the old
  // sha256) while it now serves the new bytes: a file rewritten without its ETag changing, as
  // nginx's (modification time in seconds, size) does not within one second.
  void rewrite_file_same_etag(std::string_view repo_id, std::string_view path, std::string_view bytes);

  // --- switches (runtime; thread-safe). `match`: only requests whose raw target or repo file
  // ("org/name/path") contains this substring ("" = all). `n`: how many matching requests
  // (-1 = every one until reset_switches()).
  void set_latency_ms(int ms);
  void set_ignore_range(bool on);
  // The next n matching requests (any route) are answered STATUS (429/503/...) with
  // `Retry-After: s`, or, when use_ratelimit_header, as the Hub does: `RateLimit:
  // "resolvers";r=0;t=s` and `RateLimit-Policy: "fixed window";"resolvers";q=Q;w=W` (the rate
  // limit's Q and W, or the Hub's 3000 and 300 when it is off), without Retry-After.
  void fail_next(int n, int status = 503, int retry_after_s = 1, bool use_ratelimit_header = false,
                 std::string match = "");
  // Close the connection after sending `bytes` body bytes (bodies of files only).
  void drop_after(std::uint64_t bytes, int n = 1, std::string match = "");
  // Send `bytes` body bytes, then stall for stall_ms (-1: until stop()), then close.
  void stall_after(std::uint64_t bytes, int n = 1, std::string match = "", int stall_ms = -1);
  // 206 responses carry a Content-Range shifted by `shift` (the body is the asked range).
  void wrong_content_range(int n = 1, std::string match = "", std::int64_t shift = 1);
  // Bodies (of files) trickle: `bytes` body bytes, then a pause of interval_ms, and so on.
  void drip(std::uint64_t bytes, int interval_ms, int n = 1, std::string match = "");
  // File bodies on every `every`-th TCP connection (numbered from 1 in the order their first
  // file body was asked for; connections phase, phase + every, ...) go out at `rate` bytes per
  // second: slow flows among fast ones (a CDN node far away). rate 0 turns it off (and forgets
  // the numbering). Logged as fault "slow_connection".
  void slow_connections(std::uint64_t rate, int every, int phase = 1);
  // Redirects to the CDN point at BASE + "/cdn/..." instead of cdn_endpoint() ("" = back to
  // it), e.g. another server's "http://..." behind a TLS Hub: a downgrade.
  void set_cdn_base(std::string base);
  // Sets response header NAME to VALUE (replacing what the route set) on matching responses,
  // e.g. a hostile Content-Range or X-Repo-Commit. VALUE must not contain CR or LF.
  void set_header(std::string name, std::string value, int n = 1, std::string match = "");
  // Bodies are `extra` bytes longer than declared (see OverlongMode).
  void overlong_body(std::uint64_t extra, int n = 1, std::string match = "",
                     OverlongMode mode = OverlongMode::ContentLength);
  // After `cdn_requests` more CDN requests, every blob changes: new ETag, different bytes;
  // If-Match with the old ETag then fails with 412. -1 turns it off (blobs change back).
  void change_etag_after(int cdn_requests);
  void set_token(std::string token);
  void set_gated_repos(std::vector<std::string> repos);
  void set_private_repos(std::vector<std::string> repos);
  void set_unknown_repo_401(bool on);
  void set_cdn_url_ttl_ms(std::int64_t ms);
  // A hostile Hub: every X-Repo-Commit (resolve and api) is `value` instead of the real commit
  // (the revision still resolves to the real one); "" turns it off.
  void set_hostile_commit(std::string value);
  // A lying Hub: resolve responses of matching LFS files claim `sha256` (64 hex) in
  // X-Linked-Etag while the redirect still leads to the file's real bytes; "" turns it off.
  void set_linked_etag(std::string sha256, std::string match = "");
  // A Xet-like CDN: matching blobs are served with ETag "<etag>" (If-Match compared to it)
  // instead of "<sha256>"; "" turns it off.
  void set_cdn_etag(std::string etag, std::string match = "");
  // --- the real Hub (see Options; each setter changes one behaviour at run time)
  // All of lfs_without_etag, xet_etags, resolve_cache, hub_errors on (off), and the rate
  // limit at q=3000, w=300 (off).
  void set_real_hub(bool on);
  void set_lfs_without_etag(bool on);
  void set_xet_etags(bool on);
  void set_resolve_cache(bool on);
  void set_hub_errors(bool on);
  // Adds (replaces) the alias OLD → NEW; NEW "" removes it. Throws std::invalid_argument for
  // ids of the wrong form or of different kinds (model / dataset).
  void set_repo_alias(std::string old_id, std::string new_id);
  // Replaces every alias. Throws like set_repo_alias (then nothing changed).
  void set_repo_aliases(std::map<std::string, std::string> aliases);
  // The "resolvers" fixed-window rate limit: `quota` resolve requests per `window_s` seconds
  // (a new window starts now); quota 0 turns it off.
  void set_rate_limit(int quota, int window_s = 300);
  void set_other_tokens(std::vector<std::string> tokens);
  void set_disabled_repos(std::vector<std::string> repos);
  // The next n matching CDN requests (valid URL, known blob) are answered STATUS: 416 with
  // Content-Range "bytes */SIZE" (the real size), 400, or 403 with a SignatureError body.
  // status 0 turns it off. Throws std::invalid_argument for another status.
  void cdn_fault(int status, int n = 1, std::string match = "");

  // Back to the switches given in Options (faults cleared, the rate limit's window restarted).
  void reset_switches();

  // The changed ETag/content the CDN serves after change_etag_after (for tests).
  static std::string changed_etag(std::string_view sha256);
  // The CDN ETag of a blob with xet_etags: quoted hex sha256 of "xet:" + sha256 (64 hex that
  // are not the file's sha256).
  static std::string xet_etag(std::string_view sha256);
  static constexpr unsigned char kChangedXor = 0x5A;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tensorfetch::testing
