// SPDX-License-Identifier: Apache-2.0
/// @file
/// `TENSORFETCH_API`: marks the declarations the shared library exports. The library is built
/// with hidden visibility by default (`gnu_symbol_visibility: 'hidden'`), so everything not
/// marked — `tensorfetch::detail`, and the JSON, HTTP and crypto code it links — stays
/// private to `libtensorfetch.so`. Preprocessor only; safe to include from any header.
#pragma once

#if defined(__GNUC__) || defined(__clang__)
/// Exported from the shared library (default visibility).
#define TENSORFETCH_API __attribute__((visibility("default")))
#else
/// Exported from the shared library (no-op on this compiler).
#define TENSORFETCH_API
#endif
