// SPDX-License-Identifier: Apache-2.0
/// @file
/// Cancellation of long operations (opening, fetching, writing): a flag the caller sets, which
/// the operations given it check while they run, also while a transfer is stalled.
#pragma once

#include <atomic>
#include <memory>
#include <utility>

namespace tensorfetch {

/// A request to stop, shared between the caller and the operations it is passed to
/// (`OpenOptions::cancel`, `FetchOptions::cancel`, `WriteOptions::cancel`). Copies share one
/// flag. Once cancelled, an operation given the token stops within about 100 ms (also while
/// a transfer is stalled or waiting for a retry) and fails with `ErrorCode::Cancelled`,
/// keeping what a fetch received whole and leaving no temporary output behind.
///
/// A default-constructed token can never be cancelled (and costs nothing); `make()` creates one
/// that can. `cancel()`, `cancelled()` and `reset()` are lock-free atomic operations: any thread
/// may call them, and so may a signal handler (on a token that stays alive meanwhile).
class CancelToken {
 public:
  /// A token that is never cancelled: `cancel()` on it does nothing.
  CancelToken() noexcept = default;

  /// A new token that can be cancelled, through it or any of its copies.
  [[nodiscard]] static CancelToken make() { return CancelToken(std::make_shared<std::atomic<bool>>(false)); }

  /// Requests cancellation. Async-signal-safe.
  void cancel() const noexcept {
    if (flag_) flag_->store(true, std::memory_order_release);
  }

  /// True once `cancel()` was called (and not reset since).
  [[nodiscard]] bool cancelled() const noexcept { return flag_ && flag_->load(std::memory_order_acquire); }

  /// Clears a cancellation, so that the token can serve the next operation.
  void reset() const noexcept {
    if (flag_) flag_->store(false, std::memory_order_release);
  }

  /// True when the token can be cancelled (made by `make()`); operations then poll it.
  [[nodiscard]] bool cancellable() const noexcept { return flag_ != nullptr; }

 private:
  static_assert(std::atomic<bool>::is_always_lock_free, "a signal handler may cancel a token");
  explicit CancelToken(std::shared_ptr<std::atomic<bool>> flag) noexcept : flag_(std::move(flag)) {}
  std::shared_ptr<std::atomic<bool>> flag_;
};

}  // namespace tensorfetch
