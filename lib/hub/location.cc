// SPDX-License-Identifier: Apache-2.0
#include "hub/location.h"

#include <array>

namespace tensorfetch::detail {

LocationKind classify_location(std::string_view location) noexcept {
  if (location.starts_with("http://") || location.starts_with("https://")) return LocationKind::Http;
  if (location.starts_with("hf://")) return LocationKind::Hub;
  return LocationKind::Local;
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
