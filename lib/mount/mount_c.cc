// SPDX-License-Identifier: Apache-2.0
// The mount's C entry points (tf_mount_*, tf_unmount in include/tensorfetch/tensorfetch.h), in
// libtensorfetch_mount beside the C++ Mount they drive, so that libtensorfetch never needs
// libfuse. They take a tf_checkpoint that libtensorfetch's tf_open made and hand out tf_errors
// that its tf_error_free frees: both handles are defined once, in checkpoint/c_handles.h. As in
// lib/capi, every entry point is noexcept and no exception reaches C.
#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <thread>

#include "checkpoint/c_handles.h"
#include "tensorfetch/mount.hpp"
#include "tensorfetch/tensorfetch.h"

/// A running mount handed to C: the Mount, the thread serving it, and how the serving ended.
struct tf_mount {
  std::unique_ptr<tensorfetch::Mount> mount;
  std::thread thread;
  tensorfetch::Result<void> outcome;  // set by `thread` before it ends
};

namespace {

// Stores a new error in `*err` (when err is not NULL) and returns its code. Out of memory: the
// code alone (no error to hand out).
tf_code store_error(tf_error** err, tf_code code, std::string_view message) noexcept {
  if (err == nullptr) return code;
  try {
    *err = new tf_error{code, std::string(message)};
  } catch (...) {
    *err = nullptr;
  }
  return code;
}

tf_code store_error(tf_error** err, const tensorfetch::Error& e) noexcept {
  return store_error(err, tensorfetch::capi::to_c(e.code), e.message);
}

template <class Body>
tf_code guarded(tf_error** err, Body&& body) noexcept {
  try {
    return std::forward<Body>(body)();
  } catch (const std::bad_alloc&) {
    return store_error(err, TF_ERR_INTERNAL, "out of memory");
  } catch (const std::exception& e) {
    return store_error(err, TF_ERR_INTERNAL, std::string("unexpected failure: ") + e.what());
  } catch (...) {
    return store_error(err, TF_ERR_INTERNAL, "unexpected failure");
  }
}

}  // namespace

extern "C" {

void tf_mount_options_init(tf_mount_options* options) noexcept {
  if (options == nullptr) return;
  *options = tf_mount_options{};
  options->size = sizeof(tf_mount_options);
}

void tf_mount_stats_init(tf_mount_stats* stats) noexcept {
  if (stats == nullptr) return;
  *stats = tf_mount_stats{};
  stats->size = sizeof(tf_mount_stats);
}

tf_code tf_mount_start(tf_checkpoint** checkpoint, const char* dir, const tf_mount_options* options, tf_mount** out,
                       tf_error** err) noexcept {
  if (err != nullptr) *err = nullptr;
  return guarded(err, [&]() -> tf_code {
    if (checkpoint == nullptr || *checkpoint == nullptr || dir == nullptr || out == nullptr) {
      return store_error(err, TF_ERR_INVALID_ARGUMENT, "tf_mount_start: checkpoint, dir and out must not be NULL");
    }
    *out = nullptr;
    // The fields the caller's struct holds (a caller built against an older header has fewer).
    tf_mount_options o;
    tf_mount_options_init(&o);
    if (options != nullptr) {
      if (options->size < sizeof(size_t)) {
        return store_error(err, TF_ERR_INVALID_ARGUMENT, "tf_mount_start: options->size is not set "
                                                         "(use tf_mount_options_init)");
      }
      std::memcpy(&o, options, std::min(options->size, sizeof o));
      o.size = sizeof o;
    }
    tensorfetch::MountOptions mo;
    if (o.tensor_window != 0) mo.tensor_window = o.tensor_window;
    if (o.small_file != 0) mo.small_file = o.small_file;
    if (o.connections != 0) mo.fetch.connections = o.connections;
    if (o.chunk_size != 0) mo.fetch.chunk_size = o.chunk_size;
    if (o.max_threads != 0) mo.max_threads = o.max_threads;
    if (o.log != nullptr) {
      mo.log = [fn = o.log, user = o.log_user](std::string_view line) {
        const std::string text(line);
        fn(user, text.c_str());
      };
    }
    // The checkpoint is taken in every case (Mount::create consumes it).
    std::unique_ptr<tf_checkpoint> taken(*checkpoint);
    *checkpoint = nullptr;
    auto mounted = tensorfetch::Mount::create(std::move(taken->checkpoint), dir, mo);
    taken.reset();
    if (!mounted) return store_error(err, mounted.error());
    auto handle = std::make_unique<tf_mount>();
    handle->mount = std::move(*mounted);
    tf_mount* h = handle.get();
    handle->thread = std::thread([h] { h->outcome = h->mount->run(); });
    *out = handle.release();
    return TF_OK;
  });
}

void tf_mount_get_stats(const tf_mount* mount, tf_mount_stats* stats) noexcept {
  if (mount == nullptr || stats == nullptr || stats->size < sizeof(size_t)) return;
  const tensorfetch::MountStats s = mount->mount->stats();
  tf_mount_stats all;
  tf_mount_stats_init(&all);
  all.reads = s.reads;
  all.read_errors = s.read_errors;
  all.bytes_read = s.bytes_read;
  all.bytes_fetched = s.bytes_fetched;
  all.bytes_from_cache = s.bytes_from_cache;
  all.bytes_in_flight = s.bytes_in_flight;
  all.fetches = s.fetches;
  const std::size_t size = stats->size;
  std::memcpy(stats, &all, std::min(size, sizeof all));
  stats->size = size;
}

tf_code tf_mount_stop(tf_mount* mount, tf_error** err) noexcept {
  if (err != nullptr) *err = nullptr;
  if (mount == nullptr) return TF_OK;
  return guarded(err, [&]() -> tf_code {
    std::unique_ptr<tf_mount> owned(mount);
    owned->mount->exit();
    if (owned->thread.joinable()) owned->thread.join();
    const auto outcome = std::move(owned->outcome);
    owned.reset();  // (unmounts, should the loop have ended without)
    if (!outcome) return store_error(err, outcome.error());
    return TF_OK;
  });
}

tf_code tf_unmount(const char* dir, tf_error** err) noexcept {
  if (err != nullptr) *err = nullptr;
  return guarded(err, [&]() -> tf_code {
    if (dir == nullptr) return store_error(err, TF_ERR_INVALID_ARGUMENT, "tf_unmount: dir must not be NULL");
    if (auto r = tensorfetch::unmount(dir); !r) return store_error(err, r.error());
    return TF_OK;
  });
}

}  // extern "C"
