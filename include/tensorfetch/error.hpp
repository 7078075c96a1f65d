// SPDX-License-Identifier: Apache-2.0
/// @file
/// Errors as values: every fallible call in tensorfetch returns `Result<T>`, which holds
/// either a `T` or an `Error{code, message}`. Exceptions never cross the library boundary.
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include <tl/expected.hpp>

#include "tensorfetch/export.hpp"

namespace tensorfetch {

/// What went wrong, grouped by the exit code the CLI maps it to (see `exit_code()`).
enum class ErrorCode {
  // --- the file is not valid safetensors, or the index is bad (exit 2) ---
  FileTooSmall,       ///< fewer than 8 bytes, or 8 + N beyond the end of the file
  HeaderTooLarge,     ///< N above the 100,000,000-byte cap
  HeaderStart,        ///< the header does not start with `{`
  HeaderJson,         ///< not well-formed UTF-8 JSON, or trailing bytes other than whitespace
  DuplicateKey,       ///< the same key twice in one JSON object
  InvalidMetadata,    ///< `__metadata__` is not an object of strings (or null)
  InvalidEntry,       ///< a tensor entry is not an object or misses a field
  InvalidDtype,       ///< unknown dtype string
  InvalidShape,       ///< shape is not an array of non-negative integers
  InvalidOffsets,     ///< data_offsets is not two non-negative integers with begin <= end
  SizeMismatch,       ///< elements x bits does not equal 8 x (end - begin), or is not whole bytes
  Overflow,           ///< a size computation overflows 64 bits
  HoleOrOverlap,      ///< tensors do not tile the data section from 0 without gaps or overlaps
  DataSizeMismatch,   ///< the last tensor does not end exactly at the end of the file
  InvalidIndex,       ///< an index file that is not a valid `*.safetensors.index.json`
  UnsafeShardName,    ///< an index names a shard with a path that could escape its directory
  IndexMismatch,      ///< the index and the shard headers disagree
  // --- usage or other (exit 1) ---
  InvalidArgument,    ///< a bad option, pattern, or slice from the caller
  SliceOutOfRange,    ///< a slice index outside the tensor's shape, or start > stop
  SliceMisaligned,    ///< a slice of a sub-byte dtype that does not start/end on a byte
  NotFound,           ///< a local file, or a tensor name, that does not exist
  Io,                 ///< a local read or write failed (including a full disk)
  Cancelled,          ///< the caller cancelled the operation (a progress callback said stop)
  NotFetched,         ///< a remote tensor's bytes are not (yet) in the local cache
  // --- network or remote (exit 3) ---
  Network,            ///< connection, TLS, timeout or protocol failure (after retries)
  RemoteNotFound,     ///< repo, revision or file not found on the server
  Unauthorized,       ///< 401/403 or a gated repo: a token is missing or not accepted
  RateLimited,        ///< 429 (or 503) still answered after every retry
  BadResponse,        ///< a response that breaks the protocol (wrong Content-Range, too long)
  // --- integrity (exit 4) ---
  Integrity,          ///< a hash mismatch, or the source changed during the read
  // --- added later, at the end so that no value above changes (exit code per code) ---
  Busy,               ///< a cache blob another process has open (it is not removed); exit 1
  Unsplittable,       ///< a tensor that tensor parallelism cannot split as asked (fused or unknown
                      ///< layout, a dimension that does not divide, no rule): exit 1
};

/// The stable, machine-readable name of a code, e.g. "HoleOrOverlap".
[[nodiscard]] TENSORFETCH_API std::string_view to_string(ErrorCode code) noexcept;

/// The CLI exit code for an error code: 2 format/index, 3 network, 4 integrity, else 1
/// (`Busy` and `Unsplittable` included).
[[nodiscard]] TENSORFETCH_API int exit_code(ErrorCode code) noexcept;

/// An error: a code and a message that names the file, tensor and byte range involved.
/// A plain value; copy it freely.
struct Error {
  ErrorCode code;       ///< the kind of failure
  std::string message;  ///< human-readable, self-contained description

  /// Returns a copy whose message is prefixed with `context: ` (e.g. a file path).
  [[nodiscard]] Error with_context(std::string_view context) const {
    return Error{code, std::string(context) + ": " + message};
  }
};

/// A value of type `T` or an `Error`. Check it before use: `if (!r) return r.error();`.
template <class T>
using Result = tl::expected<T, Error>;

/// Builds the error side of a `Result`: `return fail(ErrorCode::Io, "...")`.
[[nodiscard]] inline tl::unexpected<Error> fail(ErrorCode code, std::string message) {
  return tl::unexpected<Error>(Error{code, std::move(message)});
}

/// Wraps an existing `Error` for returning through a `Result`.
[[nodiscard]] inline tl::unexpected<Error> fail(Error error) {
  return tl::unexpected<Error>(std::move(error));
}

}  // namespace tensorfetch
