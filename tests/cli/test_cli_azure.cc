// SPDX-License-Identifier: Apache-2.0
// `az://` locations end to end (issue 22): the CLI against azurite (npm; Microsoft's emulator of
// the Blob API: containers, List Blobs with NextMarker, ranges, ETags, its error codes), which
// checks every SAS signature itself, behind tests/http/azure/azure_fixture.py, a proxy that logs
// each request. Asserted through that log (the SAS each request carried, ranges, If-Match,
// status) and the bytes written; the account key and every signature are looked for in every
// output, cache file and snapshot manifest.
#include <httplib.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "cli_util.hpp"
#include "store_tree.hpp"
#include "support/process.hpp"

using namespace clitest;

namespace {

constexpr const char* kAccount = "devstoreaccount1";
// azurite's account key (published; it is what azurite checks signatures with).
constexpr const char* kKey = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

// Whether azurite (tools/install-deps.sh: npm, into tools/node) is installed; WARNs (the suite is
// then skipped) when not.
bool azurite_available() {
  const fs::path src = tftest::required_env("TENSORFETCH_SOURCE_DIR");
  if (!fs::exists(src / "tools/node/node_modules/azurite/dist/src/blob/main.js")) {
    WARN("azurite is not installed (tools/install-deps.sh installs it with npm): Azure tests skipped");
    return false;
  }
  return true;
}

// azurite plus the logging proxy, on free ports, serving what `uploads` names (CONTAINER=DIR).
class AzureServer : public StoreFixture {
 public:
  explicit AzureServer(const std::vector<std::string>& uploads, const std::vector<std::string>& extra = {})
      : StoreFixture("Azure", "tests/http/azure/azure_fixture.py", args(uploads, extra), 90),
        sas_(read_file(dir() / "sas")) {}

  /// The BlobEndpoint of the emulated account.
  [[nodiscard]] std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port()) + "/" + kAccount; }
  /// A SAS (read, list) for the container `models`, made by the fixture.
  [[nodiscard]] const std::string& container_sas() const { return sas_; }

 private:
  static std::vector<std::string> args(const std::vector<std::string>& uploads, const std::vector<std::string>& extra) {
    // The fixture writes the container SAS into StoreFixture's directory.
    std::vector<std::string> out{"--sas-out", "{dir}/sas"};
    for (const auto& u : uploads) out.insert(out.end(), {"--upload", u});
    out.insert(out.end(), extra.begin(), extra.end());
    return out;
  }
  std::string sas_;
};

std::string connection_string(const std::string& endpoint, const std::string& key = kKey) {
  return std::string("DefaultEndpointsProtocol=http;AccountName=") + kAccount + ";AccountKey=" + key +
         ";BlobEndpoint=" + endpoint + ";";
}

// The emulator's connection string, a fresh cache; nothing of the test machine's own Azure setup.
struct AzureEnv {
  tftest::ScopedEnv env;
  AzureEnv(const fs::path& cache, const std::string& endpoint) {
    env.set("AZURE_STORAGE_CONNECTION_STRING", connection_string(endpoint));
    env.set("AZURE_STORAGE_ACCOUNT", std::nullopt);
    env.set("AZURE_STORAGE_ACCOUNT_KEY", std::nullopt);
    env.set("AZURE_STORAGE_SAS_TOKEN", std::nullopt);
    env.set("TENSORFETCH_CACHE", cache.string());
  }
};

// One test's world: the store tree (store_tree.hpp) as container `models` (and each of `more`),
// the environment pointing at it with a fresh cache.
struct AzureWorld {
  TempDir tmp;
  AzureServer az;
  AzureEnv env;
  explicit AzureWorld(const std::vector<std::string>& extra = {}, const std::vector<std::string>& more = {})
      : tmp("tf-azure-cli"), az(store_tree_uploads(tmp, more), extra), env(tmp / "cache", az.endpoint()) {}
};

// The signature of a SAS query ("" when none).
std::string sig_of(const std::string& query) {
  const auto at = query.find("sig=");
  return at == std::string::npos ? std::string() : query.substr(at + 4, query.find('&', at) - at - 4);
}

// No account key, no signature of `sas`, no `sig=` at all in `text`.
void check_no_secrets_in(const std::string& text, const std::string& sas = "") {
  CHECK(text.find(kKey) == std::string::npos);
  CHECK(text.find("sig=") == std::string::npos);
  if (!sas.empty()) CHECK(text.find(sig_of(sas)) == std::string::npos);
}

void check_no_secrets(const RunResult& r, const std::string& sas = "") {
  check_no_secrets_in(r.out, sas);
  check_no_secrets_in(r.err, sas);
}

// Every file under `dir`, read whole: no key, no signature.
void check_no_secrets_under(const fs::path& dir, const std::string& sas = "") {
  std::size_t files = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    ++files;
    INFO(e.path());
    check_no_secrets_in(read_file(e.path()), sas);
  }
  CHECK(files > 0);
}

}  // namespace

TEST_CASE("azure: inspect, get and download of a blob, an index prefix and a loose prefix; every request carries a service SAS azurite accepts") {
  if (!azurite_available()) return;
  AzureWorld world;
  const TempDir& tmp = world.tmp;
  const AzureServer& az = world.az;
  const std::string root = std::string("az://") + kAccount + "/models/";

  SECTION("a blob: inspect reads one window; get moves exactly the tensors asked for, with If-Match") {
    auto r = run({"inspect", root + "single/model.safetensors", "--json", "--window", "4096"});
    REQUIRE(r.exit_code == 0);
    check_no_secrets(r);
    const json j = json::parse(r.out);
    CHECK(j["tensors"].size() == 4);
    CHECK(j["files"][0]["size"] == 1'200'000 + j["files"][0]["header_size"].get<std::uint64_t>() + 8);
    auto reqs = az.requests();
    REQUIRE(reqs.size() == 1);
    CHECK(reqs[0]["path"] == "/devstoreaccount1/models/single/model.safetensors");
    CHECK(reqs[0]["auth"] == "sas");
    CHECK(reqs[0]["query"]["sr"] == "b");
    CHECK(reqs[0]["query"]["sp"] == "r");
    CHECK(reqs[0]["status"] == 206);
    CHECK(reqs[0]["range"] == "bytes=0-4095");
    az.clear();

    r = run({"get", root + "single/model.safetensors", "layers.1.weight", "layers.3.weight", "-o",
             (tmp / "out.safetensors").string(), "--window", "4096"});
    REQUIRE(r.exit_code == 0);
    check_no_secrets(r);
    const StFile out = read_safetensors(tmp / "out.safetensors");
    REQUIRE(out.tensors.size() == 2);
    CHECK(out.tensors.at("layers.1.weight").bytes == tftest::pattern_bytes(300'000, 2));
    CHECK(out.tensors.at("layers.3.weight").bytes == tftest::pattern_bytes(300'000, 4));
    std::uint64_t data_bytes = 0;
    for (const auto& q : az.requests()) {
      CHECK(q["auth"] == "sas");
      if (q["range"] != "bytes=0-4095") {
        CHECK(q["status"] == 206);
        CHECK(q["if_match"].is_string());  // the ETag the open saw pins every data range
        data_bytes += q["bytes"].get<std::uint64_t>();
      }
    }
    CHECK(data_bytes == 600'000);
    check_no_secrets_under(tmp / "cache");
  }

  SECTION("a prefix with an index: one listing (a container SAS to list), the index, the shard headers; download; offline") {
    auto r = run({"inspect", root + "sharded/", "--json"});
    REQUIRE(r.exit_code == 0);
    CHECK(json::parse(r.out)["sharded"] == true);
    auto reqs = az.requests();
    REQUIRE(reqs.size() == 4);
    CHECK(reqs[0]["path"] == "/devstoreaccount1/models");
    CHECK(reqs[0]["query"]["comp"] == "list");
    CHECK(reqs[0]["query"]["prefix"] == "sharded/");
    CHECK(reqs[0]["query"]["sr"] == "c");
    CHECK(reqs[0]["query"]["sp"] == "l");
    CHECK(reqs[1]["path"] == "/devstoreaccount1/models/sharded/model.safetensors.index.json");
    for (const auto& q : reqs) {
      CHECK(q["auth"] == "sas");
      CHECK(q["status"].get<int>() < 300);
    }

    r = run({"download", root + "sharded/", "-o", (tmp / "dl").string()});
    REQUIRE(r.exit_code == 0);
    check_no_secrets(r);
    for (const char* f : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}) {
      CHECK(read_file(tmp / "dl" / f) == read_file(tmp / "tree/sharded" / f));
    }
    check_no_secrets_under(tmp / "cache");

    // Offline: the snapshot the fetch recorded, no request, no credentials needed (the
    // endpoint, part of the store's identity, still from the connection string).
    az.clear();
    tftest::ScopedEnv no_creds;
    no_creds.set("AZURE_STORAGE_CONNECTION_STRING", "BlobEndpoint=" + az.endpoint());
    r = run({"get", root + "sharded/", "layers.2.weight", "-o", (tmp / "off.safetensors").string(), "--offline"});
    REQUIRE(r.exit_code == 0);
    CHECK(read_safetensors(tmp / "off.safetensors").tensors.at("layers.2.weight").bytes ==
          tftest::pattern_bytes(200'000, 4));
    CHECK(az.requests().empty());
  }

  SECTION("a prefix without an index or model.safetensors: every listed .safetensors file") {
    auto r = run({"inspect", root + "loose/", "--json"});
    REQUIRE(r.exit_code == 0);
    const json j = json::parse(r.out);
    REQUIRE(j["files"].size() == 2);
    CHECK(j["files"][0]["path"] == "part-a.safetensors");
    CHECK(j["files"][1]["path"] == "part-b.safetensors");
    CHECK(j["tensors"].size() == 2);
  }

  SECTION("the index named directly, and a prefix with no checkpoint (exit 3, how many blobs were listed)") {
    auto r = run({"inspect", root + "sharded/model.safetensors.index.json"});
    CHECK(r.exit_code == 0);
    r = run({"inspect", root + "empty/"});
    CHECK(r.exit_code == 3);
    CHECK_THAT(r.err, Catch::Contains(root + "empty/") && Catch::Contains("no .safetensors file or index") &&
                          Catch::Contains("1 objects listed"));
  }

  SECTION("get --plan: SAS URLs valid for the stated time, fetched by a client with no credentials") {
    auto r = run({"get", root + "single/model.safetensors", "layers.2.weight", "--plan", "--window", "4096",
                  "--presign-expires", "900"});
    REQUIRE(r.exit_code == 0);
    const json plan = json::parse(r.out);
    REQUIRE(plan["transfers"].size() == 1);
    const json& t = plan["transfers"][0];
    const auto now = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch()).count();
    CHECK(t["expires_at"].get<std::int64_t>() >= now + 890);
    CHECK(t["expires_at"].get<std::int64_t>() <= now + 910);
    const std::string url = t["url"];
    CHECK_THAT(url, Catch::Contains("sr=b") && Catch::Contains("sp=r") && Catch::Contains("sig="));
    az.clear();
    httplib::Client client("127.0.0.1", az.port());
    client.set_url_encode(false);
    const std::string path = url.substr(url.find('/', 8));
    auto res = client.Get(path, httplib::Headers{{"Range", t["range"].get<std::string>()},
                                                 {"If-Match", t["if_match"].get<std::string>()}});
    REQUIRE(res);
    CHECK(res->status == 206);
    CHECK(res->body == tftest::pattern_bytes(300'000, 3));
    // The same URL with its signature changed is refused by azurite.
    std::string forged = path;
    const auto sig = forged.find("sig=") + 4;
    forged[sig] = forged[sig] == 'A' ? 'B' : 'A';
    res = client.Get(forged, httplib::Headers{{"Range", t["range"].get<std::string>()}});
    REQUIRE(res);
    CHECK(res->status == 403);
    // And a SAS made for one blob does not open another.
    std::string other = path;
    other.replace(other.find("single/model.safetensors"), 24, "loose/part-a.safetensors");
    res = client.Get(other);
    REQUIRE(res);
    CHECK(res->status == 403);
  }
}

TEST_CASE("azure: a listing of many pages follows NextMarker") {
  if (!azurite_available()) return;
  TempDir tmp("tf-azure-pages");
  for (int i = 0; i < 5; ++i) {
    tftest::write_file(tmp / "tree/many" / ("part-" + std::to_string(i) + ".safetensors"), store_checkpoint(i, 1, 64, 9));
  }
  AzureServer az({"models=" + (tmp / "tree").string()}, {"--max-results", "2"});
  AzureEnv env(tmp / "cache", az.endpoint());
  auto r = run({"inspect", std::string("az://") + kAccount + "/models/many/", "--json"});
  REQUIRE(r.exit_code == 0);
  CHECK(json::parse(r.out)["files"].size() == 5);
  int pages = 0;
  for (const auto& q : az.requests()) {
    if (q["query"].contains("comp")) {
      ++pages;
      CHECK(q["query"].contains("marker") == (pages > 1));
    }
  }
  CHECK(pages == 3);
}

TEST_CASE("azure: a SAS from AZURE_STORAGE_SAS_TOKEN or the connection string is appended to every request; a public container read anonymously") {
  if (!azurite_available()) return;
  AzureWorld world({"--public", "public"}, {"public"});
  const AzureServer& az = world.az;
  const std::string sas = az.container_sas();
  const std::string location = std::string("az://") + kAccount + "/models/sharded/";

  SECTION("AZURE_STORAGE_SAS_TOKEN (the endpoint from a connection string without credentials)") {
    tftest::ScopedEnv scoped;
    scoped.set("AZURE_STORAGE_CONNECTION_STRING", "BlobEndpoint=" + az.endpoint());
    scoped.set("AZURE_STORAGE_SAS_TOKEN", "?" + sas);
    az.clear();
    auto r = run({"inspect", location, "--json"});
    REQUIRE(r.exit_code == 0);
    check_no_secrets(r, sas);
    const auto reqs = az.requests();
    REQUIRE(reqs.size() == 4);
    for (const auto& q : reqs) {
      CHECK(q["query"]["sp"] == "rl");  // the given SAS, not one made here
      CHECK(q["status"].get<int>() < 300);
    }
    // Without it, the same requests are anonymous, and the container is not public.
    scoped.unset("AZURE_STORAGE_SAS_TOKEN");
    r = run({"inspect", location});
    CHECK(r.exit_code == 3);
    CHECK_THAT(r.err, Catch::Contains("the container is not public"));
  }
  SECTION("the connection string's SharedAccessSignature") {
    tftest::ScopedEnv scoped;
    scoped.set("AZURE_STORAGE_CONNECTION_STRING", "BlobEndpoint=" + az.endpoint() + ";SharedAccessSignature=" + sas);
    az.clear();
    auto r = run({"get", location, "layers.3.weight", "-o", (world.tmp / "o.safetensors").string()});
    REQUIRE(r.exit_code == 0);
    check_no_secrets(r, sas);
    CHECK(read_safetensors(world.tmp / "o.safetensors").tensors.at("layers.3.weight").bytes ==
          tftest::pattern_bytes(200'000, 5));
    const auto reqs = az.requests();
    REQUIRE(reqs.size() >= 4);
    for (const auto& q : reqs) {
      CHECK(q["query"]["sp"] == "rl");  // the given SAS, not one made here
      CHECK(q["status"].get<int>() < 300);
    }
    check_no_secrets_under(world.tmp / "cache", sas);
  }
  SECTION("--no-sign-request on a public container: no SAS at all") {
    az.clear();
    auto r = run({"inspect", std::string("az://") + kAccount + "/public/sharded/", "--no-sign-request"});
    REQUIRE(r.exit_code == 0);
    const auto reqs = az.requests();
    REQUIRE(reqs.size() == 4);
    for (const auto& q : reqs) CHECK(q["auth"] == "none");
  }
}

TEST_CASE("azure: errors in words, exit 3, naming account, container and blob and where the credentials came from, never a secret") {
  if (!azurite_available()) return;
  AzureWorld world;
  const AzureServer& az = world.az;
  const std::string blob = std::string("az://") + kAccount + "/models/single/model.safetensors";
  const std::string wrong_key = "d3Jvbmcta2V5LURPLU5PVC1MRUFLLTAxMjM0NTY3ODk=";  // base64, not the account's
  struct Row {
    const char* name;
    std::vector<std::pair<std::string, std::optional<std::string>>> env;
    std::vector<std::string> args;
    int exit_code;
    std::vector<std::string> words;
  };
  const std::vector<Row> rows = {
      {"a wrong account key: the signature is refused",
       {{"AZURE_STORAGE_CONNECTION_STRING", connection_string(az.endpoint(), wrong_key)}},
       {"inspect", blob},
       3,
       {blob, "HTTP 403", "the account key does not match", "AZURE_STORAGE_CONNECTION_STRING"}},
      {"BlobNotFound", {}, {"inspect", std::string("az://") + kAccount + "/models/single/absent.safetensors"}, 3,
       {"BlobNotFound", "az://devstoreaccount1/models/single/absent.safetensors", "no such blob"}},
      {"ContainerNotFound", {}, {"inspect", std::string("az://") + kAccount + "/nowhere/m.safetensors"}, 3,
       {"ContainerNotFound", "no such container"}},
      {"ContainerNotFound, listing", {}, {"inspect", std::string("az://") + kAccount + "/nowhere/dir/"}, 3,
       {"ContainerNotFound", "(listing)"}},
      {"anonymous request to a private container", {}, {"inspect", blob, "--no-sign-request"}, 3,
       {"the container is not public"}},
      {"a connection string for another account",
       {{"AZURE_STORAGE_CONNECTION_STRING", "AccountName=someoneelse;AccountKey=" + wrong_key}},
       {"inspect", blob},
       1,
       {"AZURE_STORAGE_CONNECTION_STRING is for the account 'someoneelse'"}},
  };
  for (const auto& row : rows) {
    DYNAMIC_SECTION(row.name) {
      tftest::ScopedEnv scoped;
      for (const auto& [k, v] : row.env) scoped.set(k, v);
      const auto r = run(row.args);
      CHECK(r.exit_code == row.exit_code);
      for (const auto& w : row.words) CHECK_THAT(r.err, Catch::Contains(w));
      check_no_secrets(r);
      CHECK(r.err.find(wrong_key) == std::string::npos);
    }
  }
}
