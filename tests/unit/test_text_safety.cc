// SPDX-License-Identifier: Apache-2.0
// What may reach libcurl and the terminal (issue 14, items 5 and 8): the net layer's checks of
// URLs, tokens and header values, and the CLI's terminal escaping (tools/tensorfetch/escape.cc).
#include <catch2/catch.hpp>

#include <string>

#include "escape.h"
#include "hub/environment.h"
#include "net/http_client.h"

using namespace tensorfetch;
using tensorfetch::cli::escape_text;

TEST_CASE("find_control: C0 and DEL (and a space when asked) are found, everything else is not", "[net][text]") {
  using detail::find_control;
  CHECK_FALSE(find_control("hf_abcDEF0123-_.~/+="));
  CHECK_FALSE(find_control("a b"));
  CHECK(find_control("a b", true) == 1u);
  CHECK(find_control("abc\r\nX-Evil: 1") == 3u);
  CHECK(find_control(std::string("ab\0c", 4)) == 2u);
  CHECK(find_control("ab\x7f") == 2u);
  CHECK(find_control("\t") == 0u);
  CHECK_FALSE(find_control("caf\xc3\xa9 \xe2\x80\xae", false));  // UTF-8 is not a control character here
}

TEST_CASE("quote_url percent-encodes controls, spaces, non-ASCII; leaves a URL's syntax alone", "[net][text]") {
  using detail::quote_url;
  CHECK(quote_url("https://h:1/a/b?x=1&y=%41") == "https://h:1/a/b?x=1&y=%41");
  CHECK(quote_url("http://h/a b\r\n\x1b[2J\x7f\xff") == "http://h/a%20b%0D%0A%1B[2J%7F%FF");
}

TEST_CASE("check_token: a token with a control character is refused, naming its source and never the token",
          "[hub][token]") {
  struct Row {
    const char* what;
    std::string token;
  };
  for (const Row& row : {Row{"CRLF header injection", "hf_secret\r\nX-Evil: 1"}, Row{"lone LF", "hf_secret\nx"},
                         Row{"lone CR", "hf_secret\rx"}, Row{"NUL", std::string("hf_secret\0x", 11)},
                         Row{"trailing newline (not trimmed outside the token file)", "hf_secret\n"},
                         Row{"DEL", "hf_secret\x7f"}, Row{"tab", "hf_secret\tx"}}) {
    INFO(row.what);
    auto r = detail::check_token(row.token, "HF_TOKEN");
    REQUIRE_FALSE(r);
    CHECK(r.error().code == ErrorCode::InvalidArgument);
    CHECK(exit_code(r.error().code) == 1);
    CHECK_THAT(r.error().message, Catch::Contains("from HF_TOKEN") && Catch::Contains("control character"));
    CHECK_THAT(r.error().message, !Catch::Contains("hf_secret") && !Catch::Contains("Evil"));
  }
  CHECK(detail::check_token("hf_AbCdEf0123456789", "HF_TOKEN"));
  CHECK(detail::check_token("", "HF_TOKEN"));  // no token: nothing is sent
}

TEST_CASE("check_url_text: spaces and control characters are refused, shown percent-encoded", "[net][url]") {
  CHECK(detail::check_url_text("https://huggingface.co", "HF_ENDPOINT"));
  CHECK(detail::check_url_text("http://127.0.0.1:8080/a%20b/c.safetensors?x=1", "URL"));
  for (const char* bad : {"https://hf.co\r\nX-Evil: 1", "https://hf.co/a b", " https://hf.co", "https://hf.co/\x1b[2J",
                          "https://hf.co/\x7f"}) {
    INFO(bad);
    auto r = detail::check_url_text(bad, "HF_ENDPOINT");
    REQUIRE_FALSE(r);
    CHECK(r.error().code == ErrorCode::InvalidArgument);
    CHECK_THAT(r.error().message, Catch::StartsWith("HF_ENDPOINT '") && Catch::Contains("hf.co"));
    CHECK(detail::find_control(r.error().message) == std::nullopt);  // the message itself is clean
  }
}

TEST_CASE("check_header_value: what goes into If-Match or Authorization has no control character", "[net]") {
  CHECK(detail::check_header_value("\"abc\"", "If-Match"));
  auto r = detail::check_header_value("\"abc\"\r\nX-Evil: 1", "If-Match");
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message, Catch::StartsWith("If-Match contains a control character (0x0D)"));
}

TEST_CASE("escape_text: what a terminal would interpret becomes a visible escape", "[cli][escape]") {
  struct Row {
    const char* what;
    std::string in;
    std::string out;
  };
  const Row rows[] = {
      {"plain ASCII", "model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.up_proj.weight"},
      {"UTF-8 letters kept", "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80", "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80"},
      {"ESC sequence (clear screen)", "a\x1b[2Jb", "a\\x1b[2Jb"},
      {"CR, LF, TAB, BEL", "a\rb\nc\td\x07", "a\\rb\\nc\\td\\x07"},
      {"NUL", std::string("a\0b", 3), "a\\x00b"},
      {"DEL", "a\x7f", "a\\x7f"},
      {"C1 CSI U+009B", "a\xc2\x9b" "2J", "a\\u009b2J"},
      {"C1 NEL U+0085", "a\xc2\x85", "a\\u0085"},
      {"RIGHT-TO-LEFT OVERRIDE U+202E", "evil\xe2\x80\xaegpj.exe", "evil\\u202egpj.exe"},
      {"bidi isolates U+2066..U+2069", "\xe2\x81\xa6x\xe2\x81\xa9", "\\u2066x\\u2069"},
      {"LRM/RLM, ALM", "\xe2\x80\x8e\xe2\x80\x8f\xd8\x9c", "\\u200e\\u200f\\u061c"},
      {"line/paragraph separators", "\xe2\x80\xa8\xe2\x80\xa9", "\\u2028\\u2029"},
      {"a backslash is doubled, so escapes are unambiguous", "a\\x1b", "a\\\\x1b"},
      {"invalid UTF-8: lone continuation, 0xff", "a\x80z\xff", "a\\x80z\\xff"},
      {"invalid UTF-8: truncated sequence", "a\xe2\x80", "a\\xe2\\x80"},
      {"invalid UTF-8: overlong '/' (C0 AF)", "\xc0\xaf", "\\xc0\\xaf"},
      {"invalid UTF-8: overlong 3-byte (E0 80 AF)", "\xe0\x80\xaf", "\\xe0\\x80\\xaf"},
      {"invalid UTF-8: surrogate U+D800 (ED A0 80)", "\xed\xa0\x80", "\\xed\\xa0\\x80"},
      {"invalid UTF-8: above U+10FFFF (F4 90 80 80)", "\xf4\x90\x80\x80", "\\xf4\\x90\\x80\\x80"},
      {"largest code point kept", "\xf4\x8f\xbf\xbf", "\xf4\x8f\xbf\xbf"},
      {"empty", "", ""},
  };
  for (const Row& row : rows) {
    INFO(row.what);
    CHECK(escape_text(row.in) == row.out);
  }
}

TEST_CASE("escape_text: any byte string comes out as printable ASCII or well-formed, harmless UTF-8", "[cli][escape]") {
  // Every byte value, and every 2-byte combination, as input.
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  for (int a = 0xC0; a < 0x100; ++a) {
    for (int b = 0x70; b < 0xC0; ++b) {
      all += static_cast<char>(a);
      all += static_cast<char>(b);
    }
  }
  const std::string out = escape_text(all);
  CHECK_FALSE(detail::find_control(out));
  CHECK(out.find("\xc2\x9b") == std::string::npos);  // no C1 CSI
  CHECK(escape_text(out) != out);  // the backslashes it added are escaped again: unambiguous
}
