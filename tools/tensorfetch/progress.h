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

/// Ends the bar's line (if one was drawn).
void finish_progress();

/// Makes SIGINT/SIGTERM cancel a running fetch (cleanly: what arrived whole stays committed)
/// instead of killing the process.
void install_interrupt_handler();

/// True after SIGINT/SIGTERM.
bool interrupted();

}  // namespace tensorfetch::cli
