// SPDX-License-Identifier: Apache-2.0
// The repos of the test server (see repo_store_internal.h) and HubServer's repo calls.
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "hash_internal.h"
#include "repo_store_internal.h"
#include "request_internal.h"
#include "server_internal.h"

namespace tensorfetch::testing {

namespace fs = std::filesystem;

namespace detail {

RepoStore::RepoStore(const Options& opt)
    : root_(opt.root),
      lfs_suffixes_(opt.lfs_suffixes),
      lfs_threshold_(opt.lfs_threshold),
      secret_(random_hex(16)) {}

fs::path RepoStore::dir(const std::string& repo) const { return root_ / repo; }

bool RepoStore::exists(const std::string& repo) const {
  // Only ORG/NAME ids name repos (a legacy id names an org's directory).
  std::string_view id(repo);
  if (id.rfind("datasets/", 0) == 0) id.remove_prefix(9);
  std::error_code ec;
  return std::count(id.begin(), id.end(), '/') == 1 && !root_.empty() &&
         fs::is_directory(dir(repo), ec);
}

bool RepoStore::is_control_file(const std::string& file) {
  return file == ".commit" || file == ".refs";
}

std::vector<std::string> RepoStore::repo_ids() const {
  std::vector<std::string> repos;
  std::error_code ec;
  if (root_.empty() || !fs::is_directory(root_, ec)) return repos;
  auto add_repos = [&](const fs::path& base, const std::string& prefix) {
    for (const auto& org : fs::directory_iterator(base, ec)) {
      if (!org.is_directory(ec)) continue;
      std::string o = org.path().filename().string();
      if (prefix.empty() && o == "datasets") continue;
      for (const auto& name : fs::directory_iterator(org.path(), ec)) {
        if (name.is_directory(ec))
          repos.push_back(prefix + o + "/" + name.path().filename().string());
      }
    }
  };
  add_repos(root_, "");
  add_repos(root_ / "datasets", "datasets/");
  return repos;
}

std::vector<std::string> RepoStore::list_files(const std::string& repo) const {
  std::vector<std::string> out;
  std::error_code ec;
  const fs::path base = dir(repo);
  for (const auto& e : fs::recursive_directory_iterator(base, ec)) {
    if (!e.is_regular_file(ec)) continue;
    std::string rel = e.path().lexically_relative(base).generic_string();
    if (!is_control_file(rel)) out.push_back(std::move(rel));
  }
  // Path order (element by element), as a directory listing walked depth first.
  std::sort(out.begin(), out.end(),
            [](const std::string& a, const std::string& b) { return fs::path(a) < fs::path(b); });
  return out;
}

RepoStore::Refs* RepoStore::refs_of_locked(const std::string& repo) {
  auto it = refs_.find(repo);
  if (it != refs_.end()) return &it->second;
  if (!exists(repo)) return nullptr;
  Refs r;
  std::string main = default_commit(repo);
  {
    std::ifstream in(dir(repo) / ".commit");
    std::string line;
    if (in && std::getline(in, line) && is_hex40(trim(line))) main = trim(line);
  }
  r.refs["main"] = main;
  {
    std::ifstream in(dir(repo) / ".refs");
    std::string line;
    while (in && std::getline(in, line)) {
      std::istringstream ls(line);
      std::string name, sha;
      if (ls >> name >> sha && is_hex40(sha)) r.refs[name] = sha;
    }
  }
  for (auto& [_, sha] : r.refs) r.shas.insert(sha);
  return &refs_.emplace(repo, std::move(r)).first->second;
}

std::string RepoStore::resolve_rev(const std::string& repo, const std::string& rev) {
  std::lock_guard lk(refs_mu_);
  Refs* r = refs_of_locked(repo);
  if (!r) return {};
  if (is_hex40(rev) && r->shas.count(rev)) return rev;
  auto it = r->refs.find(rev);
  return it == r->refs.end() ? std::string() : it->second;
}

void RepoStore::set_ref(const std::string& repo, const std::string& ref, const std::string& sha) {
  if (!is_hex40(sha)) throw std::invalid_argument("set_ref: not a 40-hex sha");
  std::lock_guard lk(refs_mu_);
  Refs* r = refs_of_locked(repo);
  if (!r) throw std::invalid_argument("set_ref: unknown repo " + repo);
  r->refs[ref] = sha;
  r->shas.insert(sha);
}

void RepoStore::move_ref_after(const std::string& repo, const std::string& ref,
                               const std::string& sha, int requests) {
  if (!is_hex40(sha)) throw std::invalid_argument("move_ref_after: not a 40-hex sha");
  std::lock_guard lk(refs_mu_);
  moves_.push_back({repo, ref, sha, std::max(requests, 0)});
}

void RepoStore::count_request(const std::string& repo) {
  std::lock_guard lk(refs_mu_);
  for (auto it = moves_.begin(); it != moves_.end();) {
    if (it->repo != repo) {
      ++it;
    } else if (it->remaining > 0) {
      --it->remaining;
      ++it;
    } else {
      if (Refs* r = refs_of_locked(repo)) {
        r->refs[it->ref] = it->sha;
        r->shas.insert(it->sha);
      }
      it = moves_.erase(it);
    }
  }
}

std::string RepoStore::cached_digest(const fs::path& path, bool git) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw std::runtime_error("cannot stat " + path.string());
  std::shared_ptr<HashEntry> e;
  {
    std::lock_guard lk(hash_mu_);
    auto& slot = hashes_[(git ? "gitblob:" : "sha256:") + path.string()];
    if (!slot) slot = std::make_shared<HashEntry>();
    e = slot;
  }
  std::lock_guard lk(e->mu);
  auto size = static_cast<std::uint64_t>(st.st_size);
  std::int64_t mtime =
      static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  if (!e->done || e->size != size || e->mtime != mtime) {
    if (git) {
      std::string prefix = "blob " + std::to_string(size);
      prefix.push_back('\0');
      e->value = file_digest_hex(path, EVP_sha1(), prefix);
    } else {
      e->value = file_digest_hex(path, EVP_sha256(), {});
    }
    e->size = size;
    e->mtime = mtime;
    e->done = true;
  }
  return e->value;
}

std::string RepoStore::sha256(const fs::path& path) { return cached_digest(path, false); }
std::string RepoStore::git_blob(const fs::path& path) { return cached_digest(path, true); }

bool RepoStore::is_lfs(const std::string& file, std::uint64_t size) const {
  if (size >= lfs_threshold_) return true;
  return std::any_of(lfs_suffixes_.begin(), lfs_suffixes_.end(), [&](const std::string& s) {
    return file.size() >= s.size() && file.compare(file.size() - s.size(), s.size(), s) == 0;
  });
}

std::size_t RepoStore::warm_up() {
  std::size_t n = 0;
  std::error_code ec;
  for (const auto& repo : repo_ids()) {
    for (const auto& rel : list_files(repo)) {
      const fs::path path = dir(repo) / rel;
      if (is_lfs(rel, fs::file_size(path, ec)))
        register_blob(path, repo, rel);
      else
        git_blob(path);
      ++n;
    }
  }
  return n;
}

std::string RepoStore::register_blob(const fs::path& path, const std::string& repo,
                                     const std::string& file) {
  std::string sha = sha256(path);
  std::lock_guard lk(blob_mu_);
  blobs_[sha] = BlobInfo{path, repo, file};
  return sha;
}

std::optional<BlobInfo> RepoStore::blob(const std::string& sha256) const {
  std::lock_guard lk(blob_mu_);
  auto it = blobs_.find(sha256);
  if (it == blobs_.end()) return std::nullopt;
  return it->second;
}

std::string RepoStore::sign(const std::string& sha, const std::string& expires) const {
  return sha256_hex(secret_ + "/" + sha + "/" + expires).substr(0, 32);
}

std::string RepoStore::signed_cdn_path(const std::string& sha256, std::int64_t ttl_ms) const {
  if (ttl_ms <= 0) ttl_ms = 365LL * 24 * 3600 * 1000;
  std::string expires = std::to_string(epoch_ms() + ttl_ms);
  return "/cdn/" + sha256 + "?expires=" + expires + "&sig=" + sign(sha256, expires);
}

bool RepoStore::signature_ok(const std::string& sha256, const std::string& expires,
                             const std::string& sig) const {
  return !expires.empty() && sig == sign(sha256, expires);
}

}  // namespace detail

// ================================================================ HubServer: repos

std::string HubServer::commit(std::string_view repo_id, std::string_view rev) const {
  return impl_->repos.resolve_rev(std::string(repo_id), std::string(rev));
}

void HubServer::set_ref(std::string_view repo_id, std::string_view ref, std::string_view sha) {
  impl_->repos.set_ref(std::string(repo_id), std::string(ref), std::string(sha));
}

void HubServer::move_ref_after(std::string_view repo_id, std::string_view ref, std::string_view sha,
                               int requests) {
  impl_->repos.move_ref_after(std::string(repo_id), std::string(ref), std::string(sha), requests);
}

std::size_t HubServer::warm_up() { return impl_->repos.warm_up(); }

std::string HubServer::file_sha256(std::string_view repo_id, std::string_view path) {
  fs::path p = impl_->repos.dir(std::string(repo_id)) / std::string(path);
  std::error_code ec;
  if (impl_->opt.root.empty() || !fs::is_regular_file(p, ec)) return {};
  return impl_->repos.sha256(p);
}

std::string HubServer::cdn_url(std::string_view repo_id, std::string_view path) {
  fs::path p = impl_->repos.dir(std::string(repo_id)) / std::string(path);
  std::error_code ec;
  if (impl_->opt.root.empty() || !fs::is_regular_file(p, ec)) return {};
  std::string sha = impl_->repos.register_blob(p, std::string(repo_id), std::string(path));
  return impl_->make_cdn_url(sha);
}

void HubServer::rewrite_file_same_etag(std::string_view repo_id, std::string_view path, std::string_view bytes) {
  const fs::path p = impl_->repos.dir(std::string(repo_id)) / std::string(path);
  std::error_code ec;
  const auto size = fs::file_size(p, ec);
  if (ec || impl_->opt.root.empty()) throw std::invalid_argument("rewrite_file_same_etag: no file " + p.string());
  if (size != bytes.size()) {
    throw std::invalid_argument("rewrite_file_same_etag: " + p.string() + " has " + std::to_string(size) +
                                " bytes, not " + std::to_string(bytes.size()));
  }
  // In place (the same inode, as an editor writing over it would): the CDN registry keeps the
  // path under the old sha256.
  fs::permissions(p, fs::perms::owner_write, fs::perm_options::add, ec);  // (copies of read-only files)
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.flush();
  if (!f) throw std::invalid_argument("rewrite_file_same_etag: cannot write " + p.string());
}

}  // namespace tensorfetch::testing
