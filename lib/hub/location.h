// SPDX-License-Identifier: Apache-2.0
// Private: what a location string names, and where a directory's checkpoint lives.
// Pure; no I/O.
#pragma once

#include <span>
#include <string_view>

namespace tensorfetch::detail {

/// The kinds of location a user may give.
enum class LocationKind {
  Local,  ///< a path on this machine
  Http,   ///< http:// or https://
  Hub,    ///< hf://ORG/NAME... (a bare ORG/NAME that is not a local path is also the Hub)
};

/// Classifies a location by its form alone (a bare `ORG/NAME` counts as Local here; the
/// caller decides after looking at the disk).
[[nodiscard]] LocationKind classify_location(std::string_view location) noexcept;

/// Files that make a directory (or repo without PATH) a checkpoint, in order of preference:
/// `model.safetensors`, `model.safetensors.index.json`, then the diffusers layouts.
[[nodiscard]] std::span<const std::string_view> checkpoint_candidates() noexcept;

/// True when `path` names an index (`*.safetensors.index.json`).
[[nodiscard]] bool is_index_path(std::string_view path) noexcept;

}  // namespace tensorfetch::detail
