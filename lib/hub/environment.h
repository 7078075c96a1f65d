// SPDX-License-Identifier: Apache-2.0
// Private: the Hugging Face environment, read as huggingface_hub reads it, so that a user's
// existing setup (token, cache, offline switch) works unchanged:
//
//   endpoint   HF_ENDPOINT, else https://huggingface.co
//   token      HF_TOKEN, else HUGGING_FACE_HUB_TOKEN (legacy), else the file HF_TOKEN_PATH
//              (default $HF_HOME/token); surrounding whitespace trimmed, empty = none
//   HF_HOME    HF_HOME, else $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface
//   hub cache  HF_HUB_CACHE, else HUGGINGFACE_HUB_CACHE (legacy), else $HF_HOME/hub
//   offline    HF_HUB_OFFLINE, else TRANSFORMERS_OFFLINE: 1, true, yes, on (any case)
//
// A token is sent in an HTTP header, so one with a control character (a pasted "\r\nX: y")
// is refused, naming where it came from and never printing it.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "base/env.h"
#include "tensorfetch/error.hpp"

namespace tensorfetch::detail {

/// A token and where it came from ("HF_TOKEN", "the file /root/.cache/huggingface/token", ...).
struct HubToken {
  std::string value;   ///< never empty
  std::string source;  ///< for messages; never the token itself
};

/// The Hugging Face settings of this process. A plain value.
struct HubEnvironment {
  std::string endpoint;           ///< without a trailing slash
  std::optional<HubToken> token;  ///< none: anonymous
  std::string hf_home;            ///< "" when neither HF_HOME, XDG_CACHE_HOME nor HOME is set
  std::string hub_cache;          ///< "" likewise
  bool offline = false;           ///< HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE
};

/// Reads the environment through `env` (and the token file, if that is where the token is).
/// A token with control characters or inner whitespace is an `InvalidArgument` error naming
/// its source. A token file that exists but cannot be read is an `Io` error. With
/// `read_token` false (a token was given explicitly), no token variable or file is looked at.
[[nodiscard]] Result<HubEnvironment> read_hub_environment(const EnvLookup& env, bool read_token = true);

/// Checks a token given explicitly (an option, the C API) or read from `source`: no control
/// character, space or non-ASCII byte (HTTP header values must not carry them). Never echoes it.
[[nodiscard]] Result<void> check_token(std::string_view token, std::string_view source);

/// True for the values huggingface_hub treats as true: 1, true, yes, on (ASCII, any case).
[[nodiscard]] bool env_true(std::string_view value) noexcept;

}  // namespace tensorfetch::detail
