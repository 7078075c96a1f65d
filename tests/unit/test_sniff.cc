// SPDX-License-Identifier: Apache-2.0
// Other formats by their magic bytes (lib/format/sniff.h): the samples of testdata/other-formats
// are named by parse_file_prefix ("this is a GGUF file, not safetensors", exit code 2), byte
// prefixes that a valid safetensors file can share are never claimed, and files that are
// safetensors (valid or broken) are never called another format.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "format/sniff.h"
#include "tensorfetch/error.hpp"
#include "tensorfetch/format.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
namespace tf = tensorfetch;
using tf::ErrorCode;
using tf::detail::OtherFormat;
using tf::detail::sniff_other_format;
using tftest::le64;
using tftest::to_bytes;

namespace {

fs::path testdata() {
  const char* dir = std::getenv("TENSORFETCH_TESTDATA_DIR");
  REQUIRE(dir != nullptr);
  return dir;
}

std::string file(const fs::path& path) {
  auto bytes = tftest::try_read_file(path);
  REQUIRE(bytes.has_value());
  return *bytes;
}

std::string name_of(OtherFormat f) {
  switch (f) {
    case OtherFormat::Gguf: return "Gguf";
    case OtherFormat::Ggml: return "Ggml";
    case OtherFormat::PyTorchZip: return "PyTorchZip";
    case OtherFormat::NumpyZip: return "NumpyZip";
    case OtherFormat::Zip: return "Zip";
    case OtherFormat::PyTorchPickle: return "PyTorchPickle";
    case OtherFormat::Pickle: return "Pickle";
    case OtherFormat::Npy: return "Npy";
    case OtherFormat::Hdf5: return "Hdf5";
    case OtherFormat::Onnx: return "Onnx";
    case OtherFormat::Gzip: return "Gzip";
    case OtherFormat::Zstd: return "Zstd";
    case OtherFormat::Xz: return "Xz";
    case OtherFormat::Bzip2: return "Bzip2";
    case OtherFormat::SevenZip: return "SevenZip";
    case OtherFormat::Tar: return "Tar";
    case OtherFormat::GitLfsPointer: return "GitLfsPointer";
    case OtherFormat::Html: return "Html";
    case OtherFormat::Json: return "Json";
  }
  return "?";
}

// What sniff_other_format says of these bytes: a format name, or "" for nothing.
std::string sniff(std::string_view bytes) {
  const auto b = to_bytes(bytes);
  auto s = sniff_other_format(b);
  return s ? name_of(s->format) : "";
}

// How the message names each sample: the words after "this is ".
const std::vector<std::pair<std::string, std::string>> kNamed = {
    {"model.gguf", "a GGUF file (version 3)"},
    {"pytorch_model.bin", "a PyTorch checkpoint (zip)"},
    {"pytorch_model-legacy.bin", "a PyTorch checkpoint (legacy pickle format)"},
    {"state.pkl", "a Python pickle (protocol 4)"},
    {"array.npy", "a NumPy .npy file"},
    {"arrays.npz", "a NumPy .npz archive (zip)"},
    {"archive.zip", "a zip archive"},
    {"model.h5", "an HDF5 file"},
    {"userblock.h5", "an HDF5 file"},
    {"model.onnx", "an ONNX model (IR version 8)"},
    {"model.safetensors.gz", "a gzip-compressed file"},
    {"model.safetensors.zst", "a Zstandard-compressed file"},
    {"model.safetensors.xz", "an xz-compressed file"},
    {"model.safetensors.bz2", "a bzip2-compressed file"},
    {"model.tar", "a tar archive"},
    {"lfs-pointer/model.safetensors", "a Git LFS pointer file (for a file of 292 bytes)"},
    {"page.html", "a web page (HTML)"},
    {"config.json", "a JSON document"},
};

}  // namespace

TEST_CASE("every sample of testdata/other-formats is refused as safetensors, naming its format",
          "[sniff][testdata]") {
  const fs::path dir = testdata() / "other-formats";
  const auto formats = nlohmann::json::parse(file(dir / "formats.json"));
  REQUIRE(formats.size() == kNamed.size());
  for (const auto& [name, what] : kNamed) {
    INFO("sample: " << name);
    REQUIRE(formats.contains(name));
    const std::string bytes = file(dir / name);
    CHECK(sniff(bytes) == formats[name].get<std::string>());
    // The file-level parse refuses it (exit code 2) and says what it is instead.
    auto h = tf::parse_file_prefix(to_bytes(bytes), bytes.size());
    REQUIRE_FALSE(h.has_value());
    CHECK(tf::exit_code(h.error().code) == 2);
    CHECK_THAT(h.error().message, Catch::Matchers::StartsWith("this is " + what + ", not safetensors "
                                                              "(tensorfetch reads only safetensors)"));
  }
}

TEST_CASE("a refused length prefix names the format from the first bytes alone", "[sniff]") {
  // parse_header_size is what a remote open calls on the first window; it refuses these
  // lengths, and says what the file is, with the same code as without the sniffing.
  const fs::path dir = testdata() / "other-formats";
  auto gguf = file(dir / "model.gguf");
  auto r = tf::parse_header_size(to_bytes(gguf), gguf.size());
  CHECK_ERROR(r, ErrorCode::HeaderTooLarge, "this is a GGUF file (version 3), not safetensors");
  // Only the 8-byte prefix: still enough for GGUF; a zip says no more than "zip".
  r = tf::parse_header_size(to_bytes(gguf.substr(0, 8)), gguf.size());
  CHECK_ERROR(r, ErrorCode::HeaderTooLarge, "this is a GGUF file (version 3)");
  auto torch = file(dir / "pytorch_model.bin");
  r = tf::parse_header_size(to_bytes(torch.substr(0, 8)), torch.size());
  CHECK_ERROR(r, ErrorCode::HeaderTooLarge, "this is a zip archive, not safetensors");
  // A gzip file without a time stamp has a plausible length (559,903) that runs past the end.
  auto gz = file(dir / "model.safetensors.gz");
  r = tf::parse_header_size(to_bytes(gz), gz.size());
  CHECK_ERROR(r, ErrorCode::FileTooSmall, "this is a gzip-compressed file");
  // A tar archive whose first name is one letter: a length of 109 that the file holds, so the
  // prefix passes and the missing '{' is what refuses it (HeaderStart).
  auto tar = file(dir / "model.tar");
  auto n = tf::parse_header_size(to_bytes(tar), tar.size());
  REQUIRE(n.has_value());
  CHECK(*n == 109);
  CHECK_ERROR(tf::parse_file_prefix(to_bytes(tar), tar.size()), ErrorCode::HeaderStart, "this is a tar archive");
  // A Git LFS pointer gives the way out.
  auto lfs = file(dir / "lfs-pointer" / "model.safetensors");
  CHECK_ERROR(tf::parse_file_prefix(to_bytes(lfs), lfs.size()), ErrorCode::HeaderTooLarge,
              "Git LFS pointer", "git lfs pull", "hf://");
}

TEST_CASE("every valid safetensors file of testdata is read, and none is taken for another format",
          "[sniff][testdata]") {
  std::size_t files = 0;
  for (const auto& entry : fs::directory_iterator(testdata() / "safetensors" / "valid")) {
    INFO("file: " << entry.path().filename().string());
    const std::string bytes = file(entry.path());
    auto h = tf::parse_file_prefix(to_bytes(bytes), bytes.size());
    CHECK(h.has_value());
    if (!h) WARN(h.error().message);
    CHECK(sniff(bytes).empty());
    ++files;
  }
  CHECK(files >= 12);
}

TEST_CASE("a valid file whose length prefix is also a magic is read as safetensors", "[sniff]") {
  SECTION("header length 640 starts with pickle's PROTO 2 (testdata)") {
    const std::string bytes = file(testdata() / "safetensors" / "valid" / "length-640-pickle-prefix.safetensors");
    REQUIRE(bytes.substr(0, 2) == "\x80\x02");
    auto h = tf::parse_file_prefix(to_bytes(bytes), bytes.size());
    REQUIRE(h.has_value());
    CHECK(h->header_size == 640);
    CHECK(h->tensors().size() == 3);
  }
  SECTION("header length 559,903 is gzip's magic without a time stamp") {
    const std::uint64_t n = 0x088b1f;
    std::string bytes = le64(n) + "{}" + std::string(n - 2, ' ');
    REQUIRE(bytes.substr(0, 4) == std::string("\x1f\x8b\x08\x00", 4));
    auto h = tf::parse_file_prefix(to_bytes(bytes), bytes.size());
    REQUIRE(h.has_value());
    CHECK(h->tensors().empty());
    // Truncated, it is a truncated safetensors file, not a gzip file.
    bytes.resize(1000);
    auto t = tf::parse_file_prefix(to_bytes(bytes), bytes.size());
    CHECK_ERROR(t, ErrorCode::FileTooSmall, "past the end");
    CHECK_THAT(t.error().message, !Catch::Matchers::Contains("gzip"));
  }
}

TEST_CASE("broken safetensors files of testdata keep their own error, never another format's",
          "[sniff][testdata]") {
  const fs::path dir = testdata() / "safetensors" / "invalid";
  const auto codes = nlohmann::json::parse(file(dir / "codes.json"));
  REQUIRE(codes.size() >= 30);
  for (const auto& [name, code] : codes.items()) {
    INFO("file: " << name << ", expected " << code.get<std::string>());
    const std::string bytes = file(dir / name);
    auto h = tf::parse_file_prefix(to_bytes(bytes), bytes.size());
    REQUIRE_FALSE(h.has_value());
    INFO("error: " << h.error().message);
    CHECK(tf::to_string(h.error().code) == code.get<std::string>());
    CHECK_THAT(h.error().message, !Catch::Matchers::Contains("not safetensors"));
  }
}

TEST_CASE("magic prefixes: recognised, and never when they could start a valid file", "[sniff]") {
  struct Row {
    const char* what;
    std::string bytes;
    std::string format;  // "" = nothing recognised
  };
  const std::string tail(64, 'x');
  const std::vector<Row> rows = {
      {"empty input", "", ""},
      {"8 zero bytes (a length of 0)", std::string(8, '\0'), ""},
      {"random bytes", "\x13\x37\xde\xad\xbe\xef\x01\x02\x03\x04" + tail, ""},
      {"GGUF, version 3", "GGUF" + std::string("\x03\0\0\0", 4) + tail, "Gguf"},
      {"GGUF, unknown version", "GGUF" + std::string("\x09\0\0\0", 4) + tail, "Gguf"},
      {"GGUF magic alone (a 4-byte file)", "GGUF", "Gguf"},
      {"ggjt (GGML)", "tjgg" + std::string("\x03\0\0\0", 4) + tail, "Ggml"},
      {"zip whose entry name is cut", std::string("PK\x03\x04\x14\0\0\0", 8) + std::string(18, '\0') +
                                          std::string("\x14\0\0\0", 4) + "ar", "Zip"},
      {"zip, TorchScript data/0 first", std::string("PK\x03\x04\0\0\x08\x08", 8) + std::string(18, '\0') +
                                            std::string("\x09\0\0\0", 4) + "ts/data/0" + tail, "PyTorchZip"},
      {"zip whose first name ends beyond the 4 KiB looked at",
       std::string("PK\x03\x04\0\0\x08\x08", 8) + std::string(18, '\0') + std::string("\x10\x27\0\0", 4) +
           std::string(9991, 'a') + "/data.pkl", "Zip"},
      {"zip with version and flags 0, then '{': a plausible safetensors start",
       std::string("PK\x03\x04\0\0\0\0", 8) + "{" + tail, ""},
      {"zip with version and flags 0, then no '{'", std::string("PK\x03\x04\0\0\0\0", 8) + "\x08" + tail, "Zip"},
      {"empty zip (end of central directory only)", std::string("PK\x05\x06", 4) + std::string(18, '\0'), "Zip"},
      {"pickle protocol 2, EMPTY_DICT", "\x80\x02}q\x00X" + tail, "Pickle"},
      {"pickle protocol 5, FRAME", "\x80\x05\x95\x0a" + tail, "Pickle"},
      {"\\x80\\x02 then no opcode", std::string("\x80\x02\x00\x01\x02\x03\x04\x05\x06", 9) + tail, ""},
      {"\\x80\\x06: no such protocol", "\x80\x06}q" + tail, ""},
      {"length 640 then '{' (a safetensors start)", le64(640) + "{" + tail, ""},
      {"NumPy 1.0", std::string("\x93NUMPY\x01\x00", 8) + tail, "Npy"},
      {"NumPy, version 9", std::string("\x93NUMPY\x09\x00", 8) + tail, ""},
      {"HDF5 at 1024", std::string(1024, '\0') + "\x89HDF\r\n\x1a\n" + tail, "Hdf5"},
      {"HDF5 at 2048", std::string(2048, '\0') + "\x89HDF\r\n\x1a\n" + tail, "Hdf5"},
      {"HDF5 at 700 (no such offset)", std::string(700, '\x01') + "\x89HDF\r\n\x1a\n" + tail, ""},
      {"gzip without time stamp, then '{'", std::string("\x1f\x8b\x08\0\0\0\0\0", 8) + "{" + tail, ""},
      {"7z", std::string("7z\xbc\xaf\x27\x1c\0\x04", 8) + tail, "SevenZip"},
      {"zstd", "\x28\xb5\x2f\xfd\x20\x05" + tail, "Zstd"},
      {"bzip2 without its block size", "BZhx" + tail, ""},
      {"ONNX: ir_version, producer_name", "\x08\x07\x12\x07pytorch\x1a\x05" "2.1.0", "Onnx"},
      {"ONNX: ir_version, then a field that runs past the bytes held", "\x08\x09\x3a\xff\xff\x03" + tail, "Onnx"},
      {"ONNX-like: ir_version alone", "\x08\x07", ""},
      {"ONNX-like: ir_version 0", "\x08\x00\x12\x01" "a" + tail, ""},
      {"ONNX-like: an unknown field", "\x08\x07\x4a\x01" "a" + tail, ""},
      {"ONNX-like: field 2 with the wrong wire type", std::string("\x08\x07\x10\x01", 4) + tail, ""},
      {"ONNX-like: fields out of order", "\x08\x07\x3a\x01" "a\x12\x01" "b" + tail, ""},
      {"ONNX-like: a control character in producer_name", "\x08\x07\x12\x02\x01\x02" + tail, ""},
      {"HTML with a BOM, white space and capitals", "\xef\xbb\xbf \r\n<!DOCTYPE HTML PUBLIC>" + tail, "Html"},
      {"<html> in lower case", "<html><body>" + tail, "Html"},
      {"JSON object", "{\n  \"weight_map\": {}}" + tail, "Json"},
      {"'{' then a letter", "{weight" + tail, ""},
      {"plain text", "hello, world, this is text" + tail, ""},
  };
  for (const auto& row : rows) {
    INFO(row.what);
    CHECK(sniff(row.bytes) == row.format);
  }
}

TEST_CASE("explain_other_format keeps the code and leaves unrecognised bytes alone", "[sniff]") {
  const tf::Error original{ErrorCode::HeaderTooLarge, "header length 123 exceeds the limit"};
  const auto gguf = to_bytes("GGUF" + std::string("\x03\0\0\0", 4));
  auto e = tf::detail::explain_other_format(original, gguf);
  CHECK(e.code == ErrorCode::HeaderTooLarge);
  CHECK(e.message == "this is a GGUF file (version 3), not safetensors (tensorfetch reads only safetensors)");
  const auto other = to_bytes(std::string("\x01\x02\x03\x04\x05\x06\x07\x08", 8));
  e = tf::detail::explain_other_format(original, other);
  CHECK(e.code == original.code);
  CHECK(e.message == original.message);
}
