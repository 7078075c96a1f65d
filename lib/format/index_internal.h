// SPDX-License-Identifier: Apache-2.0
// Private: what an index tells about its shards before any shard is read.
#pragma once

#include <cstdint>
#include <vector>

#include "tensorfetch/index.hpp"

namespace tensorfetch::detail {

/// Bytes a tensor entry of a header takes besides its name, at most, in practice: quotes, the
/// dtype, a shape of up to 4 dimensions of 7 digits, two offsets of 14 digits, punctuation.
inline constexpr std::uint64_t kHeaderBytesPerTensor = 160;
/// Room for `__metadata__` and padding in an estimated header.
inline constexpr std::uint64_t kHeaderMetadataRoom = 8 << 10;
/// Smallest first read an estimate asks for.
inline constexpr std::uint64_t kMinHeaderEstimate = 16 << 10;

/// For each of `index.shards`, in order: the bytes of its file's start (the 8-byte length and
/// the JSON header) a first read should ask for to hold the whole header, estimated from the
/// names the index maps to that shard: per tensor its name plus `kHeaderBytesPerTensor`, plus
/// `kHeaderMetadataRoom`, a quarter more, rounded up to 4 KiB, at least `kMinHeaderEstimate`.
/// A header larger than that (long metadata, tensors the index does not list) costs one more
/// read of the rest; a smaller first read keeps the open's requests, on one multiplexed
/// connection, from moving tensor bytes before every header has arrived. Pure.
[[nodiscard]] std::vector<std::uint64_t> estimate_shard_header_sizes(const ShardIndex& index);

}  // namespace tensorfetch::detail
