// SPDX-License-Identifier: Apache-2.0
// A JSON object written member by member (and a large array element by element), so that a
// million tensors need not be built into one nlohmann object first. Every value and key is
// serialized by nlohmann; only the punctuation and indentation between them is written here,
// laid out exactly as nlohmann's `dump(2)` lays out the whole object.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace tensorfetch::cli {

/// Streams one pretty-printed JSON object (2-space indent) to a FILE. Not thread-safe.
class JsonObjectStream {
 public:
  /// Starts the object on `out` (not owned; flushed by `end`).
  explicit JsonObjectStream(std::FILE* out) : out_(out) { buf_ = "{"; }
  JsonObjectStream(const JsonObjectStream&) = delete;
  JsonObjectStream& operator=(const JsonObjectStream&) = delete;

  /// Writes `"key": value`.
  void member(std::string_view key, const nlohmann::ordered_json& value) {
    start_member(key);
    append_indented(value.dump(2, ' ', false, kHandler), 2);
  }

  /// Starts `"key": [`; then `element()` for each value, and `end_array()`.
  void begin_array(std::string_view key) {
    start_member(key);
    buf_ += '[';
    array_empty_ = true;
  }

  /// Writes one element of the array begun last.
  void element(const nlohmann::ordered_json& value) {
    buf_ += array_empty_ ? "\n    " : ",\n    ";
    array_empty_ = false;
    append_indented(value.dump(2, ' ', false, kHandler), 4);
    if (buf_.size() >= kFlushAt) flush();
  }

  /// Closes the array begun last.
  void end_array() { buf_ += array_empty_ ? "]" : "\n  ]"; }

  /// Closes the object, ends the line and flushes. Returns false when writing failed.
  bool end() {
    buf_ += empty_ ? "}\n" : "\n}\n";
    flush();
    return std::fflush(out_) == 0 && !std::ferror(out_);
  }

  /// Writes out what is buffered.
  void flush() {
    if (!buf_.empty()) std::fwrite(buf_.data(), 1, buf_.size(), out_);
    buf_.clear();
  }

 private:
  static constexpr auto kHandler = nlohmann::ordered_json::error_handler_t::replace;
  static constexpr std::size_t kFlushAt = std::size_t{1} << 20;

  void start_member(std::string_view key) {
    buf_ += empty_ ? "\n  " : ",\n  ";
    empty_ = false;
    buf_ += nlohmann::ordered_json(key).dump(-1, ' ', false, kHandler);
    buf_ += ": ";
  }

  // Appends a value dumped at depth 0, indented by `indent` more spaces. nlohmann escapes
  // newlines inside strings, so every '\n' in the text is one of its line breaks.
  void append_indented(const std::string& text, std::size_t indent) {
    std::size_t start = 0;
    while (true) {
      const std::size_t nl = text.find('\n', start);
      buf_.append(text, start, nl == std::string::npos ? std::string::npos : nl + 1 - start);
      if (nl == std::string::npos) break;
      buf_.append(indent, ' ');
      start = nl + 1;
    }
  }

  std::FILE* out_;
  std::string buf_;
  bool empty_ = true;
  bool array_empty_ = true;
};

}  // namespace tensorfetch::cli
