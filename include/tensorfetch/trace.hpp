// SPDX-License-Identifier: Apache-2.0
/// @file
/// A timeline of what tensorfetch does in this process -- opens, every HTTP request with its
/// connect, TLS, first-byte and receive times, every data connection, the fetch's flow-control
/// decisions, commits and fsyncs, writing the output -- as a Chrome trace-event JSON file that
/// Perfetto (ui.perfetto.dev) or `chrome://tracing` shows. `tensorfetch --trace FILE` records
/// one for any command.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "tensorfetch/error.hpp"
#include "tensorfetch/export.hpp"

namespace tensorfetch {

/// Starts recording the timeline of this process's tensorfetch work (every thread, every
/// checkpoint), to be written to `path` by `trace_stop`. One trace at a time per process: a
/// second start is `InvalidArgument`, and so is an empty path. Nothing is written yet (the file
/// is made by `trace_stop`). Thread-safe. Recording costs a little time per request and per
/// chunk; off (the default), one atomic load.
[[nodiscard]] TENSORFETCH_API Result<void> trace_start(const std::string& path);

/// Stops recording and writes the events as Chrome trace-event JSON (`{"traceEvents": [...]}`,
/// times in microseconds from `trace_start`) to the path given there, replaced atomically. No
/// trace running: `InvalidArgument`; the file cannot be written: `Io`, naming it. Thread-safe.
[[nodiscard]] TENSORFETCH_API Result<void> trace_stop();

/// True while a trace is recorded. Thread-safe.
[[nodiscard]] TENSORFETCH_API bool trace_on() noexcept;

/// Adds a span of the caller's own work to the running trace (ignored when none runs), on the
/// calling thread's row: e.g. a program's start-up before its first call, or its own output.
/// `category` groups spans (tensorfetch uses open, http, fetch, commit, write, flows, cli).
/// Thread-safe.
TENSORFETCH_API void trace_span(std::string_view name, std::string_view category,
                                std::chrono::steady_clock::time_point start,
                                std::chrono::steady_clock::time_point end);

}  // namespace tensorfetch
