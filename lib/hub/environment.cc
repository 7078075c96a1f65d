// SPDX-License-Identifier: Apache-2.0
#include "hub/environment.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace tensorfetch::detail {

namespace {

std::string_view trim_space(std::string_view s) {
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

std::string get(const EnvLookup& env, const char* name) { return env(name).value_or(std::string()); }

}  // namespace

bool env_true(std::string_view value) noexcept {
  value = trim_space(value);
  auto is = [&](std::string_view word) {
    if (value.size() != word.size()) return false;
    for (std::size_t i = 0; i < word.size(); ++i) {
      char c = value[i];
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      if (c != word[i]) return false;
    }
    return true;
  };
  return is("1") || is("true") || is("yes") || is("on");
}

Result<void> check_token(std::string_view token, std::string_view source) {
  for (std::size_t i = 0; i < token.size(); ++i) {
    const auto c = static_cast<unsigned char>(token[i]);
    if (c < 0x21 || c > 0x7e) {
      const char* what = c == '\r' || c == '\n' ? "a control character (a line break)"
                         : c == ' '               ? "a space"
                         : c < 0x20 || c == 0x7f ? "a control character"
                                                 : "a non-ASCII byte";
      return fail(ErrorCode::InvalidArgument,
                  "the Hugging Face token from " + std::string(source) + " contains " + what + " (at character " +
                      std::to_string(i + 1) + " of " + std::to_string(token.size()) +
                      "); it would corrupt the HTTP request, so it is not sent. Check how it was copied");
    }
  }
  return {};
}

Result<HubEnvironment> read_hub_environment(const EnvLookup& env, bool read_token) {
  HubEnvironment out;
  out.endpoint = get(env, "HF_ENDPOINT");
  if (out.endpoint.empty()) out.endpoint = "https://huggingface.co";
  while (out.endpoint.size() > 1 && out.endpoint.back() == '/') out.endpoint.pop_back();

  out.hf_home = get(env, "HF_HOME");
  if (out.hf_home.empty()) {
    if (auto xdg = get(env, "XDG_CACHE_HOME"); !xdg.empty()) {
      out.hf_home = xdg + "/huggingface";
    } else if (auto home = get(env, "HOME"); !home.empty()) {
      out.hf_home = home + "/.cache/huggingface";
    }
  }
  out.hub_cache = get(env, "HF_HUB_CACHE");
  if (out.hub_cache.empty()) out.hub_cache = get(env, "HUGGINGFACE_HUB_CACHE");
  if (out.hub_cache.empty() && !out.hf_home.empty()) out.hub_cache = out.hf_home + "/hub";

  const std::string offline = get(env, "HF_HUB_OFFLINE");
  out.offline = env_true(offline.empty() ? get(env, "TRANSFORMERS_OFFLINE") : offline);

  // The token: the first non-empty of HF_TOKEN, HUGGING_FACE_HUB_TOKEN, the token file.
  if (!read_token) return out;
  for (const char* name : {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"}) {
    const std::string value(trim_space(get(env, name)));
    if (value.empty()) continue;
    if (auto r = check_token(value, name); !r) return fail(r.error());
    out.token = HubToken{value, name};
    return out;
  }
  std::string path = get(env, "HF_TOKEN_PATH");
  const bool explicit_path = !path.empty();
  if (path.empty() && !out.hf_home.empty()) path = out.hf_home + "/token";
  if (path.empty()) return out;
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) return out;  // no token file: anonymous
    return fail(ErrorCode::Io, path + ": cannot read the Hugging Face token file" +
                                   std::string(explicit_path ? " (HF_TOKEN_PATH)" : "") + ": " + std::strerror(err));
  }
  std::ostringstream text;
  text << f.rdbuf();
  const std::string value(trim_space(text.str()));
  if (value.empty()) return out;
  const std::string source = "the file " + path + (explicit_path ? " (HF_TOKEN_PATH)" : "");
  if (auto r = check_token(value, source); !r) return fail(r.error());
  out.token = HubToken{value, source};
  return out;
}

}  // namespace tensorfetch::detail
