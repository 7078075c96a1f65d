// SPDX-License-Identifier: Apache-2.0
#include "format/json_depth.h"

#include <string>

#include <nlohmann/json.hpp>

namespace tensorfetch::detail {

namespace {

using json = nlohmann::json;

// nlohmann's own document builder (a SAX consumer), with arrays and objects counted on the way
// in: one too many stops the parse.
class DepthLimitedBuilder {
 public:
  explicit DepthLimitedBuilder(json& out) : dom_(out, /*allow_exceptions=*/false) {}

  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(json::number_float_t v, const json::string_t& s) { return dom_.number_float(v, s); }
  bool string(json::string_t& v) { return dom_.string(v); }
  bool binary(json::binary_t& v) { return dom_.binary(v); }
  bool key(json::string_t& v) { return dom_.key(v); }
  bool start_object(std::size_t n) { return enter() && dom_.start_object(n); }
  bool end_object() { --depth_; return dom_.end_object(); }
  bool start_array(std::size_t n) { return enter() && dom_.start_array(n); }
  bool end_array() { --depth_; return dom_.end_array(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    error_ = e.what();
    return false;
  }

  /// Why the parse stopped ("" when it did not).
  const std::string& error() const { return error_; }

 private:
  bool enter() {
    if (++depth_ <= kMaxJsonDepth) return true;
    error_ = "arrays and objects nested deeper than " + std::to_string(kMaxJsonDepth) + " levels";
    return false;
  }

  nlohmann::detail::json_sax_dom_parser<json> dom_;
  std::size_t depth_ = 0;
  std::string error_;
};

}  // namespace

Result<nlohmann::json> parse_json(std::string_view text, ErrorCode code, std::string_view what) {
  json out;
  DepthLimitedBuilder builder(out);
  const bool ok = json::sax_parse(text, &builder, json::input_format_t::json, /*strict=*/true);
  if (!ok || !builder.error().empty()) {
    return fail(code, std::string(what) + " is not valid JSON: " +
                          (builder.error().empty() ? std::string("parse error") : builder.error()));
  }
  return out;
}

}  // namespace tensorfetch::detail
