// SPDX-License-Identifier: Apache-2.0
// Progress display and Ctrl-C handling for commands that fetch.
#pragma once

#include <functional>
#include <string>

#include "tensorfetch/tensorfetch.hpp"

namespace tensorfetch::cli {

/// Human-readable size: "1.50 GB" (decimal units, as download tools print them).
std::string human_bytes(double bytes);

/// A progress callback for `FetchOptions::progress`: a one-line bar on stderr (bytes, percent,
/// rate, ETA, files) when stderr is a terminal and not `quiet`; otherwise silent. It also
/// returns false once SIGINT arrived (see `install_interrupt_handler`), which cancels the fetch.
std::function<bool(const FetchProgress&)> progress_callback(bool quiet);

/// Tells on stderr that a server asked for a wait (a rate limit): how long, why, and that
/// Ctrl-C stops it. Said once per wait, not once per parallel request that hit it.
ServerWaitCallback wait_notice();

/// Tells on stderr, as a warning, that the cache held stale bytes of a file (rewritten on the
/// server without its ETag changing), that they were retired and the file is fetched again.
/// Said even with -q: a warning, not progress.
StaleCacheCallback stale_cache_notice();

/// Ends the bar's line (if one was drawn).
void finish_progress();

/// Makes SIGINT/SIGTERM cancel `interrupt_token()` instead of killing the process, for the
/// whole run: every operation given the token (open, fetch, write) stops within about 100 ms
/// and cleans up (temporary output removed; fetched bytes that arrived whole stay committed).
/// A second signal kills the process as usual.
void install_interrupt_handler();

/// The token SIGINT/SIGTERM cancel: give it to every long operation of the run.
const CancelToken& interrupt_token();

/// The signal that interrupted the run (SIGINT or SIGTERM), or 0.
int interrupt_signal();

/// True after SIGINT/SIGTERM.
bool interrupted();

/// The exit status of a command that returned `code`: 128 + the signal when a signal stopped
/// it (130 for SIGINT, 143 for SIGTERM), else `code`. A command that completed despite a late
/// signal keeps its 0.
int exit_status(int code);

}  // namespace tensorfetch::cli
