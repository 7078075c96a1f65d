// SPDX-License-Identifier: Apache-2.0
#include "tensorfetch/error.hpp"

namespace tensorfetch {

std::string_view to_string(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::FileTooSmall: return "FileTooSmall";
    case ErrorCode::HeaderTooLarge: return "HeaderTooLarge";
    case ErrorCode::HeaderStart: return "HeaderStart";
    case ErrorCode::HeaderJson: return "HeaderJson";
    case ErrorCode::DuplicateKey: return "DuplicateKey";
    case ErrorCode::InvalidMetadata: return "InvalidMetadata";
    case ErrorCode::InvalidEntry: return "InvalidEntry";
    case ErrorCode::InvalidDtype: return "InvalidDtype";
    case ErrorCode::InvalidShape: return "InvalidShape";
    case ErrorCode::InvalidOffsets: return "InvalidOffsets";
    case ErrorCode::SizeMismatch: return "SizeMismatch";
    case ErrorCode::Overflow: return "Overflow";
    case ErrorCode::HoleOrOverlap: return "HoleOrOverlap";
    case ErrorCode::DataSizeMismatch: return "DataSizeMismatch";
    case ErrorCode::InvalidIndex: return "InvalidIndex";
    case ErrorCode::UnsafeShardName: return "UnsafeShardName";
    case ErrorCode::IndexMismatch: return "IndexMismatch";
    case ErrorCode::InvalidArgument: return "InvalidArgument";
    case ErrorCode::SliceOutOfRange: return "SliceOutOfRange";
    case ErrorCode::SliceMisaligned: return "SliceMisaligned";
    case ErrorCode::NotFound: return "NotFound";
    case ErrorCode::Io: return "Io";
    case ErrorCode::Cancelled: return "Cancelled";
    case ErrorCode::NotFetched: return "NotFetched";
    case ErrorCode::Network: return "Network";
    case ErrorCode::RemoteNotFound: return "RemoteNotFound";
    case ErrorCode::Unauthorized: return "Unauthorized";
    case ErrorCode::RateLimited: return "RateLimited";
    case ErrorCode::BadResponse: return "BadResponse";
    case ErrorCode::Integrity: return "Integrity";
    case ErrorCode::Busy: return "Busy";
    case ErrorCode::Unsplittable: return "Unsplittable";
  }
  return "Unknown";
}

int exit_code(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::FileTooSmall:
    case ErrorCode::HeaderTooLarge:
    case ErrorCode::HeaderStart:
    case ErrorCode::HeaderJson:
    case ErrorCode::DuplicateKey:
    case ErrorCode::InvalidMetadata:
    case ErrorCode::InvalidEntry:
    case ErrorCode::InvalidDtype:
    case ErrorCode::InvalidShape:
    case ErrorCode::InvalidOffsets:
    case ErrorCode::SizeMismatch:
    case ErrorCode::Overflow:
    case ErrorCode::HoleOrOverlap:
    case ErrorCode::DataSizeMismatch:
    case ErrorCode::InvalidIndex:
    case ErrorCode::UnsafeShardName:
    case ErrorCode::IndexMismatch:
      return 2;
    case ErrorCode::Network:
    case ErrorCode::RemoteNotFound:
    case ErrorCode::Unauthorized:
    case ErrorCode::RateLimited:
    case ErrorCode::BadResponse:
      return 3;
    case ErrorCode::Integrity:
      return 4;
    case ErrorCode::InvalidArgument:
    case ErrorCode::SliceOutOfRange:
    case ErrorCode::SliceMisaligned:
    case ErrorCode::NotFound:
    case ErrorCode::Io:
    case ErrorCode::Cancelled:
    case ErrorCode::NotFetched:
    case ErrorCode::Busy:
    case ErrorCode::Unsplittable:
      return 1;
  }
  return 1;
}

}  // namespace tensorfetch
