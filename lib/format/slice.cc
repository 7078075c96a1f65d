// SPDX-License-Identifier: Apache-2.0
// Slices (get_slice semantics) to minimal contiguous byte ranges. No I/O.
#include <charconv>

#include "base/text.h"
#include "tensorfetch/slice.hpp"

namespace tensorfetch {

namespace {

// Most byte ranges one slice may resolve to (each row of a column slice is one range).
constexpr std::uint64_t kMaxSliceRanges = 16u << 20;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

Result<void> bad(std::string_view text, const std::string& why) {
  return fail(ErrorCode::InvalidArgument, "invalid slice " + detail::quote_name(text) + ": " + why);
}

template <class T>
bool parse_int(std::string_view s, T& out) {
  if (s.empty() || s.front() == '+') return false;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

Result<DimSelect> parse_dim(std::string_view whole, std::string_view part) {
  DimSelect d;
  auto colon = part.find(':');
  if (colon == std::string_view::npos) {
    if (part.empty()) return fail(bad(whole, "empty selection").error());
    d.is_index = true;
    if (!parse_int(part, d.index)) {
      return fail(bad(whole, "'" + std::string(part) + "' is not an integer index").error());
    }
    return d;
  }
  if (part.find(':', colon + 1) != std::string_view::npos) {
    return fail(bad(whole, "steps ('a:b:c') are not supported").error());
  }
  auto bound = [&](std::string_view s, std::optional<std::uint64_t>& out) -> Result<void> {
    s = trim(s);
    if (s.empty()) return {};
    if (s.front() == '-') return bad(whole, "negative range bound '" + std::string(s) + "'");
    std::uint64_t v = 0;
    if (!parse_int(s, v)) return bad(whole, "'" + std::string(s) + "' is not a non-negative integer");
    out = v;
    return {};
  };
  if (auto r = bound(part.substr(0, colon), d.start); !r) return fail(r.error());
  if (auto r = bound(part.substr(colon + 1), d.stop); !r) return fail(r.error());
  return d;
}

}  // namespace

Result<SliceSpec> parse_slice(std::string_view text) {
  std::string_view s = trim(text);
  if (!s.empty() && s.front() == '[') {
    if (s.back() != ']') return fail(bad(text, "missing ']'").error());
    s = trim(s.substr(1, s.size() - 2));
  }
  SliceSpec spec;
  if (s.empty()) return spec;
  std::size_t start = 0;
  while (true) {
    auto comma = s.find(',', start);
    auto part = trim(s.substr(start, comma == std::string_view::npos ? s.npos : comma - start));
    auto dim = parse_dim(text, part);
    if (!dim) return fail(dim.error());
    spec.dims.push_back(*dim);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return spec;
}

Result<NamedSlice> parse_named_slice(std::string_view text) {
  NamedSlice out;
  auto open = text.rfind('[');
  if (!text.empty() && text.back() == ']' && open != std::string_view::npos) {
    auto spec = parse_slice(text.substr(open));
    if (!spec) return fail(spec.error().with_context(detail::quote_name(text.substr(0, open))));
    out.name = std::string(text.substr(0, open));
    out.slice = std::move(*spec);
  } else {
    out.name = std::string(text);
  }
  if (out.name.empty()) {
    return fail(ErrorCode::InvalidArgument, "empty tensor name in " + detail::quote_name(text));
  }
  return out;
}

std::string to_string(const SliceSpec& slice) {
  std::string out = "[";
  for (std::size_t i = 0; i < slice.dims.size(); ++i) {
    const auto& d = slice.dims[i];
    if (i) out += ", ";
    if (d.is_index) {
      out += std::to_string(d.index);
    } else {
      if (d.start) out += std::to_string(*d.start);
      out += ':';
      if (d.stop) out += std::to_string(*d.stop);
    }
  }
  return out + "]";
}

Result<SlicePlan> plan_slice(const TensorInfo& tensor, const SliceSpec& slice) {
  const auto& shape = tensor.shape;
  const std::size_t ndim = shape.size();
  auto error = [&](ErrorCode code, const std::string& why) {
    return fail(code, "slice " + to_string(slice) + " of tensor " + detail::quote_name(tensor.name) +
                          " with shape " + [&] {
                            std::string s = "[";
                            for (std::size_t i = 0; i < ndim; ++i) {
                              s += (i ? ", " : "") + std::to_string(shape[i]);
                            }
                            return s + "]";
                          }() + ": " + why);
  };
  if (slice.dims.size() > ndim) {
    return error(ErrorCode::SliceOutOfRange, std::to_string(slice.dims.size()) +
                                                 " selections for a tensor of " +
                                                 std::to_string(ndim) + " dimensions");
  }
  // Per dimension: [start, stop).
  std::vector<std::uint64_t> lo(ndim), hi(ndim);
  SlicePlan plan;
  for (std::size_t i = 0; i < ndim; ++i) {
    const std::uint64_t dim = shape[i];
    if (i >= slice.dims.size()) {
      lo[i] = 0;
      hi[i] = dim;
      plan.shape.push_back(dim);
      continue;
    }
    const DimSelect& d = slice.dims[i];
    const std::string where = "dimension " + std::to_string(i) + " (size " + std::to_string(dim) + ")";
    if (d.is_index) {
      std::uint64_t idx = 0;
      if (d.index < 0) {
        const std::uint64_t back = static_cast<std::uint64_t>(-(d.index + 1)) + 1;
        if (back > dim) {
          return error(ErrorCode::SliceOutOfRange,
                       "index " + std::to_string(d.index) + " is out of range for " + where);
        }
        idx = dim - back;
      } else {
        idx = static_cast<std::uint64_t>(d.index);
        if (idx >= dim) {
          return error(ErrorCode::SliceOutOfRange,
                       "index " + std::to_string(d.index) + " is out of range for " + where);
        }
      }
      lo[i] = idx;
      hi[i] = idx + 1;
      continue;  // dimension dropped from the result
    }
    lo[i] = d.start.value_or(0);
    hi[i] = d.stop.value_or(dim);
    if (hi[i] > dim) {
      return error(ErrorCode::SliceOutOfRange,
                   "stop " + std::to_string(hi[i]) + " is beyond " + where);
    }
    if (lo[i] > hi[i]) {
      return error(ErrorCode::SliceOutOfRange, "start " + std::to_string(lo[i]) + " > stop " +
                                                   std::to_string(hi[i]) + " in " + where);
    }
    plan.shape.push_back(hi[i] - lo[i]);
  }

  // Strides in elements; the whole tensor's size in bits (checked, so nothing below overflows).
  std::vector<std::uint64_t> stride(ndim, 1);
  std::uint64_t total = 1;
  for (std::size_t i = ndim; i-- > 0;) {
    stride[i] = total;
    if (__builtin_mul_overflow(total, shape[i], &total)) {
      return error(ErrorCode::Overflow, "the tensor's element count overflows 64 bits");
    }
  }
  const std::uint64_t bits = dtype_bits(tensor.dtype);
  std::uint64_t total_bits = 0;
  if (__builtin_mul_overflow(total, bits, &total_bits)) {
    return error(ErrorCode::Overflow, "the tensor's size in bits overflows 64 bits");
  }
  std::uint64_t selected = 1;
  for (std::size_t i = 0; i < ndim; ++i) selected *= hi[i] - lo[i];
  if (selected == 0) return plan;  // empty selection: no bytes

  // Dimensions k..ndim-1 taken whole merge into one block; j = k - 1 is the last partial one.
  std::size_t k = ndim;
  while (k > 0 && lo[k - 1] == 0 && hi[k - 1] == shape[k - 1]) --k;
  std::uint64_t block = 0;  // elements per contiguous run
  std::size_t outer = 0;    // dimensions iterated one index at a time: 0..outer-1
  if (k == 0) {
    block = total;
  } else {
    outer = k - 1;
    block = (hi[outer] - lo[outer]) * stride[outer];
  }
  std::uint64_t runs = selected / block;
  if (runs > kMaxSliceRanges) {
    return error(ErrorCode::InvalidArgument, "resolves to " + std::to_string(runs) +
                                                 " separate byte ranges, more than the limit of " +
                                                 std::to_string(kMaxSliceRanges));
  }
  std::vector<std::uint64_t> idx(lo.begin(), lo.begin() + static_cast<std::ptrdiff_t>(outer));
  for (std::uint64_t r = 0; r < runs; ++r) {
    std::uint64_t first = k == 0 ? 0 : lo[outer] * stride[outer];
    for (std::size_t i = 0; i < outer; ++i) first += idx[i] * stride[i];
    const std::uint64_t bit_offset = first * bits;
    const std::uint64_t bit_length = block * bits;
    if (bit_offset % 8 != 0 || bit_length % 8 != 0) {
      return error(ErrorCode::SliceMisaligned,
                   "a run of " + std::to_string(block) + " " + std::string(to_string(tensor.dtype)) +
                       " elements at element " + std::to_string(first) +
                       " does not start and end on a byte boundary");
    }
    ByteRange range{bit_offset / 8, bit_length / 8};
    if (!plan.ranges.empty() && plan.ranges.back().end() == range.offset) {
      plan.ranges.back().length += range.length;
    } else {
      plan.ranges.push_back(range);
    }
    plan.nbytes += range.length;
    // Advance the odometer over the outer dimensions.
    for (std::size_t i = outer; i-- > 0;) {
      if (++idx[i] < hi[i]) break;
      idx[i] = lo[i];
    }
  }
  (void)total_bits;
  return plan;
}

}  // namespace tensorfetch
