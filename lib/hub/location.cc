// SPDX-License-Identifier: Apache-2.0
#include "hub/location.h"

#include <array>
#include <cctype>

#include "base/text.h"
#include "net/url.h"
#include "tensorfetch/index.hpp"

namespace tensorfetch::detail {

namespace {

bool repo_part_ok(std::string_view s) {
  if (s.empty() || s.size() > 96 || s == "." || s == "..") return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) return false;
  }
  return true;
}

Result<void> bad(std::string_view text, const std::string& why) {
  return fail(ErrorCode::InvalidArgument, "location '" + std::string(text) + "': " + why);
}

// Parses what follows hf:// (or a bare ORG/NAME[@REV][/PATH]).
Result<HubRef> parse_hub(std::string_view text, std::string_view rest) {
  HubRef ref;
  if (rest.starts_with("datasets/")) {
    ref.dataset = true;
    rest.remove_prefix(9);
  } else if (rest.starts_with("models/")) {
    rest.remove_prefix(7);
  }
  const auto first_end = rest.find_first_of("@/");
  if (first_end == std::string_view::npos || rest[first_end] == '@') {
    // A legacy id without an organization (`gpt2`, `bert-base-uncased@REV/PATH`): the Hub
    // redirects it to its canonical ORG/NAME. A path after it needs `@REV`, since
    // `hf://gpt2/x` reads as the repo `gpt2/x`.
    std::string_view name = rest.substr(0, first_end);
    if (!repo_part_ok(name)) {
      return fail(bad(text, "'" + std::string(name) + "' is not a valid repo id (ORG/NAME, or a legacy NAME: "
                                                      "letters, digits, '-', '_', '.')").error());
    }
    ref.repo_id = std::string(name);
    rest = first_end == std::string_view::npos ? std::string_view{} : rest.substr(first_end);
  } else {
    std::string_view org = rest.substr(0, first_end);
    rest.remove_prefix(first_end + 1);
    // NAME runs to '@' (revision) or '/' (path).
    auto end = rest.find_first_of("@/");
    std::string_view name = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view{} : rest.substr(end);
    if (!repo_part_ok(org) || !repo_part_ok(name)) {
      return fail(bad(text, "'" + std::string(org) + "/" + std::string(name) +
                                "' is not a valid repo id (letters, digits, '-', '_', '.')").error());
    }
    ref.repo_id = std::string(org) + "/" + std::string(name);
  }
  if (rest.starts_with("@")) {
    rest.remove_prefix(1);
    std::size_t len;
    if (rest.starts_with("refs/pr/") || rest.starts_with("refs/convert/")) {
      // Revisions with slashes: refs/pr/N, refs/convert/NAME.
      auto third = rest.find('/', rest.find('/', 5) + 1);
      len = third == std::string_view::npos ? rest.size() : third;
    } else {
      len = std::min(rest.find('/'), rest.size());
    }
    ref.revision = percent_decode(rest.substr(0, len));
    rest.remove_prefix(len);
    if (ref.revision.empty()) return fail(bad(text, "empty revision after '@'").error());
    if (auto r = check_revision(ref.revision); !r) return fail(bad(text, r.error().message).error());
  }
  if (rest.starts_with("/")) rest.remove_prefix(1);
  if (!rest.empty()) {
    if (auto r = check_shard_name(rest); !r) {
      return fail(bad(text, "path in the repo: " + r.error().message).error());
    }
    ref.path = std::string(rest);
  }
  return ref;
}

// A bare ORG/NAME (optionally @REV and /PATH), or a legacy NAME[@REV[/PATH]], that could be a
// repo id. A single word that looks like a file name (`model.safetensors`, `x.json`) stays a
// local path, so that a mistyped file name says "no such file" instead of asking the Hub.
bool looks_like_repo(std::string_view text) {
  if (text.empty() || text.front() == '/' || text.front() == '.' || text.front() == '~') return false;
  const auto end = text.find_first_of("/@");
  if (end == std::string_view::npos || text[end] == '@') {
    const std::string_view name = text.substr(0, end);
    for (std::string_view suffix : {".safetensors", ".json", ".bin", ".gguf", ".pt", ".pth", ".npy", ".onnx", ".h5"}) {
      if (name.ends_with(suffix)) return false;
    }
    return repo_part_ok(name);
  }
  return repo_part_ok(text.substr(0, end));
}

}  // namespace

Result<void> check_revision(std::string_view rev) {
  auto refuse = [&](const std::string& why) {
    return fail(ErrorCode::InvalidArgument, "revision " + quote_name(rev) + " is not a valid git ref name: " + why);
  };
  if (rev.empty()) return refuse("it is empty");
  if (rev.size() > 255) return refuse("it is longer than 255 bytes");
  for (char c : rev) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) return refuse("it contains a control character");
    if (std::string_view(" ~^:?*[\\").find(c) != std::string_view::npos) {
      return refuse(std::string("it contains '") + c + "'");
    }
  }
  if (rev.find("@{") != std::string_view::npos) return refuse("it contains '@{'");
  if (rev == "@") return refuse("it is '@'");
  if (rev.find("..") != std::string_view::npos) return refuse("it contains '..'");
  if (rev.back() == '/') return refuse("it ends with '/'");
  if (rev.back() == '.') return refuse("it ends with '.'");
  std::size_t start = 0;
  while (start <= rev.size()) {
    const auto slash = rev.find('/', start);
    const std::string_view segment = rev.substr(start, slash == std::string_view::npos ? rev.npos : slash - start);
    if (segment.empty()) return refuse("it has an empty '/'-separated part");
    if (segment.front() == '.') return refuse("a '/'-separated part starts with '.'");
    if (segment.ends_with(".lock")) return refuse("a '/'-separated part ends with '.lock'");
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return {};
}

LocationKind classify_location(std::string_view location) noexcept {
  if (location.starts_with("az://")) return LocationKind::Azure;
  if (location.starts_with("https://")) {
    // Azure Blob Storage's own hosts: ACCOUNT.blob.core.windows.net.
    constexpr std::string_view kBlobHost = ".blob.core.windows.net";
    const std::string_view rest = location.substr(8);
    const std::string_view host = rest.substr(0, rest.find_first_of("/?#"));
    if (host.size() > kBlobHost.size() && host.ends_with(kBlobHost)) return LocationKind::Azure;
  }
  if (location.starts_with("http://") || location.starts_with("https://")) return LocationKind::Http;
  if (location.starts_with("hf://")) return LocationKind::Hub;
  if (location.starts_with("s3://")) return LocationKind::S3;
  return LocationKind::Local;
}

Result<Location> parse_location(std::string_view text, bool local_exists) {
  Location loc;
  loc.text = std::string(text);
  if (text.empty()) return fail(bad(text, "empty").error());
  switch (classify_location(text)) {
    case LocationKind::Http: {
      loc.kind = LocationKind::Http;
      loc.url = std::string(text);
      if (url_authority(text).empty()) return fail(bad(text, "URL without a host").error());
      return loc;
    }
    case LocationKind::Hub: {
      auto hub = parse_hub(text, text.substr(5));
      if (!hub) return fail(hub.error());
      loc.kind = LocationKind::Hub;
      loc.hub = std::move(*hub);
      return loc;
    }
    case LocationKind::S3:
    case LocationKind::Azure:
      loc.kind = classify_location(text);
      loc.url = std::string(text);
      return loc;
    case LocationKind::Local:
      break;
  }
  if (!local_exists && looks_like_repo(text)) {
    auto hub = parse_hub(text, text);
    if (hub) {
      loc.kind = LocationKind::Hub;
      loc.hub = std::move(*hub);
      return loc;
    }
  }
  loc.kind = LocationKind::Local;
  loc.path = std::string(text);
  return loc;
}

std::string resolve_url(std::string_view endpoint, const HubRef& repo, std::string_view revision,
                        std::string_view path) {
  std::string url(endpoint);
  while (!url.empty() && url.back() == '/') url.pop_back();
  url += '/';
  if (repo.dataset) url += "datasets/";
  url += repo.repo_id;
  url += "/resolve/";
  url += percent_encode(revision);
  url += '/';
  url += encode_path(path);
  return url;
}

std::span<const std::string_view> checkpoint_candidates() noexcept {
  static constexpr std::array<std::string_view, 8> kCandidates{
      "model.safetensors",
      "model.safetensors.index.json",
      "transformer/diffusion_pytorch_model.safetensors",
      "transformer/diffusion_pytorch_model.safetensors.index.json",
      "unet/diffusion_pytorch_model.safetensors",
      "unet/diffusion_pytorch_model.safetensors.index.json",
      "diffusion_pytorch_model.safetensors",
      "diffusion_pytorch_model.safetensors.index.json",
  };
  return kCandidates;
}

bool is_index_path(std::string_view path) noexcept { return path.ends_with(".safetensors.index.json"); }

}  // namespace tensorfetch::detail
