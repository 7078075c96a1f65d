// SPDX-License-Identifier: Apache-2.0
#include "env.hpp"

#include <cstdlib>

namespace tftest {

namespace {

void apply(const std::string& name, const std::optional<std::string>& value) {
  if (value) {
    ::setenv(name.c_str(), value->c_str(), 1);
  } else {
    ::unsetenv(name.c_str());
  }
}

}  // namespace

ScopedEnv::~ScopedEnv() {
  for (const auto& [name, value] : saved_) apply(name, value);
}

void ScopedEnv::set(const std::string& name, const std::optional<std::string>& value) {
  if (!saved_.contains(name)) {
    const char* old = std::getenv(name.c_str());
    saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
  }
  apply(name, value);
}

std::function<std::optional<std::string>(const char* name)> env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

}  // namespace tftest
