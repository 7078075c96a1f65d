// SPDX-License-Identifier: Apache-2.0
// Private: the C API's handles (tf_error, tf_checkpoint) and its mapping of codes, shared by
// the two C bindings -- lib/capi (libtensorfetch.so) and the mount's C entry points
// (lib/mount/mount_c.cc, libtensorfetch_mount.so) -- so that a tf_checkpoint made by tf_open can
// be mounted, and a tf_error made by either is freed by tf_error_free. Kept in the checkpoint
// layer: the lowest one both see.
#pragma once

#include <mutex>
#include <string>
#include <utility>

#include "tensorfetch/checkpoint.hpp"
#include "tensorfetch/error.hpp"
#include "tensorfetch/tensorfetch.h"

/// An error handed to C: owned by the caller until tf_error_free.
struct tf_error {
  tf_code code;
  std::string message;
};

/// A checkpoint handed to C: the C++ object, plus what serializes fetches and cancels them.
struct tf_checkpoint {
  explicit tf_checkpoint(tensorfetch::Checkpoint c) : checkpoint(std::move(c)) {}
  tensorfetch::Checkpoint checkpoint;
  mutable std::mutex fetch_mutex;   // one fetch (or save) at a time; not logical state
  // Set by tf_cancel (lock-free: CancelToken), consumed by the fetch it stops.
  const tensorfetch::CancelToken cancel = tensorfetch::CancelToken::make();
};

namespace tensorfetch::capi {

// Every C++ code with its C name; the C value is TF_ERR_<UPPER>. Kept in one list so that the
// three mappings (to_c below; from_c and c_name in lib/capi) cannot disagree.
#define TF_CODE_LIST(X)                                \
  X(FileTooSmall, TF_ERR_FILE_TOO_SMALL)               \
  X(HeaderTooLarge, TF_ERR_HEADER_TOO_LARGE)           \
  X(HeaderStart, TF_ERR_HEADER_START)                  \
  X(HeaderJson, TF_ERR_HEADER_JSON)                    \
  X(DuplicateKey, TF_ERR_DUPLICATE_KEY)                \
  X(InvalidMetadata, TF_ERR_INVALID_METADATA)          \
  X(InvalidEntry, TF_ERR_INVALID_ENTRY)                \
  X(InvalidDtype, TF_ERR_INVALID_DTYPE)                \
  X(InvalidShape, TF_ERR_INVALID_SHAPE)                \
  X(InvalidOffsets, TF_ERR_INVALID_OFFSETS)            \
  X(SizeMismatch, TF_ERR_SIZE_MISMATCH)                \
  X(Overflow, TF_ERR_OVERFLOW)                         \
  X(HoleOrOverlap, TF_ERR_HOLE_OR_OVERLAP)             \
  X(DataSizeMismatch, TF_ERR_DATA_SIZE_MISMATCH)       \
  X(InvalidIndex, TF_ERR_INVALID_INDEX)                \
  X(UnsafeShardName, TF_ERR_UNSAFE_SHARD_NAME)         \
  X(IndexMismatch, TF_ERR_INDEX_MISMATCH)              \
  X(InvalidArgument, TF_ERR_INVALID_ARGUMENT)          \
  X(SliceOutOfRange, TF_ERR_SLICE_OUT_OF_RANGE)        \
  X(SliceMisaligned, TF_ERR_SLICE_MISALIGNED)          \
  X(NotFound, TF_ERR_NOT_FOUND)                        \
  X(Io, TF_ERR_IO)                                     \
  X(Cancelled, TF_ERR_CANCELLED)                       \
  X(NotFetched, TF_ERR_NOT_FETCHED)                    \
  X(Network, TF_ERR_NETWORK)                           \
  X(RemoteNotFound, TF_ERR_REMOTE_NOT_FOUND)           \
  X(Unauthorized, TF_ERR_UNAUTHORIZED)                 \
  X(RateLimited, TF_ERR_RATE_LIMITED)                  \
  X(BadResponse, TF_ERR_BAD_RESPONSE)                  \
  X(Integrity, TF_ERR_INTEGRITY)                       \
  X(Busy, TF_ERR_BUSY)                                 \
  X(Unsplittable, TF_ERR_UNSPLITTABLE)

inline tf_code to_c(ErrorCode code) noexcept {
  switch (code) {
#define TF_TO_C(cpp, c) \
  case ErrorCode::cpp:  \
    return c;
    TF_CODE_LIST(TF_TO_C)
#undef TF_TO_C
  }
  return TF_ERR_INTERNAL;
}

}  // namespace tensorfetch::capi
