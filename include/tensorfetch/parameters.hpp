// SPDX-License-Identifier: Apache-2.0
/// @file
/// Counting a checkpoint's parameters as the Hugging Face Hub does, including quantized
/// checkpoints whose weights are packed several to an integer element. Pure; no I/O.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "tensorfetch/dtype.hpp"
#include "tensorfetch/export.hpp"
#include "tensorfetch/format.hpp"

namespace tensorfetch {

/// Parameters of a checkpoint. A plain value.
struct ParameterCount {
  std::map<DType, std::uint64_t> by_dtype;  ///< parameters per storage dtype
  std::uint64_t total = 0;                  ///< sum of `by_dtype`
  /// The rule applied, in words: "unquantized", or the quantization method with its packing
  /// factor and the bookkeeping tensors left out (e.g. "gptq 4-bit: qweight x8; qzeros,
  /// g_idx, scales not counted").
  std::string rule = "unquantized";
  std::uint64_t packed_tensors = 0;   ///< tensors whose element count was multiplied
  std::uint64_t skipped_tensors = 0;  ///< bookkeeping tensors (scales, zero points...) left out
  /// Why the quantization config was not used, if it was present but unreadable.
  std::optional<std::string> config_warning;
};

/// Counts parameters the way the Hub does. Scalars (shape `[]`) are not counted, nor are
/// exponent-only scale tensors (F8_E8M0). When `config_json` (the repo's `config.json`)
/// declares a `quantization_config` (at the top level or under `text_config`), its method
/// decides: GPTQ/AWQ (`qweight` holds 32/bits values per I32; `qzeros`, `g_idx`, `scales`
/// are bookkeeping), bitsandbytes 4-bit (2 per U8; `absmax`, `quant_map`, quant states left
/// out), mxfp4 (`*_blocks` hold 2 per U8; `*_scales` left out), compressed-tensors
/// pack-quantized (container bits / num_bits per integer element, per config group), fp8
/// (experts packed as `expert_dtype` says). Scale and zero-point tensors
/// (`weight_scale`, `input_scale`, `weight_zero_point`, ...) are never parameters of a
/// quantized model. Modules in `modules_to_not_convert` / `ignore` count as stored. Null
/// pointers in `tensors` are skipped; an unreadable `config_json` is reported in
/// `config_warning`, never thrown.
[[nodiscard]] TENSORFETCH_API ParameterCount count_parameters(std::span<const TensorInfo* const> tensors,
                                              std::optional<std::string_view> config_json);

}  // namespace tensorfetch
