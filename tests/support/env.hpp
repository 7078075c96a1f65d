// SPDX-License-Identifier: Apache-2.0
// Shared by every test suite: environment variables set or removed for a scope.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>

namespace tftest {

/// An environment lookup over `vars` only (the library's `detail::EnvLookup`): the readers of
/// the environment (the Hub's settings, AWS credentials and endpoints) see exactly these.
std::function<std::optional<std::string>(const char* name)> env_of(std::map<std::string, std::string> vars);

/// Sets or removes environment variables for the life of the object, then restores each to
/// what it was before the first change (set again, or removed). Not thread-safe (setenv is
/// not): use it where no other thread of the test reads the environment.
class ScopedEnv {
 public:
  /// Nothing changed yet.
  ScopedEnv() = default;
  /// Sets one variable at once.
  ScopedEnv(const std::string& name, const std::string& value) { set(name, value); }
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

  /// Sets `name` to `value`, or removes it when `value` is nothing.
  void set(const std::string& name, const std::optional<std::string>& value);
  /// Removes `name`.
  void unset(const std::string& name) { set(name, std::nullopt); }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

}  // namespace tftest
