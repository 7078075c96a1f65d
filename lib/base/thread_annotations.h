// SPDX-License-Identifier: Apache-2.0
// Private: clang's thread-safety annotations (-Wthread-safety), and a mutex that carries them.
//
// Under clang, lib/ is compiled with -Werror=thread-safety (lib/meson.build; CI's clang build is
// the fuzz build of tools/test.sh), so a member declared TF_GUARDED_BY(m) that is read or
// written without holding `m` fails the build. Under GCC the macros are empty.
//
// libstdc++'s std::mutex carries no annotations, so guarded state uses detail::Mutex and
// detail::MutexLock below (std::mutex and std::lock_guard with the annotations clang needs).
#pragma once

#include <mutex>

#if defined(__clang__)
#define TF_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define TF_THREAD_ANNOTATION(x)
#endif

/// A class that is a lock (a "capability" in clang's terms).
#define TF_CAPABILITY(name) TF_THREAD_ANNOTATION(capability(name))
/// An RAII class that holds a capability for its lifetime.
#define TF_SCOPED_CAPABILITY TF_THREAD_ANNOTATION(scoped_lockable)
/// A member that may only be read or written while holding `m`.
#define TF_GUARDED_BY(m) TF_THREAD_ANNOTATION(guarded_by(m))
/// A pointer member whose pointee may only be used while holding `m`.
#define TF_PT_GUARDED_BY(m) TF_THREAD_ANNOTATION(pt_guarded_by(m))
/// A function that must be called with `...` held (and leaves them held).
#define TF_REQUIRES(...) TF_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
/// A function that must be called without `...` held (it takes them itself).
#define TF_EXCLUDES(...) TF_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
/// A function that acquires `...` (or the object itself, for a lock's own `lock()`).
#define TF_ACQUIRE(...) TF_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
/// A function that releases `...` (or the object itself).
#define TF_RELEASE(...) TF_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
/// Turns the analysis off for one function; say why next to it.
#define TF_NO_THREAD_SAFETY_ANALYSIS TF_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace tensorfetch::detail {

/// std::mutex, annotated as a capability.
class TF_CAPABILITY("mutex") Mutex {
 public:
  /// Blocks until the mutex is held.
  void lock() TF_ACQUIRE() { m_.lock(); }
  /// Releases it.
  void unlock() TF_RELEASE() { m_.unlock(); }

 private:
  std::mutex m_;
};

/// std::lock_guard for Mutex, annotated: holds the mutex from construction to destruction.
class TF_SCOPED_CAPABILITY MutexLock {
 public:
  /// Locks `m`.
  explicit MutexLock(Mutex& m) TF_ACQUIRE(m) : m_(m) { m_.lock(); }
  /// Unlocks it.
  ~MutexLock() TF_RELEASE() { m_.unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& m_;
};

}  // namespace tensorfetch::detail
