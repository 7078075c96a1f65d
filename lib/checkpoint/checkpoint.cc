// SPDX-License-Identifier: Apache-2.0
// Opening a local checkpoint: locate, map, validate every header and the index.
#include <fnmatch.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <map>

#include "base/text.h"
#include "base/trace.h"
#include "checkpoint/checkpoint_internal.h"
#include "hub/location.h"

namespace tensorfetch {

using detail::quote_name;

namespace {

bool is_regular_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::pair<std::string, std::string> split_dir(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return {"", path};
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

bool has_glob(std::string_view pattern) {
  return pattern.find_first_of("*?[") != std::string_view::npos;
}

}  // namespace

bool natural_less(std::string_view a, std::string_view b) noexcept {
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (digit(a[i]) && digit(b[j])) {
      std::size_t si = i, sj = j;
      while (si < a.size() && a[si] == '0') ++si;
      while (sj < b.size() && b[sj] == '0') ++sj;
      std::size_t ei = si, ej = sj;
      while (ei < a.size() && digit(a[ei])) ++ei;
      while (ej < b.size() && digit(b[ej])) ++ej;
      if (ei - si != ej - sj) return ei - si < ej - sj;
      auto na = a.substr(si, ei - si), nb = b.substr(sj, ej - sj);
      if (na != nb) return na < nb;
      if (ei - i != ej - j) return ei - i < ej - j;  // fewer leading zeros first
      i = ei;
      j = ej;
      continue;
    }
    if (a[i] != b[j]) return static_cast<unsigned char>(a[i]) < static_cast<unsigned char>(b[j]);
    ++i;
    ++j;
  }
  return a.size() - i < b.size() - j;
}

Checkpoint::Checkpoint(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Checkpoint::Checkpoint(Checkpoint&&) noexcept = default;
Checkpoint& Checkpoint::operator=(Checkpoint&&) noexcept = default;
Checkpoint::~Checkpoint() = default;

const std::string& Checkpoint::location() const noexcept { return impl_->location; }
bool Checkpoint::sharded() const noexcept { return impl_->index.has_value(); }
const std::optional<ShardIndex>& Checkpoint::index() const noexcept { return impl_->index; }
const std::vector<CheckpointFile>& Checkpoint::files() const noexcept { return impl_->listed(); }
const Header* Checkpoint::header(std::size_t file) const noexcept {
  return file < impl_->files.size() ? &impl_->files[file].header : nullptr;
}
const std::vector<TensorRef>& Checkpoint::tensors() const noexcept { return impl_->tensors; }
bool Checkpoint::remote() const noexcept { return impl_->remote; }
const std::optional<std::string>& Checkpoint::commit() const noexcept { return impl_->commit; }
const std::optional<std::string>& Checkpoint::config_json() const noexcept { return impl_->config_json; }
std::uint64_t Checkpoint::requests() const noexcept { return impl_->requests; }

const TensorRef* Checkpoint::find(std::string_view name) const {
  const auto& tensors = impl_->tensors;
  auto pos = impl_->by_name.find(name, [&](std::size_t i) -> std::string_view { return tensors[i].info->name; });
  return pos ? &tensors[*pos] : nullptr;
}

namespace {

// Maps and validates local file `name` (under `impl.root`) and adds it to `impl.files`.
Result<void> load_file(Checkpoint::Impl& impl, const std::string& name, HeaderParser& parser) {
  const std::string path = impl.root.empty() ? name : impl.root + "/" + name;
  auto map = detail::MappedFile::open_within(impl.confine_root, path);
  if (!map) return fail(map.error());
  // The whole mapping is given, so the header is parsed in place.
  auto header = parser.parse_file_prefix(map->bytes(), map->size());
  if (!header) return fail(header.error().with_context(path));
  // The header's pages are not read again (the Header holds what it needs): drop them from this
  // process's resident set (the page cache keeps them). Up to 100 MB for a huge header.
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<std::uintptr_t>(map->bytes().data());
  const auto end = (begin + kPrefixSize + header->header_size) & ~(page - 1);
  if (end > begin + page) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
  const std::uint64_t size = map->size();
  impl.files.push_back(OpenFile{CheckpointFile{name, size, std::nullopt, {}, std::nullopt}, std::move(*header),
                                std::move(*map), {}});
  return {};
}

// Checks that the index and the shard headers name exactly the same tensors.
Result<void> check_index_matches(const Checkpoint::Impl& impl) {
  const ShardIndex& index = *impl.index;
  const std::string where = impl.index_name;
  for (const auto& [name, shard] : index.weight_map) {
    if (!impl.files[shard].header.find(name)) {
      return fail(ErrorCode::IndexMismatch,
                  where + ": weight_map places tensor " + quote_name(name) + " in " +
                      quote_name(index.shards[shard]) + ", whose header does not hold it");
    }
  }
  // Every tensor of every shard must be listed, for that shard (a name in two shards is
  // caught here too, since the index maps it to only one of them).
  for (std::size_t s = 0; s < impl.files.size(); ++s) {
    for (const auto& t : impl.files[s].header.tensors()) {
      const std::string_view name = t.name;
      auto it = std::lower_bound(index.weight_map.begin(), index.weight_map.end(), name,
                                 [](const auto& entry, std::string_view n) { return entry.first < n; });
      if (it == index.weight_map.end() || it->first != name) {
        return fail(ErrorCode::IndexMismatch, where + ": shard " + quote_name(index.shards[s]) +
                                                  " holds tensor " + quote_name(t.name) +
                                                  ", which the weight_map does not list");
      }
      if (it->second != s) {
        return fail(ErrorCode::IndexMismatch,
                    where + ": tensor " + quote_name(t.name) + " is stored in shard " +
                        quote_name(index.shards[s]) + " but the weight_map places it in " +
                        quote_name(index.shards[it->second]));
      }
    }
  }
  return {};
}

}  // namespace

// Opens a local file, index or directory into `impl`.
Result<void> open_local(Checkpoint::Impl& impl, const std::string& location, const CancelToken& cancel) {
  std::string path = location;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  if (is_directory(path)) {
    std::string found;
    for (auto candidate : detail::checkpoint_candidates()) {
      std::string p = path + "/" + std::string(candidate);
      if (is_regular_file(p)) {
        found = p;
        break;
      }
    }
    if (found.empty()) {
      return fail(ErrorCode::NotFound,
                  path + ": directory holds no model.safetensors, "
                         "model.safetensors.index.json or diffusers checkpoint");
    }
    // config.json beside the checkpoint, for quantization rules.
    if (auto cfg = detail::MappedFile::open_within(impl.confine_root, path + "/config.json");
        cfg && cfg->size() <= (16u << 20)) {
      impl.config_json = std::string(reinterpret_cast<const char*>(cfg->bytes().data()), cfg->size());
    }
    path = found;
  } else if (!is_regular_file(path)) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      return fail(ErrorCode::NotFound, path + ": no such file or directory");
    }
    return fail(ErrorCode::Io, path + ": not a regular file or directory");
  }

  auto [dir, name] = split_dir(path);
  impl.root = dir;
  std::vector<std::string> names;  // the files, relative to `root`
  if (detail::is_index_path(name)) {
    impl.index_name = name;
    auto map = detail::MappedFile::open_within(impl.confine_root, path);
    if (!map) return fail(map.error());
    auto index = parse_index(map->bytes());
    if (!index) return fail(index.error().with_context(path));
    impl.index = std::move(*index);
    for (const auto& shard : impl.index->shards) {
      const std::string shard_path = impl.root.empty() ? shard : impl.root + "/" + shard;
      if (!is_regular_file(shard_path)) {
        return fail(ErrorCode::IndexMismatch, path + ": names shard " + quote_name(shard) +
                                                  ", which does not exist at " + shard_path);
      }
    }
    names = impl.index->shards;
  } else {
    names.push_back(name);
  }
  impl.files.reserve(names.size());
  HeaderParser parser;  // one for every shard: its buffers are reused
  for (const auto& file : names) {
    if (cancel.cancelled()) return fail(ErrorCode::Cancelled, location + ": open cancelled");
    if (auto r = load_file(impl, file, parser); !r) return fail(r.error());
  }
  return {};
}

Result<void> Checkpoint::Impl::finish_open() {
  for (auto& f : files) f.info.sha256 = detail::sha256_of_linked_etag(f.remote.linked_etag);
  if (index) {
    if (auto r = check_index_matches(*this); !r) return fail(r.error());
  }
  std::size_t count = 0;
  for (const auto& f : files) count += f.header.tensors().size();
  tensors.reserve(count);
  for (std::size_t f = 0; f < files.size(); ++f) {
    for (const auto& t : files[f].header.tensors()) tensors.push_back(TensorRef{&t, f});
  }
  std::sort(tensors.begin(), tensors.end(), [](const TensorRef& a, const TensorRef& b) {
    return natural_less(a.info->name, b.info->name);
  });
  // Names are unique across files: each header's are, and the index check (or the single
  // file) rules out one name in two shards; insert() would report a repeat.
  by_name.reset(count);
  auto name_of = [&](std::size_t i) -> std::string_view { return tensors[i].info->name; };
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (auto other = by_name.insert(tensors[i].info->name, i, name_of)) {
      return fail(ErrorCode::IndexMismatch, location + ": tensor " + quote_name(tensors[i].info->name) +
                                                " is stored in two files: " + files[tensors[*other].file].info.path +
                                                " and " + files[tensors[i].file].info.path);
    }
  }
  return {};
}

namespace {

// Option values no open accepts, refused before anything is read (local locations too: the
// same options would fail on a remote one).
Result<void> check_open_options(const OpenOptions& options) {
  if (options.max_rate != 0 && options.max_rate < kMinMaxRate) {
    return fail(ErrorCode::InvalidArgument, "max_rate " + std::to_string(options.max_rate) +
                                                " bytes/s is below the smallest cap, " + std::to_string(kMinMaxRate) +
                                                " bytes/s (0: no cap)");
  }
  return {};
}

}  // namespace

Result<Checkpoint> Checkpoint::open_manifest(std::string_view location, std::string_view manifest,
                                             const OpenOptions& options) {
  if (location.find('\0') != std::string_view::npos) {
    return fail(ErrorCode::InvalidArgument, "location " + quote_name(location) + " contains a NUL byte");
  }
  if (auto r = check_open_options(options); !r) return fail(r.error());
  auto parsed = detail::parse_location(location, false);
  if (!parsed) return fail(parsed.error());
  if (parsed->kind == detail::LocationKind::Local) {
    return fail(ErrorCode::InvalidArgument, "location " + quote_name(location) +
                                                " is local: only remote checkpoints are opened from a manifest");
  }
  auto impl = std::make_unique<Impl>();
  impl->location = std::string(location);
  impl->remote = true;
  const std::string text(manifest);
  if (auto r = open_remote(*impl, location, options, &text); !r) return fail(r.error());
  if (auto r = impl->finish_open(); !r) return fail(r.error());
  return Checkpoint(std::move(impl));
}

Result<std::string> Checkpoint::manifest() const {
  if (!impl_->remote) {
    return fail(ErrorCode::InvalidArgument, impl_->location + " is local: a manifest records remote checkpoints only");
  }
  return snapshot_text(*impl_);
}

Result<Checkpoint> Checkpoint::open(std::string_view location_view, const OpenOptions& options) {
  detail::trace::Scope span("open (index, headers, config.json)", "open");
  if (location_view.find('\0') != std::string_view::npos) {
    return fail(ErrorCode::InvalidArgument, "location " + quote_name(location_view) + " contains a NUL byte");
  }
  if (auto r = check_open_options(options); !r) return fail(r.error());
  std::string location(location_view);
  auto impl = std::make_unique<Impl>();
  impl->location = location;
  struct stat st {};
  const bool exists = ::stat(location.c_str(), &st) == 0;
  auto parsed = detail::parse_location(location, exists || options.bare_names_are_paths);
  if (!parsed) return fail(parsed.error());
  if (parsed->kind == detail::LocationKind::Local) {
    if (auto r = open_local(*impl, location, options.cancel); !r) return fail(r.error());
  } else {
    impl->remote = true;
    if (auto r = open_remote(*impl, location, options); !r) {
      // A bare NAME or ORG/NAME was taken for a Hub repo because no such path exists here.
      if (parsed->kind == detail::LocationKind::Hub && !location.starts_with("hf://") &&
          r.error().code == ErrorCode::RemoteNotFound) {
        return fail(ErrorCode::RemoteNotFound,
                    r.error().message + " (no local file or directory '" + location + "' exists either)");
      }
      return fail(r.error());
    }
  }
  if (options.cancel.cancelled()) return fail(ErrorCode::Cancelled, location + ": open cancelled");
  if (auto r = impl->finish_open(); !r) return fail(r.error());
  return Checkpoint(std::move(impl));
}

Result<void> check_selection(const Checkpoint::Impl& impl, std::span<const Selection> selection) {
  for (std::size_t i = 0; i < selection.size(); ++i) {
    const Selection& s = selection[i];
    auto refuse = [&](const std::string& why) {
      return fail(ErrorCode::InvalidArgument, "selection " + std::to_string(i) + " of " +
                                                  std::to_string(selection.size()) + ": " + why);
    };
    if (s.ref.file >= impl.files.size() || s.ref.info == nullptr) {
      return refuse("its tensor reference does not belong to this checkpoint (file " + std::to_string(s.ref.file) +
                    " of " + std::to_string(impl.files.size()) + ")");
    }
    const auto entries = impl.files[s.ref.file].header.tensors();
    const std::less_equal<const TensorInfo*> le;
    if (entries.empty() || !le(entries.data(), s.ref.info) || !le(s.ref.info, &entries.back())) {
      return refuse("its tensor reference does not belong to this checkpoint");
    }
    const TensorInfo& t = *s.ref.info;
    const std::string name = "tensor " + quote_name(t.name);
    std::uint64_t sum = 0, elements = 1, bits = 0;
    for (const auto& r : s.plan.ranges) {
      if (r.end() < r.offset || r.end() > t.nbytes() || __builtin_add_overflow(sum, r.length, &sum)) {
        return refuse(name + ": planned bytes " + std::to_string(r.offset) + "+" + std::to_string(r.length) +
                      " lie outside its " + std::to_string(t.nbytes()) + " bytes");
      }
    }
    bool overflow = false;
    for (auto d : s.plan.shape) overflow = overflow || __builtin_mul_overflow(elements, d, &elements);
    overflow = overflow || __builtin_mul_overflow(elements, std::uint64_t{dtype_bits(t.dtype)}, &bits);
    if (overflow || sum != s.plan.nbytes || bits != 8 * s.plan.nbytes) {
      return refuse(name + ": its plan (" + std::to_string(s.plan.nbytes) + " bytes in " +
                    std::to_string(s.plan.ranges.size()) + " ranges) disagrees with its shape and dtype; "
                    "make selections with select()");
    }
  }
  return {};
}

Result<std::vector<Selection>> Checkpoint::select(std::span<const Selector> selectors) const {
  // The selector that chose each tensor (by position in tensors()), or nullptr.
  std::vector<const Selector*> chosen(impl_->tensors.size(), nullptr);
  std::size_t chosen_count = 0;
  auto choose = [&](std::size_t pos, const Selector& sel) -> Result<void> {
    if (chosen[pos] == nullptr) {
      chosen[pos] = &sel;
      ++chosen_count;
    } else {
      const Selector* first = chosen[pos];
      const auto& a = first->slice;
      const auto& b = sel.slice;
      bool same = a.has_value() == b.has_value() &&
                  (!a || to_string(*a) == to_string(*b));
      if (!same) {
        auto describe = [](const Selector& s) {
          return quote_name(s.pattern) + (s.slice ? " " + to_string(*s.slice) : " (whole)");
        };
        return fail(ErrorCode::InvalidArgument,
                    "tensor " + quote_name(impl_->tensors[pos].info->name) +
                        " is selected twice with different slices: by " + describe(*first) +
                        " and by " + describe(sel));
      }
    }
    return {};
  };
  for (const auto& sel : selectors) {
    if (const TensorRef* exact = find(sel.pattern)) {  // an exact name wins over glob syntax
      if (auto r = choose(static_cast<std::size_t>(exact - impl_->tensors.data()), sel); !r) return fail(r.error());
      continue;
    }
    if (!has_glob(sel.pattern)) {
      return fail(ErrorCode::NotFound, impl_->location + ": no tensor named " + quote_name(sel.pattern));
    }
    bool any = false;
    for (std::size_t i = 0; i < impl_->tensors.size(); ++i) {
      if (::fnmatch(sel.pattern.c_str(), impl_->tensors[i].info->name.data(), 0) == 0) {
        any = true;
        if (auto r = choose(i, sel); !r) return fail(r.error());
      }
    }
    if (!any) {
      return fail(ErrorCode::NotFound, impl_->location + ": no tensor matches " + quote_name(sel.pattern));
    }
  }
  std::vector<Selection> out;
  out.reserve(chosen_count);
  for (std::size_t pos = 0; pos < chosen.size(); ++pos) {
    const Selector* sel = chosen[pos];
    if (sel == nullptr) continue;
    const TensorRef& ref = impl_->tensors[pos];
    auto plan = plan_slice(*ref.info, sel->slice.value_or(SliceSpec{}));
    if (!plan) return fail(plan.error().with_context(impl_->local_path(ref.file)));
    out.push_back(Selection{ref, sel->slice, std::move(*plan)});
  }
  return out;
}

}  // namespace tensorfetch
