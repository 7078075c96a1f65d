// SPDX-License-Identifier: Apache-2.0
// Parameter counting as the Hub does it (see parameters.hpp for the rules). No I/O.
#include "tensorfetch/parameters.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <vector>

#include "base/text.h"
#include "format/json_internal.h"

namespace tensorfetch {

namespace {

struct Group {
  std::vector<std::string> targets;
  std::string format;
  std::optional<int> num_bits;
};

struct QuantConfig {
  std::string method;  // lower-case quant_method
  std::optional<int> bits;
  bool load_in_4bit = false;
  std::vector<std::string> not_convert;  // modules_to_not_convert
  std::vector<std::string> ignore;       // compressed-tensors
  std::string format;                    // lower-case
  std::string expert_dtype;              // lower-case
  std::vector<Group> groups;
};

std::string_view suffix_of(std::string_view name) {
  auto dot = name.rfind('.');
  return dot == std::string_view::npos ? name : name.substr(dot + 1);
}

std::string_view module_of(std::string_view name) {
  auto w = name.rfind(".weight");
  return w == std::string_view::npos ? name : name.substr(0, w);
}

// `*` matches any run of characters; nothing else is special.
bool star_match(std::string_view pattern, std::string_view s) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  while (true) {
    auto star = pattern.find('*', start);
    parts.push_back(pattern.substr(start, star == std::string_view::npos ? pattern.npos : star - start));
    if (star == std::string_view::npos) break;
    start = star + 1;
  }
  if (parts.size() == 1) return pattern == s;
  if (!s.starts_with(parts.front()) || !s.ends_with(parts.back())) return false;
  if (parts.front().size() + parts.back().size() > s.size()) return false;
  std::size_t pos = parts.front().size();
  const std::size_t end = s.size() - parts.back().size();
  for (std::size_t i = 1; i + 1 < parts.size(); ++i) {
    auto at = s.find(parts[i], pos);
    if (at == std::string_view::npos || at + parts[i].size() > end) return false;
    pos = at + parts[i].size();
  }
  return pos <= end;
}

// A compressed-tensors target: an exact module name, or `re:` with the common regex subset
// (`.*`, `\.`, anchors). Other regex syntax is treated as not matching rather than evaluated.
bool target_match(std::string_view target, std::string_view module) {
  if (!target.starts_with("re:")) return target == module;
  std::string p(target.substr(3));
  if (!p.empty() && p.front() == '^') p.erase(0, 1);
  if (!p.empty() && p.back() == '$') {
    p.pop_back();
  } else {
    p += ".*";
  }
  std::string glob;
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (p[i] == '.' && i + 1 < p.size() && p[i + 1] == '*') {
      glob += '*';
      ++i;
    } else if (p[i] == '\\' && i + 1 < p.size() && p[i + 1] == '.') {
      glob += '.';
      ++i;
    } else {
      glob += p[i];
    }
  }
  if (glob.find_first_of("\\+?()[]{}|^$") != std::string::npos) return false;
  return star_match(glob, module);
}

unsigned container_bits(DType d) {
  switch (d) {
    case DType::U8:
    case DType::I8: return 8;
    case DType::U16:
    case DType::I16: return 16;
    case DType::U32:
    case DType::I32: return 32;
    default: return 0;
  }
}

double packing(DType d, std::optional<int> bits) {
  const unsigned c = container_bits(d);
  if (c == 0 || !bits || *bits <= 0 || static_cast<unsigned>(*bits) >= c) return 1.0;
  return static_cast<double>(c) / *bits;
}

std::optional<int> bits_from_format(std::string_view format) {
  static constexpr std::array<std::pair<std::string_view, int>, 7> kFormats{{
      {"nvfp4", 4}, {"mxfp4", 4}, {"fp4", 4}, {"int4", 4}, {"uint4", 4}, {"nf4", 4}, {"int2", 2}}};
  for (const auto& [pattern, bits] : kFormats) {
    if (format.find(pattern) != std::string_view::npos) return bits;
  }
  return std::nullopt;
}

constexpr std::array<std::string_view, 11> kAuxSuffixes{
    "weight_scale", "weight_scale_inv", "weight_scale_2", "weight_global_scale",
    "weight_zero_point", "input_scale", "input_global_scale", "input_zero_point",
    "zero_point", "weight_shape", "weight_g_idx"};
constexpr std::array<std::string_view, 4> kBnbAux{"absmax", "quant_map", "nested_absmax", "nested_quant_map"};
constexpr std::array<std::string_view, 3> kGptqAux{"qzeros", "g_idx", "scales"};

template <std::size_t N>
bool in(const std::array<std::string_view, N>& list, std::string_view s) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

class Rules {
 public:
  explicit Rules(std::optional<QuantConfig> q) : q_(std::move(q)) {}

  [[nodiscard]] bool quantized(std::string_view name) const {
    if (!q_) return false;
    for (const auto& t : q_->ignore) {
      if (target_match(t, module_of(name))) return false;
    }
    for (const auto& p : q_->not_convert) {
      if (p.find('*') != std::string::npos ? star_match(p, name) : name.find(p) != std::string_view::npos) {
        return false;
      }
    }
    return true;
  }

  [[nodiscard]] bool skip(std::string_view name, DType dtype) const {
    if (dtype == DType::F8_E8M0) return true;  // exponent-only: block scales, never weights
    if (!q_) return false;
    const auto suffix = suffix_of(name);
    if (in(kAuxSuffixes, suffix)) return true;
    const auto& m = q_->method;
    if (m == "mxfp4") return dtype == DType::U8 && suffix.ends_with("_scales");
    if (m == "bitsandbytes") return in(kBnbAux, suffix) || suffix.starts_with("bitsandbytes__");
    if (m != "gptq" && m != "awq") return false;
    return quantized(name) && suffix != "qweight" && in(kGptqAux, suffix);
  }

  [[nodiscard]] double multiplier(std::string_view name, DType dtype) const {
    if (!q_ || !quantized(name)) return 1.0;
    const auto& q = *q_;
    const auto& m = q.method;
    if (m == "mxfp4") return dtype == DType::U8 && name.find("_blocks") != std::string_view::npos ? 2.0 : 1.0;
    if (m == "gptq" || m == "awq") {
      if (suffix_of(name) == "qweight") {
        const int bits = q.bits && *q.bits > 0 ? *q.bits : 4;
        return std::max(1, 32 / bits);
      }
      if (dtype == DType::U8 && q.bits == 4) return 2.0;
      if (dtype == DType::U8 && q.bits == 2) return 4.0;
      return 1.0;
    }
    if (m == "compressed-tensors") {
      if (container_bits(dtype) == 0) return 1.0;
      const Group* group = nullptr;
      for (const auto& g : q.groups) {
        if (std::any_of(g.targets.begin(), g.targets.end(),
                        [&](const std::string& t) { return target_match(t, module_of(name)); })) {
          group = &g;
          break;
        }
      }
      const std::string format = group && !group->format.empty() ? group->format : q.format;
      if (!format.ends_with("pack-quantized")) return 1.0;
      std::optional<int> bits = group ? group->num_bits : std::nullopt;
      for (const auto& g : q.groups) {
        if (!bits && g.num_bits) bits = g.num_bits;
      }
      if (!bits) bits = bits_from_format(format);
      return packing(dtype, bits ? bits : 4);
    }
    if (m == "fp8") {
      const bool routed_expert = name.find(".experts.") != std::string_view::npos &&
                                 name.find("shared_expert") == std::string_view::npos;
      return routed_expert ? packing(dtype, bits_from_format(q.expert_dtype)) : 1.0;
    }
    if (m == "bitsandbytes") return q.load_in_4bit && dtype == DType::U8 ? 2.0 : 1.0;
    return dtype == DType::U8 && (q.load_in_4bit || q.bits == 4) ? 2.0 : 1.0;
  }

  [[nodiscard]] std::string describe() const {
    if (!q_) return "unquantized";
    const auto& q = *q_;
    const auto& m = q.method;
    const std::string bits = q.bits ? std::to_string(*q.bits) : std::string("4");
    if (m == "gptq" || m == "awq") {
      const int b = q.bits && *q.bits > 0 ? *q.bits : 4;
      return m + " " + std::to_string(b) + "-bit: qweight x" + std::to_string(std::max(1, 32 / b)) +
             "; qzeros, g_idx, scales not counted";
    }
    if (m == "bitsandbytes") {
      return q.load_in_4bit ? "bitsandbytes 4-bit: U8 weights x2; absmax, quant_map and quant states not counted"
                            : "bitsandbytes: weights as stored; absmax, quant_map and quant states not counted";
    }
    if (m == "mxfp4") return "mxfp4: U8 *_blocks x2; *_scales not counted";
    if (m == "compressed-tensors") {
      return "compressed-tensors " + (q.format.empty() ? std::string("(per group)") : q.format) +
             ": packed integer weights x(container bits / num_bits); scales and zero points not counted";
    }
    if (m == "fp8") {
      return "fp8: weights as stored" +
             (q.expert_dtype.empty() ? std::string() : "; routed experts packed as " + q.expert_dtype) +
             "; scales not counted";
    }
    return (m.empty() ? std::string("quantized") : m) + ": U8 weights x2 when 4-bit; scales and zero points not counted";
  }

 private:
  std::optional<QuantConfig> q_;
};

std::vector<std::string> strings_of(simdjson::dom::element e) {
  std::vector<std::string> out;
  simdjson::dom::array arr;
  if (e.get_array().get(arr)) return out;
  for (auto v : arr) {
    std::string_view s;
    if (!v.get_string().get(s)) out.emplace_back(s);
  }
  return out;
}

std::vector<std::string> strings_at(simdjson::dom::object obj, std::string_view key) {
  simdjson::dom::element e;
  if (obj[key].get(e)) return {};
  return strings_of(e);
}

std::optional<int> int_of(simdjson::dom::object obj, std::string_view key) {
  std::int64_t v = 0;
  if (obj[key].get_int64().get(v) || v < 0 || v > 64) return std::nullopt;
  return static_cast<int>(v);
}

std::string string_of(simdjson::dom::object obj, std::string_view key) {
  std::string_view s;
  if (obj[key].get_string().get(s)) return {};
  return std::string(s);
}

// Reads quantization_config (top level, or under text_config) from config.json.
Result<std::optional<QuantConfig>> read_config(std::string_view text) {
  detail::JsonParser parser;
  auto doc = parser.parse(std::as_bytes(std::span(text.data(), text.size())), ErrorCode::InvalidArgument,
                          "config.json");
  if (!doc) return fail(doc.error());
  simdjson::dom::object root, qc;
  if (doc->get_object().get(root)) return fail(ErrorCode::InvalidArgument, "config.json is not a JSON object");
  if (root["quantization_config"].get_object().get(qc)) {
    simdjson::dom::object text_config;
    if (root["text_config"].get_object().get(text_config) ||
        text_config["quantization_config"].get_object().get(qc)) {
      return std::optional<QuantConfig>();
    }
  }
  QuantConfig q;
  q.method = detail::ascii_lower(string_of(qc, "quant_method"));
  q.bits = int_of(qc, "bits");
  bool b = false;
  if (!qc["load_in_4bit"].get_bool().get(b)) q.load_in_4bit = b;
  q.not_convert = strings_at(qc, "modules_to_not_convert");
  q.ignore = strings_at(qc, "ignore");
  q.format = detail::ascii_lower(string_of(qc, "format"));
  q.expert_dtype = detail::ascii_lower(string_of(qc, "expert_dtype"));
  simdjson::dom::object groups;
  if (!qc["config_groups"].get_object().get(groups)) {
    for (auto field : groups) {
      simdjson::dom::object g;
      if (field.value.get_object().get(g)) continue;
      Group group;
      group.targets = strings_at(g, "targets");
      group.format = detail::ascii_lower(string_of(g, "format"));
      simdjson::dom::object weights;
      if (!g["weights"].get_object().get(weights)) group.num_bits = int_of(weights, "num_bits");
      q.groups.push_back(std::move(group));
    }
  }
  return std::optional<QuantConfig>(std::move(q));
}

}  // namespace

ParameterCount count_parameters(std::span<const TensorInfo* const> tensors,
                                std::optional<std::string_view> config_json) {
  ParameterCount out;
  std::optional<QuantConfig> q;
  if (config_json) {
    auto read = read_config(*config_json);
    if (read) {
      q = std::move(*read);
    } else {
      out.config_warning = read.error().message + " (quantization rules not applied)";
    }
  }
  const Rules rules(std::move(q));
  out.rule = rules.describe();
  for (const TensorInfo* t : tensors) {
    if (t == nullptr || t->shape.empty()) continue;  // scalars are not parameters, as on the Hub
    if (rules.skip(t->name, t->dtype)) {
      ++out.skipped_tensors;
      continue;
    }
    const std::uint64_t elements = t->num_elements();
    const double m = rules.multiplier(t->name, t->dtype);
    std::uint64_t n = elements;
    if (m != 1.0) {
      ++out.packed_tensors;
      n = static_cast<std::uint64_t>(std::llround(static_cast<long double>(elements) * m));
    }
    if (n == 0) continue;  // as on the Hub: a dtype with no parameters is not listed
    out.by_dtype[t->dtype] += n;
    out.total += n;
  }
  return out;
}

}  // namespace tensorfetch
