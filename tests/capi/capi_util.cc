// SPDX-License-Identifier: Apache-2.0
#include "capi_util.hpp"

#include <cstdio>
#include <cstring>

#include "support/bytes.hpp"
#include "support/files.hpp"
#include "support/process.hpp"

namespace capitest {

Opened try_open(const std::string& location, const tf_open_options* options) {
  tf_checkpoint* ckpt = nullptr;
  Error err;
  Opened r;
  r.code = tf_open(location.c_str(), options, &ckpt, err.out());
  r.ckpt.reset(ckpt);
  r.has_error = err.get() != nullptr;
  r.message = err.message();
  return r;
}

Checkpoint open_ok(const std::string& location, const tf_open_options* options) {
  Opened r = try_open(location, options);
  INFO("tf_open " << location << ": " << tf_code_name(r.code) << ": " << r.message);
  REQUIRE(r.code == TF_OK);
  CHECK_FALSE(r.has_error);
  REQUIRE(r.ckpt != nullptr);
  return std::move(r.ckpt);
}

tf_open_options remote_options(const std::string& endpoint, const std::string& cache, const std::string& hf_hub_cache) {
  tf_open_options o;
  tf_open_options_init(&o);
  o.endpoint = endpoint.c_str();
  o.cache_dir = cache.c_str();
  o.token = "";  // none, whatever the environment holds
  o.hf_hub_cache = hf_hub_cache.c_str();
  o.offline = 0;
  return o;
}

ServerFixture::~ServerFixture() {
  if (server) server->stop();
}

void ServerFixture::start(const tensorfetch::testing::Options& options) {
  server = std::make_unique<tensorfetch::testing::HubServer>(options);
  server->start();
  endpoint = server->endpoint();
}

tf_open_options ServerFixture::options(const std::string& cache_dir, const char* token) const {
  tf_open_options o = remote_options(endpoint, cache_dir, hf_none);
  o.token = token;
  return o;
}

Opened ServerFixture::try_open(const std::string& location, const std::string& cache_name, const char* token) const {
  const std::string dir = cache(cache_name);
  const tf_open_options o = options(dir, token);
  return capitest::try_open(location, &o);
}

Checkpoint ServerFixture::open(const std::string& location, const std::string& cache_name, const char* token) const {
  const std::string dir = cache(cache_name);
  const tf_open_options o = options(dir, token);
  return open_ok(location, &o);
}

void check_against_manifest(tf_checkpoint* ckpt, const nlohmann::json& manifest, const std::string& prefix) {
  const std::size_t n = tf_tensor_count(ckpt);
  CHECK(n > 0);
  for (std::size_t f = 0; f < tf_file_count(ckpt); ++f) {
    const std::string key = prefix + "/" + tf_file_path(ckpt, f);
    INFO("file " << key);
    REQUIRE(manifest.contains(key));
    std::size_t in_file = 0;
    for (std::size_t i = 0; i < n; ++i) in_file += tf_tensor_file_index(ckpt, i) == f ? 1 : 0;
    CHECK(in_file == manifest.at(key).at("tensors").size());
  }
  for (std::size_t i = 0; i < n; ++i) {
    const char* name = tf_tensor_name(ckpt, i);
    REQUIRE(name != nullptr);
    INFO("tensor " << name);
    CHECK(std::strcmp(tf_tensor_file(ckpt, i), tf_file_path(ckpt, tf_tensor_file_index(ckpt, i))) == 0);
    const std::string key = prefix + "/" + tf_tensor_file(ckpt, i);
    const auto& tensors = manifest.at(key).at("tensors");
    REQUIRE(tensors.contains(name));
    const auto& want = tensors.at(name);
    CHECK(tf_tensor_dtype(ckpt, i) == want.at("dtype").get<std::string>());
    std::size_t ndim = 99;
    const std::uint64_t* shape = tf_tensor_shape(ckpt, i, &ndim);
    const auto want_shape = want.at("shape").get<std::vector<std::uint64_t>>();
    CHECK((ndim == 0 ? shape == nullptr : shape != nullptr));
    CHECK(std::vector<std::uint64_t>(shape, shape + ndim) == want_shape);
    std::size_t found = 0;
    CHECK(tf_find(ckpt, name, &found) == 1);
    CHECK(found == i);
    const TensorBytes t = tensor_bytes(ckpt, i, name);
    CHECK(t.end - t.begin == t.length);
    CHECK((t.length == 0 || t.data != nullptr));
    CHECK(tftest::sha256_hex(std::string_view(static_cast<const char*>(t.data), t.length)) ==
          want.at("sha256").get<std::string>());
  }
}

void check_against_files(tf_checkpoint* ckpt, const fs::path& dir) {
  for (std::size_t f = 0; f < tf_file_count(ckpt); ++f) check_against_file(ckpt, f, dir / tf_file_path(ckpt, f));
}

void check_against_file(tf_checkpoint* ckpt, std::size_t f, const fs::path& path) {
  INFO("file " << path);
  const std::string bytes = tftest::read_file(path);
  REQUIRE(bytes.size() >= 8);
  CHECK(tf_file_size(ckpt, f) == bytes.size());
  const std::uint64_t header = header_length(bytes);
  std::uint64_t data_total = 0;
  for (std::size_t i = 0; i < tf_tensor_count(ckpt); ++i) {
    if (tf_tensor_file_index(ckpt, i) != f) continue;
    const char* name = tf_tensor_name(ckpt, i);
    INFO("tensor " << name);
    const TensorBytes t = tensor_bytes(ckpt, i, name);
    REQUIRE(t.length == t.end - t.begin);
    REQUIRE(8 + header + t.end <= bytes.size());
    CHECK((t.length == 0 || std::memcmp(t.data, bytes.data() + 8 + header + t.begin, t.length) == 0));
    data_total += t.length;
  }
  CHECK(data_total == bytes.size() - 8 - header);  // the tensors tile the data section
}

std::uint64_t header_length(std::string_view bytes) {
  REQUIRE(bytes.size() >= 8);
  std::uint64_t n = 0;
  for (std::size_t k = 0; k < 8; ++k) n |= std::uint64_t{static_cast<unsigned char>(bytes[k])} << (8 * k);
  return n;
}

TensorBytes tensor_bytes(tf_checkpoint* ckpt, std::size_t i, const char* name) {
  TensorBytes t;
  Error err;
  CHECK_CODE(tf_tensor_data(ckpt, name, &t.data, &t.length), TF_OK, err);
  CHECK_CODE(tf_tensor_data_offsets(ckpt, i, &t.begin, &t.end), TF_OK, err);
  return t;
}

void make_checkpoint(const fs::path& dir, int hidden, int vocab, int shards) {
  tftest::Child c(tftest::required_env("TENSORFETCH_MAKE_CHECKPOINT_BIN"),
                  {"-o", dir.string(), "--layers", "2", "--hidden", std::to_string(hidden), "--vocab", std::to_string(vocab),
                   "--shards", std::to_string(shards)},
                  {});
  REQUIRE(c.wait() == 0);
}

fs::path reference() {
  auto dir = tftest::reference_dir();
  if (!dir) FAIL("TENSORFETCH_REFERENCE_DIR is unset or holds no MANIFEST.json (run the tests through meson test)");
  return *dir;
}

const nlohmann::json& manifest() {
  static const nlohmann::json m = nlohmann::json::parse(tftest::read_file(reference() / "MANIFEST.json"));
  return m;
}

Source load_sources(tf_checkpoint* ckpt, const fs::path& repo) {
  Source src;
  for (std::size_t f = 0; f < tf_file_count(ckpt); ++f) {
    std::string bytes = tftest::read_file(repo / tf_file_path(ckpt, f));
    REQUIRE(bytes.size() >= 8);
    CHECK(tf_file_size(ckpt, f) == bytes.size());
    src.data_start.push_back(8 + header_length(bytes));
    src.sha256.push_back(tftest::sha256_hex(bytes));
    src.bytes.push_back(std::move(bytes));
  }
  return src;
}

tftest::ByteRange tensor_range(tf_checkpoint* ckpt, const Source& src, std::size_t i) {
  std::uint64_t b = 0, e = 0;
  REQUIRE(tf_tensor_data_offsets(ckpt, i, &b, &e) == TF_OK);
  const std::uint64_t start = src.data_start[tf_tensor_file_index(ckpt, i)];
  return {start + b, e - b};
}

std::vector<Ranges> wanted_ranges(tf_checkpoint* ckpt, const Source& src, const std::vector<std::string>& prefixes) {
  std::vector<Ranges> sets(src.files());
  for (std::size_t i = 0; i < tf_tensor_count(ckpt); ++i) {
    const std::string name = tf_tensor_name(ckpt, i);
    for (const auto& p : prefixes) {
      if (name.starts_with(p)) {
        sets[tf_tensor_file_index(ckpt, i)].push_back(tensor_range(ckpt, src, i));
        break;
      }
    }
  }
  for (auto& s : sets) s = tftest::normalized(s);
  return sets;
}

std::vector<Ranges> plan_ranges(const tf_plan* plan, const Source& src, std::uint64_t chunk) {
  std::vector<Ranges> sets(src.files());
  std::size_t last_file = 0;
  std::uint64_t last_end = 0;
  for (std::size_t i = 0; i < tf_plan_count(plan); ++i) {
    const std::size_t file = tf_plan_file(plan, i);
    const std::uint64_t offset = tf_plan_offset(plan, i), length = tf_plan_length(plan, i);
    const char* url = tf_plan_url(plan, i);
    const char* if_match = tf_plan_if_match(plan, i);
    INFO("transfer " << i << ": file " << file << ", offset " << offset << ", length " << length << ", "
                     << (url ? url : "(no URL)"));
    REQUIRE(file < src.files());
    CHECK(length > 0);
    CHECK(length <= chunk);
    CHECK(offset + length <= src.size(file));
    CHECK((i == 0 || file > last_file || (file == last_file && offset >= last_end)));  // in order
    last_file = file;
    last_end = offset + length;
    REQUIRE(url != nullptr);
    CHECK(std::string(url).starts_with("http://127.0.0.1:"));
    CHECK_THAT(url, Catch::Contains(src.sha256[file]));
    REQUIRE(if_match != nullptr);
    CHECK(std::string(if_match) == "\"" + src.sha256[file] + "\"");
    CHECK(tf_plan_send_token(plan, i) == 0);
    CHECK(tf_plan_expires_at(plan, i) == 0);  // not an s3:// location: no stated end
    sets[file].push_back({offset, length});
  }
  for (auto& s : sets) s = tftest::normalized(s);
  return sets;
}

std::string part_of(std::string_view full, const std::vector<std::uint64_t>& shape, const char* slice) {
  if (slice == nullptr) return std::string(full);
  unsigned long long a = 0, b = 0;
  const bool dim1 = std::sscanf(slice, "[:, %llu:%llu]", &a, &b) == 2;
  REQUIRE((dim1 || std::sscanf(slice, "[%llu:%llu]", &a, &b) == 2));
  REQUIRE(!shape.empty());
  const std::uint64_t row = full.size() / shape[0];
  if (!dim1) return std::string(full.substr(a * row, (b - a) * row));
  REQUIRE(shape.size() >= 2);
  const std::uint64_t elem = row / shape[1];  // bytes per index of dim 1
  std::string out;
  for (std::uint64_t r = 0; r < shape[0]; ++r) out += full.substr(r * row + a * elem, (b - a) * elem);
  return out;
}

TpSelection select_rank(tf_checkpoint* ckpt, std::size_t rank, std::size_t world) {
  Error err;
  tf_tp_selection* sel = nullptr;
  CHECK_CODE(tf_select_for_rank(ckpt, rank, world, nullptr, 0, &sel, err.out()), TF_OK, err);
  REQUIRE(sel != nullptr);
  return TpSelection(sel, &tf_tp_free);
}

}  // namespace capitest
