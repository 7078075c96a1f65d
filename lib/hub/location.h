// SPDX-License-Identifier: Apache-2.0
// Private: what a location string names, resolve URLs, and where a checkpoint lives in a
// directory or repo. Pure; no I/O.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "tensorfetch/error.hpp"

namespace tensorfetch::detail {

/// The kinds of location a user may give.
enum class LocationKind {
  Local,  ///< a path on this machine
  Http,   ///< http:// or https:// URL of a .safetensors file or an index
  Hub,    ///< a Hugging Face Hub repo: hf://ORG/NAME[@REV][/PATH] or a bare ORG/NAME
  S3,     ///< s3://BUCKET/KEY or s3://BUCKET/PREFIX/ (parsed by the store layer: store/s3.h)
  /// az://ACCOUNT/CONTAINER/PATH or https://ACCOUNT.blob.core.windows.net/CONTAINER/PATH
  /// (parsed by the store layer: store/azure.h)
  Azure,
};

/// A Hub repo and what in it.
struct HubRef {
  bool dataset = false;              ///< hf://datasets/...
  std::string repo_id;               ///< ORG/NAME
  std::string revision = "main";     ///< branch, tag, commit or refs/pr/N (decoded)
  std::optional<std::string> path;   ///< file in the repo, if given
};

/// A parsed location. A plain value.
struct Location {
  LocationKind kind = LocationKind::Local;
  std::string text;  ///< as given
  std::string path;  ///< Local: the path
  std::string url;   ///< Http: the URL; S3, Azure: the location as given
  HubRef hub;        ///< Hub: the repo
};

/// Parses a location. `local_exists(text)` tells whether a bare `ORG/NAME` names something on
/// disk (then it is a local path). Errors (`InvalidArgument`) name the location and the part
/// that is wrong: an unsafe path, an invalid repo id, an empty revision.
[[nodiscard]] Result<Location> parse_location(std::string_view text, bool local_exists);

/// Checks a revision (branch, tag, commit or `refs/pr/N`) by git's ref-name rules, before it
/// becomes part of a URL or a path (`refs/REV` in the Hugging Face cache): not empty; no empty,
/// `.`-starting or `.lock`-ending `/`-separated part; no `..`, `@{`, control character, space
/// or any of `~^:?*[\`; not `@`; no trailing `/` or `.`. `InvalidArgument` saying which. Pure.
[[nodiscard]] Result<void> check_revision(std::string_view revision);

/// Classifies a location by its form alone.
[[nodiscard]] LocationKind classify_location(std::string_view location) noexcept;

/// `{endpoint}/[datasets/]{repo}/resolve/{encoded revision}/{encoded path}`; each path segment
/// percent-encoded, the revision encoded whole (`refs/pr/1` -> `refs%2Fpr%2F1`).
[[nodiscard]] std::string resolve_url(std::string_view endpoint, const HubRef& repo,
                                      std::string_view revision, std::string_view path);

/// Files that make a directory (or repo without PATH) a checkpoint, in order of preference:
/// `model.safetensors`, `model.safetensors.index.json`, then the diffusers layouts.
[[nodiscard]] std::span<const std::string_view> checkpoint_candidates() noexcept;

/// True when `path` names an index (`*.safetensors.index.json`).
[[nodiscard]] bool is_index_path(std::string_view path) noexcept;

}  // namespace tensorfetch::detail
