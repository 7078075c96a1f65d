// SPDX-License-Identifier: Apache-2.0
// The safetensors header: every format rule of DESIGN.md ("Format rules") checked with
// crafted files (8-byte LE length + JSON + data), then the reference checkpoints against
// their MANIFEST.json.
#include <array>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tensorfetch/dtype.hpp"
#include "tensorfetch/error.hpp"
#include "format/header_internal.h"
#include "tensorfetch/format.hpp"
#include "test_util.hpp"

namespace tf = tensorfetch;
using tf::DType;
using tf::ErrorCode;
using tftest::le64;
using tftest::to_bytes;

namespace {

/// `"name":{"dtype":"D","shape":S,"data_offsets":[b,e]}` (S is JSON text).
std::string entry(std::string_view name, std::string_view dtype, std::string_view shape,
                  std::uint64_t begin, std::uint64_t end) {
  return "\"" + std::string(name) + "\":{\"dtype\":\"" + std::string(dtype) +
         "\",\"shape\":" + std::string(shape) + ",\"data_offsets\":[" + std::to_string(begin) +
         "," + std::to_string(end) + "]}";
}

/// `"name":BODY` where BODY is raw JSON text.
std::string raw(std::string_view name, std::string_view body) {
  return "\"" + std::string(name) + "\":" + std::string(body);
}

/// `{m1,m2,...}`.
std::string object(std::initializer_list<std::string> members) {
  std::string out = "{";
  bool first = true;
  for (const auto& m : members) {
    if (!first) out += ",";
    out += m;
    first = false;
  }
  return out + "}";
}

/// A whole file prefix: 8-byte LE length of `json`, then `json`.
std::string file_prefix(std::string_view json) { return le64(json.size()) + std::string(json); }

/// Parses `json` as the header of a file holding `data_size` bytes after it, through both
/// entry points (parse_file_prefix on the prefixed bytes, parse_header on the N bytes), and
/// checks that they agree. Returns the parse_file_prefix result.
tf::Result<tf::Header> parse(std::string_view json, std::uint64_t data_size) {
  const std::uint64_t file_size = tf::kPrefixSize + json.size() + data_size;
  const auto prefixed = to_bytes(file_prefix(json));
  auto via_file = tf::parse_file_prefix(prefixed, file_size);
  const auto header_only = to_bytes(json);
  auto via_header = tf::parse_header(header_only, file_size);
  INFO("header JSON: " << json);
  CHECK(via_file.has_value() == via_header.has_value());
  if (!via_file && !via_header) {
    CHECK(via_file.error().code == via_header.error().code);
  }
  return via_file;
}


}  // namespace

// --- the 8-byte length prefix ------------------------------------------------------------

TEST_CASE("header size: N above 100,000,000 is refused from the 8-byte prefix alone",
          "[header][size]") {
  const auto prefix = to_bytes(le64(100'000'001));
  CHECK_ERROR(tf::parse_header_size(prefix, std::uint64_t{1} << 40), ErrorCode::HeaderTooLarge,
              "100000001");

  const auto huge = to_bytes(le64(std::numeric_limits<std::uint64_t>::max()));
  CHECK_ERROR(tf::parse_header_size(huge, std::numeric_limits<std::uint64_t>::max()),
              ErrorCode::HeaderTooLarge);

  const auto two_pow_63 = to_bytes(le64(std::uint64_t{1} << 63));
  CHECK_ERROR(tf::parse_header_size(two_pow_63, 100), ErrorCode::HeaderTooLarge);

  // parse_file_prefix is given only the 8 prefix bytes: the cap must be checked before it
  // needs (or allocates for) the N header bytes.
  CHECK_ERROR(tf::parse_file_prefix(prefix, std::uint64_t{1} << 40), ErrorCode::HeaderTooLarge,
              "100000001");
}

TEST_CASE("header size: N of exactly 100,000,000 is accepted when the file holds it",
          "[header][size]") {
  const auto prefix = to_bytes(le64(tf::kMaxHeaderSize));
  auto n = tf::parse_header_size(prefix, tf::kPrefixSize + tf::kMaxHeaderSize);
  REQUIRE(n.has_value());
  CHECK(*n == 100'000'000u);
}

TEST_CASE("header size: 8 + N beyond the file size is refused (FileTooSmall)", "[header][size]") {
  const auto prefix = to_bytes(le64(10));
  CHECK_ERROR(tf::parse_header_size(prefix, 17), ErrorCode::FileTooSmall, "10", "17");
  auto ok = tf::parse_header_size(prefix, 18);
  REQUIRE(ok.has_value());
  CHECK(*ok == 10u);

  const auto zero = to_bytes(le64(0));
  auto z = tf::parse_header_size(zero, 8);
  REQUIRE(z.has_value());
  CHECK(*z == 0u);

  // Within the cap but far beyond a small file.
  const auto big = to_bytes(le64(99'999'999));
  CHECK_ERROR(tf::parse_header_size(big, 1000), ErrorCode::FileTooSmall, "99999999");
  CHECK_ERROR(tf::parse_file_prefix(big, 1000), ErrorCode::FileTooSmall);
}

TEST_CASE("header size: a file shorter than 8 bytes is refused (FileTooSmall)",
          "[header][size]") {
  const std::string full = le64(0);
  for (std::size_t size = 0; size < 8; ++size) {
    INFO("file size " << size);
    const auto bytes = to_bytes(std::string_view(full).substr(0, size));
    CHECK_ERROR(tf::parse_header_size(bytes, size), ErrorCode::FileTooSmall);
    CHECK_ERROR(tf::parse_file_prefix(bytes, size), ErrorCode::FileTooSmall);
  }
  // Eight prefix bytes at hand, but the file is said to be 7 bytes long.
  const auto eight = to_bytes(full);
  CHECK_ERROR(tf::parse_header_size(eight, 7), ErrorCode::FileTooSmall);
}

TEST_CASE("header size: the length prefix is read little-endian", "[header][size]") {
  std::string prefix(8, '\0');
  prefix[0] = '\x10';
  prefix[1] = '\x01';
  const auto bytes = to_bytes(prefix);
  auto n = tf::parse_header_size(bytes, 1000);
  REQUIRE(n.has_value());
  CHECK(*n == 0x0110u);
}

TEST_CASE("header: parse_header refuses N header bytes that do not fit in the file",
          "[header][size]") {
  const auto json = to_bytes("{}      ");
  CHECK_ERROR(tf::parse_header(json, 15), ErrorCode::FileTooSmall);
  CHECK(tf::parse_header(json, 16).has_value());
}

TEST_CASE("header: parse_file_prefix refuses a buffer shorter than 8 + N without reading past it",
          "[header][size]") {
  const std::string file = file_prefix("{}      ");
  const auto bytes = to_bytes(std::string_view(file).substr(0, 12));  // 4 of 8 header bytes
  auto r = tf::parse_file_prefix(bytes, file.size());
  CHECK_FALSE(r.has_value());
}

// --- the JSON text -------------------------------------------------------------------------

TEST_CASE("header: leading whitespace or a BOM before '{' is refused (HeaderStart)",
          "[header][json]") {
  const std::vector<std::pair<const char*, std::string>> cases = {
      {"space", " {}"},
      {"newline", "\n{}"},
      {"tab", "\t{}"},
      {"carriage return", "\r{}"},
      {"UTF-8 BOM", "\xEF\xBB\xBF{}"},
      {"space before a real entry", " " + object({entry("w", "F32", "[1]", 0, 4)})},
  };
  for (const auto& [what, json] : cases) {
    INFO("case: " << what);
    const std::uint64_t data = json.find("\"w\"") != std::string::npos ? 4 : 0;
    CHECK_ERROR(parse(json, data), ErrorCode::HeaderStart);
  }
}

TEST_CASE("header: an empty header (N = 0) is refused", "[header][json]") {
  CHECK_ERROR_IN(parse("", 0), ErrorCode::HeaderStart, ErrorCode::HeaderJson);
}

TEST_CASE("header: a JSON root that is not an object is refused (HeaderStart)",
          "[header][json]") {
  for (const char* json : {"[]", "[{}]", "1", "\"x\"", "null", "true"}) {
    INFO("header: " << json);
    CHECK_ERROR(parse(json, 0), ErrorCode::HeaderStart);
  }
}

TEST_CASE("header: invalid UTF-8 is refused (HeaderJson)", "[header][json]") {
  const std::vector<std::pair<const char*, std::string>> cases = {
      {"0xFF byte in a tensor name", object({entry("w\xFF", "F32", "[1]", 0, 4)})},
      {"lone continuation byte in a metadata value",
       object({raw("__metadata__", "{\"k\":\"a\x80z\"}"), entry("w", "F32", "[1]", 0, 4)})},
      {"overlong encoding of '/'", object({entry("a\xC0\xAF", "F32", "[1]", 0, 4)})},
      {"UTF-16 surrogate encoded in UTF-8", object({entry("\xED\xA0\x80", "F32", "[1]", 0, 4)})},
      {"truncated 3-byte sequence", object({entry("w\xE2\x82", "F32", "[1]", 0, 4)})},
      {"invalid byte in the space padding", object({entry("w", "F32", "[1]", 0, 4)}) + "  \xFF "},
  };
  for (const auto& [what, json] : cases) {
    INFO("case: " << what);
    CHECK_ERROR(parse(json, 4), ErrorCode::HeaderJson);
  }
}

TEST_CASE("header: malformed JSON is refused (HeaderJson)", "[header][json]") {
  const std::vector<std::pair<const char*, std::string>> cases = {
      {"unterminated object", "{\"w\":"},
      {"missing colon", "{\"w\" {}}"},
      {"single quotes", "{'w':{}}"},
      {"trailing comma in the root", object({entry("w", "F32", "[1]", 0, 4)}) + ",}"},
      {"trailing comma in an entry",
       "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],}}"},
      {"unterminated string", "{\"w}"},
      {"unquoted key", "{w:{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}"},
      {"raw control character in a string", "{\"w\x01\":{\"dtype\":\"F32\",\"shape\":[1],"
                                             "\"data_offsets\":[0,4]}}"},
      {"comment", "{/* c */\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}"},
      {"only an opening brace", "{"},
  };
  for (const auto& [what, json] : cases) {
    INFO("case: " << what);
    CHECK_ERROR(parse(json, 4), ErrorCode::HeaderJson);
  }
}

TEST_CASE("header: bytes other than spaces after the JSON object are refused (HeaderJson)",
          "[header][json]") {
  const std::string w = object({entry("w", "F32", "[1]", 0, 4)});
  const std::vector<std::pair<const char*, std::string>> cases = {
      {"a letter", "{} x"},
      {"a second object", "{}{}"},
      {"NUL padding", std::string("{}\0\0\0\0\0\0", 8)},
      {"a comma", "{},"},
      {"a closing brace", "{}}"},
      {"a number after a real entry", w + " 1"},
      {"a second object after a real entry", w + "{}"},
  };
  for (const auto& [what, json] : cases) {
    INFO("case: " << what);
    const std::uint64_t data = json.starts_with("{\"w\"") ? 4 : 0;
    CHECK_ERROR(parse(json, data), ErrorCode::HeaderJson);
  }
}

TEST_CASE("header: trailing spaces padding the JSON are accepted", "[header][json]") {
  SECTION("empty object padded to 8 bytes") {
    auto r = parse("{}      ", 0);
    REQUIRE(r.has_value());
    CHECK(r->header_size == 8u);
    CHECK(r->tensors().empty());
  }
  SECTION("entry padded to a multiple of 8, N counts the padding") {
    std::string json = object({entry("w", "F32", "[2]", 0, 8)});
    const std::size_t unpadded = json.size();
    json.append(8 - unpadded % 8 + 8, ' ');
    auto r = parse(json, 8);
    REQUIRE(r.has_value());
    CHECK(r->header_size == json.size());
    CHECK(r->data_offset() == 8 + json.size());
    CHECK(r->data_size == 8u);
    REQUIRE(r->tensors().size() == 1);
    CHECK(r->tensors()[0].name == "w");
  }
}

TEST_CASE("header: parsing in place (readable_after >= 64) gives the same result whatever bytes follow",
          "[header][json][in-place]") {
  // Headers that end in every awkward state: inside a string, an escape, a number, an
  // array, a multi-byte UTF-8 sequence, exactly on and around 64-byte block boundaries.
  const std::string w = entry("w", "U8", "[4]", 0, 4);
  std::vector<std::string> corpus = {
      "{}",
      "{}      ",
      "{" + w + "}",
      "{" + w + "}   ",
      "{" + w,
      "{\"w",
      "{\"w\":\"\\",
      "{\"w\":\"\\u00",
      "{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4",
      "{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,",
      "{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}",
      "{\"w\":1",
      "{\"w\":tru",
      "{\"w\":\"\xE2\x82",
      "{\"w\xE2\x82\xAC\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}",
      "{" + w + "} x",
  };
  // Valid headers padded to lengths 63, 64, 65, 127, 128 and 129.
  for (std::size_t len : {63u, 64u, 65u, 127u, 128u, 129u}) {
    std::string padded = "{" + w + "}";
    padded.append(len - padded.size(), ' ');
    corpus.push_back(padded);
  }
  const std::vector<std::string> tails = {
      std::string(256, ' '),  std::string(256, '"'),  std::string(256, '}'),
      std::string(256, ']'),  std::string(256, '\\'), std::string(256, '\xFF'),
      std::string(256, '0'),  std::string(256, '\0'), std::string(256, ','),
      [] {
        std::string t;
        while (t.size() < 256) t += "\",\"x\":{\"dtype\":\"U8\"}}]1e5\xC3";
        return t;
      }(),
  };
  for (const auto& json : corpus) {
    INFO("header JSON: " << json);
    const std::uint64_t file_size = 8 + json.size() + 4;
    const auto alone = to_bytes(json);
    auto copied = tf::parse_header(alone, file_size, 0);
    for (std::size_t t = 0; t < tails.size(); ++t) {
      INFO("tail " << t << " (starts with byte " << static_cast<int>(static_cast<unsigned char>(tails[t][0]))
                   << ")");
      const auto buffer = to_bytes(json + tails[t]);
      const auto header = std::span<const std::byte>(buffer).first(json.size());
      auto in_place = tf::parse_header(header, file_size, tails[t].size());
      REQUIRE(in_place.has_value() == copied.has_value());
      if (copied) {
        CHECK(in_place->tensors().size() == copied->tensors().size());
        CHECK(in_place->header_size == copied->header_size);
        const auto* iw = in_place->find("w");
        const auto* cw = copied->find("w");
        CHECK((iw == nullptr) == (cw == nullptr));
        if (iw && cw) CHECK(tftest::dims(iw->shape) == tftest::dims(cw->shape));
      } else {
        CHECK(in_place.error().code == copied.error().code);
      }
    }
  }
}

TEST_CASE("header: parse_file_prefix on a whole file uses the data as padding and still parses it right",
          "[header][json][in-place]") {
  // Data bytes that look like JSON must not leak into the header.
  std::string data;
  while (data.size() < 256) data += "\"}],{\"x\":1}\xFF";
  data.resize(256);
  const std::string json = object({entry("blob", "U8", "[256]", 0, 256)});
  const std::string file = file_prefix(json) + data;
  const auto bytes = to_bytes(file);
  auto r = tf::parse_file_prefix(bytes, bytes.size());
  if (!r) FAIL("parse failed: " << r.error().message);
  REQUIRE(r->tensors().size() == 1u);
  CHECK(r->file_range(r->tensors()[0]) == tf::ByteRange{8 + json.size(), 256});

  // A header cut short inside a string: the data's quote must not close it.
  const std::string cut = "{\"blob";
  const std::string bad_file = file_prefix(cut) + data;
  const auto bad_bytes = to_bytes(bad_file);
  CHECK_ERROR(tf::parse_file_prefix(bad_bytes, bad_bytes.size()), ErrorCode::HeaderJson);
}

// --- duplicate keys ------------------------------------------------------------------------

TEST_CASE("header: duplicate tensor names are refused (DuplicateKey) naming the tensor",
          "[header][duplicate]") {
  SECTION("two entries that tile the data section") {
    const auto json = object({entry("dup_w", "F32", "[1]", 0, 4), entry("dup_w", "F32", "[1]", 4, 8)});
    CHECK_ERROR(parse(json, 8), ErrorCode::DuplicateKey, "dup_w");
  }
  SECTION("the same entry twice (would also overlap)") {
    const auto json = object({entry("dup_w", "F32", "[1]", 0, 4), entry("dup_w", "F32", "[1]", 0, 4)});
    CHECK_ERROR(parse(json, 4), ErrorCode::DuplicateKey, "dup_w");
  }
  SECTION("__metadata__ twice") {
    const auto json = object({raw("__metadata__", "{\"a\":\"1\"}"), entry("w", "F32", "[1]", 0, 4),
                              raw("__metadata__", "{\"b\":\"2\"}")});
    CHECK_ERROR(parse(json, 4), ErrorCode::DuplicateKey, "__metadata__");
  }
}

TEST_CASE("header: duplicate keys inside a tensor entry are refused (DuplicateKey)",
          "[header][duplicate]") {
  const std::vector<std::pair<const char*, std::string>> cases = {
      {"dtype twice",
       "{\"w\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}"},
      {"dtype twice with different values",
       "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"dtype\":\"I32\"}}"},
      {"shape twice",
       "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"shape\":[1],\"data_offsets\":[0,4]}}"},
      {"data_offsets twice",
       "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"data_offsets\":[0,4]}}"},
      {"an unknown field twice",
       "{\"w\":{\"dtype\":\"F32\",\"x\":1,\"shape\":[1],\"x\":2,\"data_offsets\":[0,4]}}"},
      {"a duplicate key inside an unknown nested object",
       "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],"
       "\"extra\":{\"k\":1,\"k\":2}}}"},
      {"a duplicate key in an object inside an unknown array",
       "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],"
       "\"extra\":[1,{\"deep\":{\"k\":1,\"k\":1}}]}}"},
  };
  for (const auto& [what, text] : cases) {
    INFO("case: " << what);
    std::string json = text;
    json.replace(json.find("\"w\""), 3, "\"dup_in_t\"");
    CHECK_ERROR(parse(json, 4), ErrorCode::DuplicateKey, "dup_in_t");
  }
}

TEST_CASE("header: duplicate keys inside __metadata__ are refused (DuplicateKey)",
          "[header][duplicate][metadata]") {
  const auto json = object({raw("__metadata__", "{\"format\":\"pt\",\"format\":\"np\"}"),
                            entry("w", "F32", "[1]", 0, 4)});
  CHECK_ERROR(parse(json, 4), ErrorCode::DuplicateKey, "format");
  const auto no_tensors = object({raw("__metadata__", "{\"k\":\"a\",\"k\":\"a\"}")});
  CHECK_ERROR(parse(no_tensors, 0), ErrorCode::DuplicateKey, "__metadata__");
}

// --- __metadata__ --------------------------------------------------------------------------

TEST_CASE("header: __metadata__ of strings is kept; null or absent means no metadata",
          "[header][metadata]") {
  SECTION("strings") {
    auto r = parse(object({raw("__metadata__", "{\"format\":\"pt\",\"note\":\"a \\\"q\\\" \\u00e9\"}"),
                           entry("w", "F32", "[1]", 0, 4)}),
                   4);
    REQUIRE(r.has_value());
    REQUIRE(r->metadata.has_value());
    const tf::Metadata expected = {{"format", "pt"}, {"note", "a \"q\" \xC3\xA9"}};
    CHECK(*r->metadata == expected);
    CHECK(r->find("__metadata__") == nullptr);
    CHECK(r->tensors().size() == 1);
  }
  SECTION("null") {
    auto r = parse(object({raw("__metadata__", "null"), entry("w", "F32", "[1]", 0, 4)}), 4);
    REQUIRE(r.has_value());
    CHECK_FALSE(r->metadata.has_value());
    CHECK(r->tensors().size() == 1);
  }
  SECTION("absent") {
    auto r = parse(object({entry("w", "F32", "[1]", 0, 4)}), 4);
    REQUIRE(r.has_value());
    CHECK_FALSE(r->metadata.has_value());
  }
  SECTION("empty object") {
    auto r = parse(object({raw("__metadata__", "{}")}), 0);
    REQUIRE(r.has_value());
    REQUIRE(r->metadata.has_value());
    CHECK(r->metadata->empty());
  }
}

TEST_CASE("header: __metadata__ with non-string values is refused (InvalidMetadata) naming the key",
          "[header][metadata]") {
  for (const char* value : {"1", "1.5", "true", "null", "{\"x\":\"y\"}", "[\"a\"]"}) {
    INFO("value: " << value);
    const auto json = object({raw("__metadata__", std::string("{\"ok\":\"s\",\"bad_key\":") + value + "}"),
                              entry("w", "F32", "[1]", 0, 4)});
    CHECK_ERROR(parse(json, 4), ErrorCode::InvalidMetadata, "bad_key");
  }
}

TEST_CASE("header: __metadata__ that is not an object (or null) is refused (InvalidMetadata)",
          "[header][metadata]") {
  for (const char* value : {"\"pt\"", "1", "true", "[]", "[[\"a\",\"b\"]]"}) {
    INFO("value: " << value);
    const auto json = object({raw("__metadata__", value), entry("w", "F32", "[1]", 0, 4)});
    CHECK_ERROR(parse(json, 4), ErrorCode::InvalidMetadata, "__metadata__");
  }
}

// --- tensor entries ------------------------------------------------------------------------

TEST_CASE("header: unknown fields in a tensor entry are ignored", "[header][entry]") {
  const std::string json =
      "{\"w\":{\"note\":\"hi\",\"dtype\":\"F32\",\"extra\":{\"nested\":[1,{\"a\":null}]},"
      "\"shape\":[2],\"quant\":1.5,\"data_offsets\":[0,8],\"flag\":false}}";
  auto r = parse(json, 8);
  REQUIRE(r.has_value());
  const auto* t = r->find("w");
  REQUIRE(t != nullptr);
  CHECK(t->dtype == DType::F32);
  CHECK(tftest::dims(t->shape) == std::vector<std::uint64_t>{2});
  CHECK(t->begin == 0u);
  CHECK(t->end == 8u);
}

TEST_CASE("header: a tensor entry that is not an object or misses a field is refused (InvalidEntry)",
          "[header][entry]") {
  const std::vector<std::pair<const char*, std::string>> cases = {
      {"entry is a number", "{\"bad_t\":1}"},
      {"entry is a string", "{\"bad_t\":\"F32\"}"},
      {"entry is an array", "{\"bad_t\":[\"F32\",[1],[0,4]]}"},
      {"entry is null", "{\"bad_t\":null}"},
      {"missing dtype", "{\"bad_t\":{\"shape\":[1],\"data_offsets\":[0,4]}}"},
      {"missing shape", "{\"bad_t\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}"},
      {"missing data_offsets", "{\"bad_t\":{\"dtype\":\"F32\",\"shape\":[1]}}"},
      {"empty entry", "{\"bad_t\":{}}"},
  };
  for (const auto& [what, json] : cases) {
    INFO("case: " << what);
    CHECK_ERROR(parse(json, 4), ErrorCode::InvalidEntry, "bad_t");
  }
}

TEST_CASE("header: dtype names are exact and case-sensitive (InvalidDtype)", "[header][dtype]") {
  for (const char* dtype : {"bf16", "Bf16", "f32", "BF16 ", " BF16", "F8_E4M3FN", "float32", "",
                            "bool", "F4 ", "F6"}) {
    INFO("dtype: '" << dtype << "'");
    CHECK_ERROR(parse(object({entry("bad_dtype", dtype, "[2]", 0, 4)}), 4), ErrorCode::InvalidDtype,
                "bad_dtype");
  }
  SECTION("dtype that is not a string") {
    for (const char* value : {"16", "null", "[\"BF16\"]", "{}"}) {
      INFO("dtype value: " << value);
      const std::string json = std::string("{\"bad_dtype\":{\"dtype\":") + value +
                               ",\"shape\":[2],\"data_offsets\":[0,4]}}";
      CHECK_ERROR(parse(json, 4), ErrorCode::InvalidDtype, "bad_dtype");
    }
  }
}

TEST_CASE("dtype: all 22 dtypes have their on-disk names and sizes in bits", "[dtype]") {
  const std::vector<std::tuple<DType, std::string_view, unsigned>> table = {
      {DType::BOOL, "BOOL", 8},         {DType::F4, "F4", 4},
      {DType::F6_E2M3, "F6_E2M3", 6},   {DType::F6_E3M2, "F6_E3M2", 6},
      {DType::U8, "U8", 8},             {DType::I8, "I8", 8},
      {DType::F8_E5M2, "F8_E5M2", 8},   {DType::F8_E4M3, "F8_E4M3", 8},
      {DType::F8_E8M0, "F8_E8M0", 8},   {DType::F8_E4M3FNUZ, "F8_E4M3FNUZ", 8},
      {DType::F8_E5M2FNUZ, "F8_E5M2FNUZ", 8},
      {DType::I16, "I16", 16},          {DType::U16, "U16", 16},
      {DType::F16, "F16", 16},          {DType::BF16, "BF16", 16},
      {DType::I32, "I32", 32},          {DType::U32, "U32", 32},
      {DType::F32, "F32", 32},          {DType::C64, "C64", 64},
      {DType::F64, "F64", 64},          {DType::I64, "I64", 64},
      {DType::U64, "U64", 64},
  };
  REQUIRE(table.size() == tf::kDTypeCount);
  REQUIRE(tf::all_dtypes().size() == 22u);
  for (std::size_t i = 0; i < table.size(); ++i) {
    const auto& [dtype, name, bits] = table[i];
    INFO("dtype " << name);
    CHECK(tf::all_dtypes()[i] == dtype);
    CHECK(tf::to_string(dtype) == name);
    CHECK(tf::dtype_bits(dtype) == bits);
    auto parsed = tf::parse_dtype(name);
    REQUIRE(parsed.has_value());
    CHECK(*parsed == dtype);
  }
  CHECK_FALSE(tf::parse_dtype("bf16").has_value());
  CHECK_FALSE(tf::parse_dtype("").has_value());
  CHECK_FALSE(tf::parse_dtype("F8_E4M3FN").has_value());
}

TEST_CASE("header: every one of the 22 dtypes is accepted with its size in bits",
          "[header][dtype]") {
  // Shape [2, 4] (8 elements) takes exactly `bits` bytes for every dtype.
  std::string json = "{";
  std::uint64_t offset = 0;
  for (DType dt : tf::all_dtypes()) {
    const std::uint64_t bytes = tf::dtype_bits(dt);
    if (offset != 0) json += ",";
    json += entry("t_" + std::string(tf::to_string(dt)), tf::to_string(dt), "[2,4]", offset,
                  offset + bytes);
    offset += bytes;
  }
  json += "}";
  auto r = parse(json, offset);
  REQUIRE(r.has_value());
  REQUIRE(r->tensors().size() == 22u);
  for (DType dt : tf::all_dtypes()) {
    const std::string name = "t_" + std::string(tf::to_string(dt));
    INFO("tensor " << name);
    const auto* t = r->find(name);
    REQUIRE(t != nullptr);
    CHECK(t->dtype == dt);
    CHECK(t->num_elements() == 8u);
    CHECK(t->nbytes() == tf::dtype_bits(dt));
  }
}

TEST_CASE("header: shape must be an array of non-negative integers (InvalidShape)",
          "[header][shape]") {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {"float", "[1.0]"},
      {"float among integers", "[2,1.0]"},
      {"exponent", "[1e2]"},
      {"upper-case exponent", "[1E0]"},
      {"fraction", "[0.5]"},
      {"negative", "[-1]"},
      {"negative among integers", "[4,-4]"},
      {"string", "[\"4\"]"},
      {"nested array", "[[4]]"},
      {"null", "[null]"},
      {"boolean", "[true]"},
      {"object", "[{}]"},
      {"not an array (string)", "\"4\""},
      {"not an array (number)", "4"},
      {"not an array (object)", "{\"0\":4}"},
      {"not an array (null)", "null"},
  };
  for (const auto& [what, shape] : cases) {
    INFO("case: " << what << " shape " << shape);
    CHECK_ERROR(parse(object({entry("bad_shape", "U8", shape, 0, 4)}), 4), ErrorCode::InvalidShape,
                "bad_shape");
  }
}

TEST_CASE("header: data_offsets must be exactly two non-negative integers (InvalidOffsets)",
          "[header][offsets]") {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {"one element", "[0]"},
      {"three elements", "[0,4,8]"},
      {"empty", "[]"},
      {"float begin", "[0.0,4]"},
      {"float end", "[0,4.0]"},
      {"exponent", "[0,4e0]"},
      {"negative begin", "[-1,4]"},
      {"negative end", "[0,-4]"},
      {"strings", "[\"0\",\"4\"]"},
      {"null", "[0,null]"},
      {"nested", "[[0,4]]"},
      {"not an array (string)", "\"0,4\""},
      {"not an array (object)", "{\"begin\":0,\"end\":4}"},
      {"not an array (null)", "null"},
  };
  for (const auto& [what, offsets] : cases) {
    INFO("case: " << what << " data_offsets " << offsets);
    const std::string json = std::string("{\"bad_offsets\":{\"dtype\":\"F32\",\"shape\":[1],"
                                         "\"data_offsets\":") +
                             offsets + "}}";
    CHECK_ERROR(parse(json, 4), ErrorCode::InvalidOffsets, "bad_offsets");
  }
}

TEST_CASE("header: data_offsets with begin after end are refused naming the tensor and offsets",
          "[header][offsets]") {
  const auto json = object({entry("backwards", "U8", "[0]", 12, 8)});
  CHECK_ERROR(parse(json, 12), ErrorCode::InvalidOffsets, "backwards", "12", "8");
}

// --- sizes -----------------------------------------------------------------------------------

TEST_CASE("header: sub-byte dtypes need a whole number of bytes (SizeMismatch)",
          "[header][size][subbyte]") {
  const std::vector<std::tuple<const char*, const char*, std::uint64_t>> refused = {
      {"F4", "[3]", 2},       {"F4", "[3]", 1},      {"F4", "[1]", 1},
      {"F4", "[3,3]", 5},     {"F6_E2M3", "[3]", 3}, {"F6_E3M2", "[5]", 4},
      {"F6_E3M2", "[2]", 2},
  };
  for (const auto& [dtype, shape, bytes] : refused) {
    INFO(dtype << " shape " << shape << " with " << bytes << " bytes");
    CHECK_ERROR(parse(object({entry("packed", dtype, shape, 0, bytes)}), bytes),
                ErrorCode::SizeMismatch, "packed");
  }
  const std::vector<std::tuple<const char*, const char*, std::uint64_t>> accepted = {
      {"F4", "[4]", 2},       {"F4", "[2]", 1},          {"F4", "[3,2]", 3},
      {"F6_E2M3", "[4]", 3},  {"F6_E3M2", "[4,4]", 12},  {"F6_E2M3", "[0]", 0},
  };
  for (const auto& [dtype, shape, bytes] : accepted) {
    INFO(dtype << " shape " << shape << " with " << bytes << " bytes");
    auto r = parse(object({entry("packed", dtype, shape, 0, bytes)}), bytes);
    REQUIRE(r.has_value());
    REQUIRE(r->tensors().size() == 1u);
    CHECK(r->tensors()[0].nbytes() == bytes);
  }
}

TEST_CASE("header: a byte length that does not match shape and dtype is refused (SizeMismatch)",
          "[header][size]") {
  // F32 [2, 3] needs 24 bytes.
  CHECK_ERROR(parse(object({entry("short_w", "F32", "[2,3]", 0, 20)}), 20),
              ErrorCode::SizeMismatch, "short_w", "20");
  CHECK_ERROR(parse(object({entry("long_w", "F32", "[2,3]", 0, 28)}), 28),
              ErrorCode::SizeMismatch, "long_w", "28");
  // The mismatch is caught in a later tensor too, not only in the first one.
  CHECK_ERROR(parse(object({entry("ok", "U8", "[4]", 0, 4), entry("bad_second", "BF16", "[4]", 4, 10)}),
                    10),
              ErrorCode::SizeMismatch, "bad_second");
  // A scalar is one element.
  CHECK_ERROR(parse(object({entry("scalar_w", "F64", "[]", 0, 4)}), 4), ErrorCode::SizeMismatch,
              "scalar_w");
  // An empty tensor takes no bytes.
  CHECK_ERROR(parse(object({entry("empty_w", "F32", "[0,7]", 0, 4)}), 4), ErrorCode::SizeMismatch,
              "empty_w");
}

TEST_CASE("header: an element count that overflows 64 bits is refused (Overflow)",
          "[header][size][overflow]") {
  CHECK_ERROR(parse(object({entry("huge", "U8", "[4294967296,4294967296,2]", 0, 0)}), 0),
              ErrorCode::Overflow, "huge");
  CHECK_ERROR(parse(object({entry("huge", "U8", "[18446744073709551615,2]", 0, 0)}), 0),
              ErrorCode::Overflow, "huge");
  // Overflowed products must not wrap around to a size that matches the offsets:
  // 2^32 * 2^32 * 1 wraps to 0 and would "match" data_offsets [0, 0].
  CHECK_ERROR(parse(object({entry("wraps", "U8", "[4294967296,4294967296]", 0, 0)}), 0),
              ErrorCode::Overflow, "wraps");
}

TEST_CASE("header: elements x bits that overflows 64 bits is refused (Overflow)",
          "[header][size][overflow]") {
  // 2^61 elements x 8 bits = 2^64; wrapped it would be 0 bits and "match" [0, 0].
  CHECK_ERROR(parse(object({entry("bits_u8", "U8", "[2305843009213693952]", 0, 0)}), 0),
              ErrorCode::Overflow, "bits_u8");
  // 2^58 x 64 bits = 2^64.
  CHECK_ERROR(parse(object({entry("bits_f64", "F64", "[288230376151711744]", 0, 0)}), 0),
              ErrorCode::Overflow, "bits_f64");
  // 2^62 F4 elements are 2^61 bytes (fits), but 2^64 bits overflows the bit count.
  CHECK_ERROR(parse(object({entry("bits_f4", "F4", "[4611686018427387904]", 0, 0)}), 0),
              ErrorCode::Overflow, "bits_f4");
}

// --- layout of the data section ----------------------------------------------------------

TEST_CASE("header: a hole between tensors is refused with both tensors named (HoleOrOverlap)",
          "[header][layout]") {
  const auto json = object({entry("first_t", "F32", "[1]", 0, 4), entry("second_t", "F32", "[1]", 8, 12)});
  CHECK_ERROR(parse(json, 12), ErrorCode::HoleOrOverlap, "first_t", "second_t", "4", "8");
}

TEST_CASE("header: overlapping tensors are refused with both tensors named (HoleOrOverlap)",
          "[header][layout]") {
  const auto json = object({entry("first_t", "F32", "[2]", 0, 8), entry("second_t", "F32", "[2]", 4, 12)});
  CHECK_ERROR(parse(json, 12), ErrorCode::HoleOrOverlap, "first_t", "second_t");
  SECTION("one tensor inside another") {
    const auto inside = object({entry("outer_t", "U8", "[16]", 0, 16), entry("inner_t", "U8", "[4]", 4, 8)});
    CHECK_ERROR(parse(inside, 16), ErrorCode::HoleOrOverlap, "outer_t", "inner_t");
  }
  SECTION("an empty tensor inside another one's bytes") {
    const auto inside = object({entry("outer_t", "U8", "[16]", 0, 16), entry("empty_t", "U8", "[0]", 4, 4)});
    CHECK_ERROR(parse(inside, 16), ErrorCode::HoleOrOverlap, "empty_t");
  }
}

TEST_CASE("header: a first tensor that does not start at offset 0 is refused (HoleOrOverlap)",
          "[header][layout]") {
  const auto json = object({entry("late_t", "F32", "[1]", 4, 8)});
  CHECK_ERROR(parse(json, 8), ErrorCode::HoleOrOverlap, "late_t", "4");
}

TEST_CASE("header: bytes after the last tensor are refused (DataSizeMismatch)", "[header][layout]") {
  const auto json = object({entry("a_t", "U8", "[2]", 0, 2), entry("last_t", "F32", "[1]", 2, 6)});
  CHECK_ERROR(parse(json, 9), ErrorCode::DataSizeMismatch, "last_t", "6");
  CHECK_ERROR(parse(json, 7), ErrorCode::DataSizeMismatch, "last_t");
}

TEST_CASE("header: a last tensor ending past the end of the file is refused (DataSizeMismatch)",
          "[header][layout]") {
  const auto json = object({entry("a_t", "U8", "[2]", 0, 2), entry("cut_t", "F32", "[4]", 2, 18)});
  CHECK_ERROR(parse(json, 10), ErrorCode::DataSizeMismatch, "cut_t", "18");
  CHECK_ERROR(parse(json, 0), ErrorCode::DataSizeMismatch, "cut_t");
  CHECK_ERROR(parse(json, 17), ErrorCode::DataSizeMismatch, "cut_t");
  CHECK(parse(json, 18).has_value());
}

TEST_CASE("header: an empty tensor (shape [0,7]) and a scalar (shape []) are valid",
          "[header][layout]") {
  const auto json = object({entry("scalar", "F32", "[]", 0, 4), entry("empty", "F32", "[0,7]", 4, 4),
                            entry("after", "U8", "[3]", 4, 7)});
  auto r = parse(json, 7);
  REQUIRE(r.has_value());
  REQUIRE(r->tensors().size() == 3u);
  const auto* scalar = r->find("scalar");
  const auto* empty = r->find("empty");
  REQUIRE(scalar != nullptr);
  REQUIRE(empty != nullptr);
  CHECK(scalar->shape.empty());
  CHECK(scalar->num_elements() == 1u);
  CHECK(scalar->nbytes() == 4u);
  CHECK(tftest::dims(empty->shape) == std::vector<std::uint64_t>{0, 7});
  CHECK(empty->num_elements() == 0u);
  CHECK(empty->nbytes() == 0u);
  CHECK(empty->begin == 4u);

  SECTION("only empty tensors and no data") {
    auto e = parse(object({entry("e1", "F32", "[0]", 0, 0), entry("e2", "BF16", "[3,0,2]", 0, 0)}), 0);
    REQUIRE(e.has_value());
    CHECK(e->tensors().size() == 2u);
    CHECK(e->data_size == 0u);
  }
  SECTION("an empty tensor at the very end") {
    auto e = parse(object({entry("w", "U8", "[4]", 0, 4), entry("tail", "F32", "[0]", 4, 4)}), 4);
    REQUIRE(e.has_value());
    CHECK(e->tensors().size() == 2u);
  }
}

TEST_CASE("header: tensors listed out of offset order are accepted and returned sorted",
          "[header][layout]") {
  const auto json = object({entry("c", "F32", "[1]", 8, 12), entry("a", "F32", "[1]", 0, 4),
                            entry("d", "F32", "[2]", 12, 20), entry("b", "F32", "[1]", 4, 8)});
  auto r = parse(json, 20);
  REQUIRE(r.has_value());
  const auto& ts = r->tensors();
  REQUIRE(ts.size() == 4u);
  const std::vector<std::string> names = {tftest::str(ts[0].name), tftest::str(ts[1].name),
                                          tftest::str(ts[2].name), tftest::str(ts[3].name)};
  CHECK(names == std::vector<std::string>{"a", "b", "c", "d"});
  for (std::size_t i = 1; i < ts.size(); ++i) CHECK(ts[i - 1].end == ts[i].begin);
  REQUIRE(r->find("d") != nullptr);
  CHECK(r->find("d")->begin == 12u);
  CHECK(tftest::dims(r->find("d")->shape) == std::vector<std::uint64_t>{2});
}

TEST_CASE("header: empty header {} is valid with no data and refused with trailing data",
          "[header][layout]") {
  for (const char* json : {"{}", "{}      ", "{ }"}) {
    INFO("header: '" << json << "'");
    auto r = parse(json, 0);
    REQUIRE(r.has_value());
    CHECK(r->tensors().empty());
    CHECK_FALSE(r->metadata.has_value());
    CHECK(r->data_size == 0u);
    CHECK(r->find("") == nullptr);
  }
  CHECK_ERROR(parse("{}      ", 1), ErrorCode::DataSizeMismatch);
  CHECK_ERROR(parse("{}", 100), ErrorCode::DataSizeMismatch, "100");

  // Metadata alone is still an empty file.
  auto md = parse(object({raw("__metadata__", "{\"a\":\"b\"}")}), 0);
  REQUIRE(md.has_value());
  CHECK(md->tensors().empty());
  CHECK_ERROR(parse(object({raw("__metadata__", "{\"a\":\"b\"}")}), 8), ErrorCode::DataSizeMismatch);
}

TEST_CASE("header: 5000 tensors in shuffled order are sorted, indexed, and a duplicate among them refused",
          "[header][layout][large]") {
  constexpr std::uint64_t kCount = 5000;
  // Entry i is "layer.<i>" holding i % 5 F16 elements at a running offset.
  std::vector<std::string> entries;
  std::vector<std::uint64_t> begins;
  std::uint64_t offset = 0;
  for (std::uint64_t i = 0; i < kCount; ++i) {
    const std::uint64_t bytes = (i % 5) * 2;
    entries.push_back(entry("layer." + std::to_string(i), "F16", "[" + std::to_string(i % 5) + "]",
                            offset, offset + bytes));
    begins.push_back(offset);
    offset += bytes;
  }
  // A fixed permutation (multiplier coprime with kCount).
  auto build = [&](const std::vector<std::string>& es) {
    std::string json = "{";
    for (std::uint64_t k = 0; k < es.size(); ++k) {
      if (k) json += ",";
      json += es[(k * 2971) % es.size()];
    }
    return json + "}";
  };
  auto r = parse(build(entries), offset);
  REQUIRE(r.has_value());
  REQUIRE(r->tensors().size() == kCount);
  for (std::size_t k = 1; k < r->tensors().size(); ++k) {
    CHECK(r->tensors()[k - 1].end == r->tensors()[k].begin);
  }
  for (std::uint64_t i = 0; i < kCount; i += 499) {
    const auto* t = r->find("layer." + std::to_string(i));
    REQUIRE(t != nullptr);
    CHECK(t->begin == begins[i]);
  }

  // Rename an empty tensor to the name of another one: the layout stays valid, only the
  // duplicate name is wrong.
  auto dup = entries;
  dup[4000] = entry("layer.1234", "F16", "[0]", begins[4000], begins[4000]);  // 4000 % 5 == 0
  CHECK_ERROR(parse(build(dup), offset), ErrorCode::DuplicateKey, "layer.1234");
}

// --- the Header object ---------------------------------------------------------------------

TEST_CASE("header: find returns the tensor with the exact name, or nullptr", "[header][find]") {
  const auto json = object({entry("model.w", "BF16", "[2,2]", 0, 8), entry("model.b", "F32", "[2]", 8, 16),
                            raw("__metadata__", "{\"format\":\"pt\"}")});
  auto r = parse(json, 16);
  REQUIRE(r.has_value());
  const auto* w = r->find("model.w");
  REQUIRE(w != nullptr);
  CHECK(w->name == "model.w");
  CHECK(w->dtype == DType::BF16);
  CHECK(tftest::dims(w->shape) == std::vector<std::uint64_t>{2, 2});
  CHECK(w->begin == 0u);
  CHECK(w->end == 8u);
  const auto* b = r->find("model.b");
  REQUIRE(b != nullptr);
  CHECK(b->begin == 8u);
  CHECK(r->find("model") == nullptr);
  CHECK(r->find("model.w ") == nullptr);
  CHECK(r->find("MODEL.W") == nullptr);
  CHECK(r->find("__metadata__") == nullptr);
  CHECK(r->find("") == nullptr);

  SECTION("still works after the header is moved") {
    tf::Header moved = std::move(*r);
    const auto* w2 = moved.find("model.w");
    REQUIRE(w2 != nullptr);
    CHECK(w2->dtype == DType::BF16);
    REQUIRE(moved.tensors().size() == 2u);
    CHECK(moved.tensors()[0].name == "model.w");
    CHECK(moved.tensors()[1].name == "model.b");
    tf::Header assigned;
    assigned = std::move(moved);
    REQUIRE(assigned.find("model.b") != nullptr);
    CHECK(assigned.find("model.b")->end == 16u);
    CHECK(assigned.tensors().size() == 2u);
  }
}

TEST_CASE("header: names and shapes live in the header's storage, also after a move",
          "[header][find]") {
  const std::string long_name = "a_rather_long_tensor_name_that_is_not_a_small_string";
  auto r = parse(object({entry(long_name, "BF16", "[2,3,4,5,6,7,8,9]", 0, 725760),
                         entry("b", "U8", "[1]", 725760, 725761)}),
                 725761);
  REQUIRE(r.has_value());
  tf::Header moved = std::move(*r);
  const auto* t = moved.find(long_name);
  REQUIRE(t != nullptr);
  CHECK(t->name == long_name);
  // NUL-terminated, for C callers (tf_tensor_name).
  CHECK(t->name.data()[t->name.size()] == '\0');
  CHECK(tftest::dims(t->shape) == std::vector<std::uint64_t>{2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(t->nbytes() == 725760u);
  REQUIRE(moved.tensors().size() == 2u);
  CHECK(moved.tensors()[1].name == "b");
  CHECK(moved.tensors()[1].name.data()[1] == '\0');
}

TEST_CASE("header: data_offset and file_range are absolute positions in the file",
          "[header][find]") {
  std::string json = object({entry("a", "U8", "[3]", 0, 3), entry("b", "F32", "[2]", 3, 11)});
  json.append(5, ' ');
  const std::uint64_t n = json.size();
  auto r = parse(json, 11);
  REQUIRE(r.has_value());
  CHECK(r->header_size == n);
  CHECK(r->data_offset() == 8 + n);
  CHECK(r->data_size == 11u);
  const auto* b = r->find("b");
  REQUIRE(b != nullptr);
  CHECK(r->file_range(*b) == tf::ByteRange{8 + n + 3, 8});
  CHECK(r->file_range(*b).end() == 8 + n + 11);
  CHECK(r->file_range(*r->find("a")) == tf::ByteRange{8 + n, 3});
}

// The public types are plain: views of the header's arena, nothing of the allocator behind them,
// and no way to build a Header from outside the library except by parsing.
static_assert(std::is_same_v<decltype(tf::TensorInfo::name), std::string_view>);
static_assert(std::is_same_v<decltype(tf::TensorInfo::shape), std::span<const std::uint64_t>>);
static_assert(std::is_same_v<decltype(std::declval<const tf::Header&>().tensors()), std::span<const tf::TensorInfo>>);
template <class H>
concept settable_from_outside = requires(H& h, std::span<const tf::TensorInfo> ts) { h.set_tensors(ts); };
template <class H>
concept storage_visible = requires { typename H::Storage; };
static_assert(!settable_from_outside<tf::Header>,
              "Header::set_tensors is not public: use detail::HeaderBuilder inside the library");
static_assert(!storage_visible<tf::Header>, "Header::Storage is private");

TEST_CASE("header: HeaderBuilder::set_tensors (internal) copies names and shapes, refuses duplicate names and leaves the header empty",
          "[header][find]") {
  tf::Header h;
  std::string name = "same";
  const std::vector<std::uint64_t> shape = {4};
  std::vector<tf::TensorInfo> ts(2);
  ts[0].name = name;
  ts[0].dtype = DType::U8;
  ts[0].shape = shape;
  ts[0].begin = 0;
  ts[0].end = 4;
  ts[1] = ts[0];
  ts[1].begin = 4;
  ts[1].end = 8;
  CHECK_ERROR(tf::detail::HeaderBuilder::set_tensors(h, ts), ErrorCode::DuplicateKey, "same");
  CHECK(h.tensors().empty());
  CHECK(h.find("same") == nullptr);

  ts[1].name = "other";
  REQUIRE(tf::detail::HeaderBuilder::set_tensors(h, ts).has_value());
  name = "xxxx";  // the header holds copies
  REQUIRE(h.find("same") != nullptr);
  REQUIRE(h.find("other") != nullptr);
  CHECK(h.find("other")->begin == 4u);
  CHECK(tftest::dims(h.find("other")->shape) == std::vector<std::uint64_t>{4});
  CHECK(h.find("other")->shape.data() != shape.data());
}

TEST_CASE("header: num_elements is the product of the shape, 1 for a scalar", "[header][find]") {
  tf::TensorInfo t;
  CHECK(t.num_elements() == 1u);
  const std::vector<std::uint64_t> a = {2, 3, 4}, b = {5, 0, 3};
  t.shape = a;
  CHECK(t.num_elements() == 24u);
  t.shape = b;
  CHECK(t.num_elements() == 0u);
  t.begin = 10;
  t.end = 34;
  CHECK(t.nbytes() == 24u);
}

TEST_CASE("error: codes have stable names and map to the CLI exit codes", "[error]") {
  CHECK(tf::to_string(ErrorCode::HoleOrOverlap) == "HoleOrOverlap");
  CHECK(tf::to_string(ErrorCode::HeaderTooLarge) == "HeaderTooLarge");
  for (auto c : {ErrorCode::FileTooSmall, ErrorCode::HeaderTooLarge, ErrorCode::HeaderStart,
                 ErrorCode::HeaderJson, ErrorCode::DuplicateKey, ErrorCode::InvalidMetadata,
                 ErrorCode::InvalidEntry, ErrorCode::InvalidDtype, ErrorCode::InvalidShape,
                 ErrorCode::InvalidOffsets, ErrorCode::SizeMismatch, ErrorCode::Overflow,
                 ErrorCode::HoleOrOverlap, ErrorCode::DataSizeMismatch, ErrorCode::InvalidIndex,
                 ErrorCode::UnsafeShardName, ErrorCode::IndexMismatch}) {
    INFO(tf::to_string(c));
    CHECK(tf::exit_code(c) == 2);
  }
  CHECK(tf::exit_code(ErrorCode::Network) == 3);
  CHECK(tf::exit_code(ErrorCode::Integrity) == 4);
  for (auto c : {ErrorCode::InvalidArgument, ErrorCode::SliceOutOfRange, ErrorCode::SliceMisaligned,
                 ErrorCode::NotFound, ErrorCode::Io, ErrorCode::Cancelled, ErrorCode::NotFetched,
                 ErrorCode::Busy, ErrorCode::Unsplittable}) {
    INFO(tf::to_string(c));
    CHECK(tf::exit_code(c) == 1);
  }
  // Busy was appended: every earlier code keeps its value (the C++ enum is part of the ABI too).
  CHECK(static_cast<int>(ErrorCode::Integrity) == 29);
  CHECK(static_cast<int>(ErrorCode::Busy) == 30);
  CHECK(tf::to_string(ErrorCode::Busy) == "Busy");
  CHECK(static_cast<int>(ErrorCode::Unsplittable) == 31);
  CHECK(tf::to_string(ErrorCode::Unsplittable) == "Unsplittable");
  const tf::Error e{ErrorCode::Io, "read failed"};
  CHECK(e.with_context("x.safetensors").message == "x.safetensors: read failed");
  CHECK(e.with_context("x.safetensors").code == ErrorCode::Io);
}

// --- reference checkpoints written by huggingface/safetensors ---------------------------------

TEST_CASE("header: reference checkpoints parse and match MANIFEST.json (dtype, shape, nbytes, sha256)",
          "[header][reference]") {
  const auto dir = tftest::reference_dir();
  if (!dir) {
    WARN("TENSORFETCH_REFERENCE_DIR is unset or has no MANIFEST.json; reference files skipped");
    return;
  }
  const auto manifest_text = tftest::try_read_file(*dir / "MANIFEST.json");
  REQUIRE(manifest_text.has_value());
  const auto manifest = nlohmann::json::parse(*manifest_text);
  REQUIRE(manifest.is_object());
  REQUIRE_FALSE(manifest.empty());

  std::size_t files = 0;
  for (const auto& [relpath, info] : manifest.items()) {
    INFO("file " << relpath);
    const auto content = tftest::try_read_file(*dir / relpath);
    REQUIRE(content.has_value());
    ++files;
    CHECK(content->size() == info.at("size").get<std::uint64_t>());

    const auto bytes = to_bytes(*content);
    auto header = tf::parse_file_prefix(bytes, bytes.size());
    if (!header) FAIL("parse failed: " << header.error().message);

    // As a remote reader does: only the first 8 + N bytes at hand, the size from elsewhere.
    const auto head = std::span<const std::byte>(bytes).first(8 + header->header_size);
    auto from_head = tf::parse_file_prefix(head, bytes.size());
    if (!from_head) FAIL("parse of the first 8 + N bytes failed: " << from_head.error().message);
    CHECK(from_head->tensors().size() == header->tensors().size());
    CHECK(from_head->data_size == header->data_size);
    CHECK(header->header_size == info.at("header_len").get<std::uint64_t>());
    CHECK(header->data_offset() + header->data_size == content->size());

    const auto& md = info.at("metadata");
    if (md.is_null()) {
      CHECK_FALSE(header->metadata.has_value());
    } else {
      REQUIRE(header->metadata.has_value());
      CHECK(*header->metadata == md.get<tf::Metadata>());
    }

    const auto& tensors = info.at("tensors");
    CHECK(header->tensors().size() == tensors.size());
    for (const auto& [name, t] : tensors.items()) {
      INFO("tensor " << name);
      const auto* found = header->find(name);
      REQUIRE(found != nullptr);
      CHECK(tf::to_string(found->dtype) == t.at("dtype").get<std::string>());
      CHECK(tftest::dims(found->shape) == t.at("shape").get<std::vector<std::uint64_t>>());
      CHECK(found->nbytes() == t.at("nbytes").get<std::uint64_t>());
      const auto range = header->file_range(*found);
      REQUIRE(range.end() <= content->size());
      CHECK(tftest::sha256_hex(std::string_view(*content).substr(range.offset, range.length)) ==
            t.at("sha256").get<std::string>());
    }
  }
  CHECK(files == 5u);
}
