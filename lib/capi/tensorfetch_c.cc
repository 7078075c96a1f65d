// SPDX-License-Identifier: Apache-2.0
// The C API (include/tensorfetch/tensorfetch.h) over the C++ one. Every entry point is
// noexcept and catches everything: no exception reaches C. Codes and dtype names are mapped
// through switches, so that a new C++ enumerator without a C counterpart fails the build
// (-Wswitch under --werror).
#include "tensorfetch/tensorfetch.h"

#include <atomic>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "checkpoint/c_handles.h"
#include "tensorfetch/checkpoint.hpp"
#include "tensorfetch/dtype.hpp"
#include "tensorfetch/error.hpp"
#include "tensorfetch/trace.hpp"
#include "tensorfetch/version.hpp"

using tensorfetch::ErrorCode;

/// A plan handed to C: owned by the caller until tf_plan_free.
struct tf_plan {
  std::vector<tensorfetch::PlannedTransfer> transfers;
};

/// A tensor-parallel selection handed to C: owned by the caller until tf_tp_free. Refers to the
/// tensors of `checkpoint`, which must outlive it.
struct tf_tp_selection {
  const tf_checkpoint* checkpoint = nullptr;
  std::vector<tensorfetch::Selection> selection;
  std::vector<std::optional<std::string>> slices;  // per tensor: its slice as text, or none
  std::string rule;
};

/// A cancellation flag handed to C: owned by the caller until tf_cancel_token_free.
struct tf_cancel_token {
  tensorfetch::CancelToken token;
};

namespace {

using tensorfetch::capi::to_c;

// The C++ code of a C one; nothing for TF_OK, TF_ERR_INTERNAL and values that are no code.
std::optional<ErrorCode> from_c(tf_code code) noexcept {
  switch (code) {
#define TF_FROM_C(cpp, c) \
  case c:                 \
    return ErrorCode::cpp;
    TF_CODE_LIST(TF_FROM_C)
#undef TF_FROM_C
    case TF_OK:
    case TF_ERR_INTERNAL:
      break;
  }
  return std::nullopt;
}

const char* c_name(tf_code code) noexcept {
  switch (code) {
#define TF_NAME(cpp, c) \
  case c:               \
    return #cpp;
    TF_CODE_LIST(TF_NAME)
#undef TF_NAME
    case TF_OK:
      return "Ok";
    case TF_ERR_INTERNAL:
      return "Internal";
  }
  return "Unknown";
}

#undef TF_CODE_LIST

// NUL-terminated dtype names (the C++ API hands out string_views).
const char* dtype_name(tensorfetch::DType dtype) noexcept {
  using tensorfetch::DType;
  switch (dtype) {
#define TF_DTYPE(d) \
  case DType::d:    \
    return #d;
    TF_DTYPE(BOOL)
    TF_DTYPE(F4)
    TF_DTYPE(F6_E2M3)
    TF_DTYPE(F6_E3M2)
    TF_DTYPE(U8)
    TF_DTYPE(I8)
    TF_DTYPE(F8_E5M2)
    TF_DTYPE(F8_E4M3)
    TF_DTYPE(F8_E8M0)
    TF_DTYPE(F8_E4M3FNUZ)
    TF_DTYPE(F8_E5M2FNUZ)
    TF_DTYPE(I16)
    TF_DTYPE(U16)
    TF_DTYPE(F16)
    TF_DTYPE(BF16)
    TF_DTYPE(I32)
    TF_DTYPE(U32)
    TF_DTYPE(F32)
    TF_DTYPE(C64)
    TF_DTYPE(F64)
    TF_DTYPE(I64)
    TF_DTYPE(U64)
#undef TF_DTYPE
  }
  return "?";
}

// Handed out when even an error cannot be allocated; tf_error_free leaves it alone.
tf_error g_out_of_memory{TF_ERR_INTERNAL, "out of memory"};

// Stores a new error in `*err` (when err is not NULL) and returns its code.
tf_code store_error(tf_error** err, tf_code code, std::string_view message,
                    std::string_view detail = {}) noexcept {
  if (err == nullptr) return code;
  try {
    std::string text(message);
    text += detail;
    *err = new tf_error{code, std::move(text)};
  } catch (...) {
    *err = &g_out_of_memory;
  }
  return code;
}

tf_code store_error(tf_error** err, const tensorfetch::Error& error) noexcept {
  return store_error(err, to_c(error.code), error.message);
}

// A C tri-state option: `from_env` leaves `out` unset (the environment decides), 0 and 1 set
// it; false for any other value.
bool tristate(int value, int from_env, std::optional<bool>& out) noexcept {
  if (value == from_env) return true;
  if (value != 0 && value != 1) return false;
  out = value == 1;
  return true;
}

void clear_error(tf_error** err) noexcept {
  if (err != nullptr) *err = nullptr;
}

// Runs `body` (which returns a tf_code), turning any exception into TF_ERR_INTERNAL.
template <class Body>
tf_code guarded(tf_error** err, Body&& body) noexcept {
  try {
    return std::forward<Body>(body)();
  } catch (const std::bad_alloc&) {
    return store_error(err, TF_ERR_INTERNAL, "out of memory");
  } catch (const std::exception& e) {
    return store_error(err, TF_ERR_INTERNAL, "unexpected failure: ", e.what());
  } catch (...) {
    return store_error(err, TF_ERR_INTERNAL, "unexpected failure");
  }
}

// True when the caller's struct (of `size` bytes) holds `field`, at `offset` of `length` bytes.
constexpr bool holds(std::size_t size, std::size_t offset, std::size_t length) noexcept {
  return size >= offset + length;
}
#define TF_HOLDS(type, ptr, field) holds((ptr)->size, offsetof(type, field), sizeof((ptr)->field))

// The tensor at `index`, or nullptr.
const tensorfetch::TensorRef* tensor_at(const tf_checkpoint* checkpoint, std::size_t index) noexcept {
  if (checkpoint == nullptr) return nullptr;
  const auto& tensors = checkpoint->checkpoint.tensors();
  return index < tensors.size() ? &tensors[index] : nullptr;
}

// Clears the cancel flag when a fetch ends, however it ends: a cancel request is consumed by
// the fetch it stops (or by a fetch that completed before it could notice it).
struct ConsumeCancel {
  const tensorfetch::CancelToken& token;
  ~ConsumeCancel() { token.reset(); }
};

tf_code cancelled(tf_error** err) noexcept {
  return store_error(err, TF_ERR_CANCELLED, "cancelled by the caller (tf_cancel)");
}

// The C++ fetch options for the C ones (NULL: defaults), cancelled by the checkpoint's token
// (tf_cancel), which the progress function also watches. Returns TF_OK or the argument error.
tf_code fetch_options(tf_checkpoint* checkpoint, const tf_fetch_options* in, tensorfetch::FetchOptions& out,
                      tf_error** err) {
  tf_progress_fn callback = nullptr;
  tf_sink_fn sink = nullptr;
  void* user = nullptr;
  if (in != nullptr) {
    if (in->size == 0) {
      return store_error(err, TF_ERR_INVALID_ARGUMENT,
                         "tf_fetch_options.size is 0: initialize the options with tf_fetch_options_init");
    }
    if (TF_HOLDS(tf_fetch_options, in, connections)) out.connections = in->connections;
    if (TF_HOLDS(tf_fetch_options, in, chunk_size) && in->chunk_size != 0) out.chunk_size = in->chunk_size;
    if (TF_HOLDS(tf_fetch_options, in, coalesce_gap) && in->coalesce_gap != 0) out.coalesce_gap = in->coalesce_gap;
    if (TF_HOLDS(tf_fetch_options, in, progress)) callback = in->progress;
    if (TF_HOLDS(tf_fetch_options, in, user)) user = in->user;
    if (TF_HOLDS(tf_fetch_options, in, sink)) sink = in->sink;
    if (TF_HOLDS(tf_fetch_options, in, coalesce_overfetch_percent) && in->coalesce_overfetch_percent != 0) {
      out.coalesce_overfetch_percent = in->coalesce_overfetch_percent;
    }
  }
  out.cancel = checkpoint->cancel;
  // The per-file array handed to the callback; reused from call to call (all calls are on the
  // fetching thread, one at a time).
  auto files = std::make_shared<std::vector<tf_file_progress>>();
  out.progress = [flag = checkpoint->cancel, callback, user, files](const tensorfetch::FetchProgress& p) noexcept {
    if (flag.cancelled()) return false;
    if (callback == nullptr) return true;
    tf_progress c{};
    c.size = sizeof(tf_progress);
    c.bytes_done = p.bytes_done;
    c.bytes_total = p.bytes_total;
    c.bytes_cached = p.bytes_cached;
    c.files_done = p.files_done;
    c.files_total = p.files_total;
    c.seconds = p.seconds;
    c.waiting_seconds = p.waiting_seconds;
    try {
      files->resize(p.per_file.size());
      for (std::size_t i = 0; i < p.per_file.size(); ++i) {
        (*files)[i] = tf_file_progress{p.per_file[i].file, p.per_file[i].bytes_done, p.per_file[i].bytes_total};
      }
      c.n_files = files->size();
      c.files = files->empty() ? nullptr : files->data();
    } catch (...) {  // out of memory: report no per-file data rather than stop the fetch
      c.n_files = 0;
      c.files = nullptr;
    }
    try {
      return callback(&c, user) == 0 && !flag.cancelled();
    } catch (...) {  // a C++ callback that throws: stop rather than unwind through the fetch
      return false;
    }
  };
  if (sink != nullptr) {
    // Once the sink asked to stop, pieces of other transfers still in flight are dropped: the
    // sink is not called again (all calls are on the fetching thread).
    auto stopped = std::make_shared<bool>(false);
    out.sink = [sink, user, stopped](std::size_t file, std::uint64_t offset,
                                     std::span<const std::byte> bytes) noexcept {
      if (*stopped) return false;
      try {
        *stopped = sink(file, offset, bytes.data(), bytes.size(), user) != 0;
      } catch (...) {  // as above
        *stopped = true;
      }
      return !*stopped;
    };
  }
  return TF_OK;
}

// The selection of `patterns[0..n)` (exact names or globs), or the error; `what` names the
// calling function in messages.
tf_code select_patterns(const tf_checkpoint* checkpoint, const char* const* patterns, std::size_t n,
                        const char* what, std::vector<tensorfetch::Selection>& out, tf_error** err) {
  std::vector<tensorfetch::Selector> selectors;
  selectors.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (patterns[i] == nullptr) {
      return store_error(err, TF_ERR_INVALID_ARGUMENT, std::string(what) + ": patterns[",
                         std::to_string(i) + "] is NULL");
    }
    selectors.push_back(tensorfetch::Selector{patterns[i], std::nullopt});
  }
  auto selection = checkpoint->checkpoint.select(selectors);
  if (!selection) return store_error(err, selection.error());
  out = std::move(*selection);
  return TF_OK;
}

// Transfer `i` of a plan, or nullptr.
const tensorfetch::PlannedTransfer* transfer_at(const tf_plan* plan, std::size_t i) noexcept {
  return plan != nullptr && i < plan->transfers.size() ? &plan->transfers[i] : nullptr;
}

// Tensor `i` of a tensor-parallel selection, or nullptr.
const tensorfetch::Selection* tp_at(const tf_tp_selection* selection, std::size_t i) noexcept {
  return selection != nullptr && i < selection->selection.size() ? &selection->selection[i] : nullptr;
}

// A selection given with a checkpoint must be that checkpoint's.
tf_code check_tp(const tf_checkpoint* checkpoint, const tf_tp_selection* selection, const char* fn, tf_error** err) {
  if (checkpoint == nullptr) return store_error(err, TF_ERR_INVALID_ARGUMENT, std::string(fn) + ": checkpoint is NULL");
  if (selection == nullptr) return store_error(err, TF_ERR_INVALID_ARGUMENT, std::string(fn) + ": selection is NULL");
  if (selection->checkpoint != checkpoint) {
    return store_error(err, TF_ERR_INVALID_ARGUMENT,
                       std::string(fn) + ": the selection was made for another checkpoint (tf_select_for_rank)");
  }
  return TF_OK;
}

tf_code check_stats(const tf_fetch_stats* stats, tf_error** err) noexcept {
  if (stats != nullptr && stats->size == 0) {
    return store_error(err, TF_ERR_INVALID_ARGUMENT,
                       "tf_fetch_stats.size is 0: initialize the stats with tf_fetch_stats_init");
  }
  return TF_OK;
}

void store_stats(const tensorfetch::FetchStats& in, tf_fetch_stats* out) noexcept {
  if (out == nullptr) return;
  if (TF_HOLDS(tf_fetch_stats, out, bytes_transferred)) out->bytes_transferred = in.bytes_transferred;
  if (TF_HOLDS(tf_fetch_stats, out, bytes_cached)) out->bytes_cached = in.bytes_cached;
  if (TF_HOLDS(tf_fetch_stats, out, requests)) out->requests = in.requests;
  if (TF_HOLDS(tf_fetch_stats, out, retries)) out->retries = in.retries;
  if (TF_HOLDS(tf_fetch_stats, out, chunks)) out->chunks = in.chunks;
  if (TF_HOLDS(tf_fetch_stats, out, connections)) out->connections = in.connections;
}

// Runs one fetch under the checkpoint's fetch lock, honouring and then consuming a cancel.
template <class Run>
tf_code run_fetch(tf_checkpoint* checkpoint, const tf_fetch_options* options, tf_fetch_stats* stats,
                  tf_error** err, Run&& run) {
  if (tf_code c = check_stats(stats, err); c != TF_OK) return c;
  tensorfetch::FetchOptions fo;
  if (tf_code c = fetch_options(checkpoint, options, fo, err); c != TF_OK) return c;
  std::lock_guard<std::mutex> lock(checkpoint->fetch_mutex);
  ConsumeCancel consume{checkpoint->cancel};
  if (checkpoint->cancel.cancelled()) return cancelled(err);
  tensorfetch::Result<tensorfetch::FetchStats> result = std::forward<Run>(run)(fo);
  if (!result) return store_error(err, result.error());
  store_stats(*result, stats);
  return TF_OK;
}

}  // namespace

extern "C" {

const char* tf_version(void) noexcept { return tensorfetch::version(); }

const char* tf_code_name(tf_code code) noexcept { return c_name(code); }

int tf_code_exit_code(tf_code code) noexcept {
  if (code == TF_OK) return 0;
  auto cpp = from_c(code);
  return cpp ? tensorfetch::exit_code(*cpp) : 1;
}

tf_code tf_error_code(const tf_error* error) noexcept { return error != nullptr ? error->code : TF_OK; }

const char* tf_error_message(const tf_error* error) noexcept {
  return error != nullptr ? error->message.c_str() : "";
}

void tf_error_free(tf_error* error) noexcept {
  if (error != &g_out_of_memory) delete error;
}

void tf_open_options_init(tf_open_options* options) noexcept {
  if (options == nullptr) return;
  *options = tf_open_options{};
  options->size = sizeof(tf_open_options);
  options->offline = TF_OFFLINE_FROM_ENV;
  options->shared_cache = TF_SHARED_CACHE_FROM_ENV;
}

tf_code tf_open(const char* location, const tf_open_options* options, tf_checkpoint** out,
                tf_error** err) noexcept {
  clear_error(err);
  if (out == nullptr) return store_error(err, TF_ERR_INVALID_ARGUMENT, "tf_open: out is NULL");
  *out = nullptr;
  if (location == nullptr) return store_error(err, TF_ERR_INVALID_ARGUMENT, "tf_open: location is NULL");
  return guarded(err, [&]() -> tf_code {
    tensorfetch::OpenOptions o;
    if (options != nullptr) {
      if (options->size == 0) {
        return store_error(err, TF_ERR_INVALID_ARGUMENT,
                           "tf_open_options.size is 0: initialize the options with tf_open_options_init");
      }
      auto text = [](const char* s) { return s != nullptr ? std::string(s) : std::string(); };
      if (TF_HOLDS(tf_open_options, options, cache_dir)) o.cache_dir = text(options->cache_dir);
      if (TF_HOLDS(tf_open_options, options, connections) && options->connections != 0) {
        o.connections = options->connections;
      }
      if (TF_HOLDS(tf_open_options, options, max_connections) && options->max_connections != 0) {
        o.max_connections = options->max_connections;
      }
      if (TF_HOLDS(tf_open_options, options, token) && options->token != nullptr) o.token = options->token;
      if (TF_HOLDS(tf_open_options, options, endpoint)) o.endpoint = text(options->endpoint);
      if (TF_HOLDS(tf_open_options, options, ca_file)) o.ca_file = text(options->ca_file);
      if (TF_HOLDS(tf_open_options, options, hf_hub_cache)) o.hf_hub_cache = text(options->hf_hub_cache);
      if (TF_HOLDS(tf_open_options, options, offline) &&
          !tristate(options->offline, TF_OFFLINE_FROM_ENV, o.offline)) {
        return store_error(err, TF_ERR_INVALID_ARGUMENT,
                           "tf_open_options.offline must be 0, 1 or TF_OFFLINE_FROM_ENV, not ",
                           std::to_string(options->offline));
      }
      if (TF_HOLDS(tf_open_options, options, shared_cache) &&
          !tristate(options->shared_cache, TF_SHARED_CACHE_FROM_ENV, o.shared_cache)) {
        return store_error(err, TF_ERR_INVALID_ARGUMENT,
                           "tf_open_options.shared_cache must be 0, 1 or TF_SHARED_CACHE_FROM_ENV, not ",
                           std::to_string(options->shared_cache));
      }
      if (TF_HOLDS(tf_open_options, options, cancel) && options->cancel != nullptr) {
        o.cancel = options->cancel->token;
      }
      if (TF_HOLDS(tf_open_options, options, warm_connections)) {
        if (options->warm_connections != 0 && options->warm_connections != 1) {
          return store_error(err, TF_ERR_INVALID_ARGUMENT, "tf_open_options.warm_connections must be 0 or 1, not ",
                             std::to_string(options->warm_connections));
        }
        o.warm_connections = options->warm_connections == 1;
      }
      if (TF_HOLDS(tf_open_options, options, notice) && options->notice != nullptr) {
        void* user = TF_HOLDS(tf_open_options, options, notice_user) ? options->notice_user : nullptr;
        o.on_stale_cache = [fn = options->notice, user](const tensorfetch::StaleCache& s) {
          tf_notice n{};
          n.size = sizeof(tf_notice);
          n.kind = TF_NOTICE_STALE_CACHE;
          n.file = s.file.c_str();
          n.url = s.url.c_str();
          n.offset = s.offset;
          n.blob = s.blob.c_str();
          n.message = s.message.c_str();
          fn(&n, user);
        };
      }
      // Below kMinMaxRate, Checkpoint::open refuses it (TF_ERR_INVALID_ARGUMENT).
      if (TF_HOLDS(tf_open_options, options, max_rate)) o.max_rate = options->max_rate;
    }
    auto opened = tensorfetch::Checkpoint::open(location, o);
    if (!opened) return store_error(err, opened.error());
    *out = new tf_checkpoint(std::move(*opened));
    return TF_OK;
  });
}

void tf_close(tf_checkpoint* checkpoint) noexcept { delete checkpoint; }

int tf_is_remote(const tf_checkpoint* checkpoint) noexcept {
  return checkpoint != nullptr && checkpoint->checkpoint.remote() ? 1 : 0;
}

const char* tf_commit(const tf_checkpoint* checkpoint) noexcept {
  if (checkpoint == nullptr) return nullptr;
  const auto& commit = checkpoint->checkpoint.commit();
  return commit ? commit->c_str() : nullptr;
}

size_t tf_file_count(const tf_checkpoint* checkpoint) noexcept {
  return checkpoint != nullptr ? checkpoint->checkpoint.files().size() : 0;
}

const char* tf_file_path(const tf_checkpoint* checkpoint, size_t file) noexcept {
  if (checkpoint == nullptr || file >= checkpoint->checkpoint.files().size()) return nullptr;
  return checkpoint->checkpoint.files()[file].path.c_str();
}

uint64_t tf_file_size(const tf_checkpoint* checkpoint, size_t file) noexcept {
  if (checkpoint == nullptr || file >= checkpoint->checkpoint.files().size()) return 0;
  return checkpoint->checkpoint.files()[file].size;
}

size_t tf_tensor_count(const tf_checkpoint* checkpoint) noexcept {
  return checkpoint != nullptr ? checkpoint->checkpoint.tensors().size() : 0;
}

const char* tf_tensor_name(const tf_checkpoint* checkpoint, size_t index) noexcept {
  const auto* t = tensor_at(checkpoint, index);
  return t != nullptr ? t->info->name.data() : nullptr;
}

const char* tf_tensor_dtype(const tf_checkpoint* checkpoint, size_t index) noexcept {
  const auto* t = tensor_at(checkpoint, index);
  return t != nullptr ? dtype_name(t->info->dtype) : nullptr;
}

const uint64_t* tf_tensor_shape(const tf_checkpoint* checkpoint, size_t index, size_t* ndim) noexcept {
  const auto* t = tensor_at(checkpoint, index);
  if (ndim != nullptr) *ndim = t != nullptr ? t->info->shape.size() : 0;
  if (t == nullptr || t->info->shape.empty()) return nullptr;
  return t->info->shape.data();
}

tf_code tf_tensor_data_offsets(const tf_checkpoint* checkpoint, size_t index, uint64_t* begin,
                               uint64_t* end) noexcept {
  const auto* t = tensor_at(checkpoint, index);
  if (begin != nullptr) *begin = t != nullptr ? t->info->begin : 0;
  if (end != nullptr) *end = t != nullptr ? t->info->end : 0;
  return t != nullptr ? TF_OK : TF_ERR_INVALID_ARGUMENT;
}

size_t tf_tensor_file_index(const tf_checkpoint* checkpoint, size_t index) noexcept {
  const auto* t = tensor_at(checkpoint, index);
  return t != nullptr ? t->file : 0;
}

const char* tf_tensor_file(const tf_checkpoint* checkpoint, size_t index) noexcept {
  const auto* t = tensor_at(checkpoint, index);
  return t != nullptr ? tf_file_path(checkpoint, t->file) : nullptr;
}

int tf_find(const tf_checkpoint* checkpoint, const char* name, size_t* index) noexcept {
  if (checkpoint == nullptr || name == nullptr) return 0;
  try {
    const auto* found = checkpoint->checkpoint.find(name);
    if (found == nullptr) return 0;
    const auto& tensors = checkpoint->checkpoint.tensors();
    // find() points into tensors(); fall back to a search should that ever change.
    std::size_t i = 0;
    if (!tensors.empty() && !std::less<>()(found, tensors.data()) &&
        std::less<>()(found, tensors.data() + tensors.size())) {
      i = static_cast<std::size_t>(found - tensors.data());
    } else {
      while (i < tensors.size() && tensors[i].info != found->info) ++i;
      if (i == tensors.size()) return 0;
    }
    if (index != nullptr) *index = i;
    return 1;
  } catch (...) {
    return 0;
  }
}

void tf_fetch_options_init(tf_fetch_options* options) noexcept {
  if (options == nullptr) return;
  *options = tf_fetch_options{};
  options->size = sizeof(tf_fetch_options);
}

void tf_fetch_stats_init(tf_fetch_stats* stats) noexcept {
  if (stats == nullptr) return;
  *stats = tf_fetch_stats{};
  stats->size = sizeof(tf_fetch_stats);
}

tf_code tf_fetch(tf_checkpoint* checkpoint, const char* const* patterns, size_t n,
                 const tf_fetch_options* options, tf_fetch_stats* stats, tf_error** err) noexcept {
  clear_error(err);
  if (checkpoint == nullptr) return store_error(err, TF_ERR_INVALID_ARGUMENT, "tf_fetch: checkpoint is NULL");
  if (n > 0 && patterns == nullptr) return store_error(err, TF_ERR_INVALID_ARGUMENT, "tf_fetch: patterns is NULL");
  return guarded(err, [&]() -> tf_code {
    std::vector<tensorfetch::Selection> selection;
    if (tf_code c = select_patterns(checkpoint, patterns, n, "tf_fetch", selection, err); c != TF_OK) return c;
    return run_fetch(checkpoint, options, stats, err, [&](const tensorfetch::FetchOptions& fo) {
      if (selection.empty()) return tensorfetch::Result<tensorfetch::FetchStats>(tensorfetch::FetchStats{});
      return checkpoint->checkpoint.fetch(selection, fo);
    });
  });
}

tf_code tf_plan_fetch(tf_checkpoint* checkpoint, const char* const* patterns, size_t n,
                      const tf_fetch_options* options, tf_plan** out, tf_error** err) noexcept {
  clear_error(err);
  if (out == nullptr) return store_error(err, TF_ERR_INVALID_ARGUMENT, "tf_plan_fetch: out is NULL");
  *out = nullptr;
  if (checkpoint == nullptr) return store_error(err, TF_ERR_INVALID_ARGUMENT, "tf_plan_fetch: checkpoint is NULL");
  if (n > 0 && patterns == nullptr) {
    return store_error(err, TF_ERR_INVALID_ARGUMENT, "tf_plan_fetch: patterns is NULL");
  }
  return guarded(err, [&]() -> tf_code {
    std::vector<tensorfetch::Selection> selection;
    if (tf_code c = select_patterns(checkpoint, patterns, n, "tf_plan_fetch", selection, err); c != TF_OK) return c;
    tensorfetch::FetchOptions fo;
    if (tf_code c = fetch_options(checkpoint, options, fo, err); c != TF_OK) return c;
    auto plan = std::make_unique<tf_plan>();
    if (!selection.empty()) {
      // plan() reads (and may create) the cache entries fetches write: one at a time.
      std::lock_guard<std::mutex> lock(checkpoint->fetch_mutex);
      auto planned = checkpoint->checkpoint.plan(selection, fo);
      if (!planned) return store_error(err, planned.error());
      plan->transfers = std::move(*planned);
    }
    *out = plan.release();
    return TF_OK;
  });
}

size_t tf_plan_count(const tf_plan* plan) noexcept { return plan != nullptr ? plan->transfers.size() : 0; }

size_t tf_plan_file(const tf_plan* plan, size_t i) noexcept {
  const auto* t = transfer_at(plan, i);
  return t != nullptr ? t->file : 0;
}

const char* tf_plan_url(const tf_plan* plan, size_t i) noexcept {
  const auto* t = transfer_at(plan, i);
  return t != nullptr ? t->url.c_str() : nullptr;
}

uint64_t tf_plan_offset(const tf_plan* plan, size_t i) noexcept {
  const auto* t = transfer_at(plan, i);
  return t != nullptr ? t->range.offset : 0;
}

uint64_t tf_plan_length(const tf_plan* plan, size_t i) noexcept {
  const auto* t = transfer_at(plan, i);
  return t != nullptr ? t->range.length : 0;
}

const char* tf_plan_if_match(const tf_plan* plan, size_t i) noexcept {
  const auto* t = transfer_at(plan, i);
  return t != nullptr && t->if_match ? t->if_match->c_str() : nullptr;
}

int tf_plan_send_token(const tf_plan* plan, size_t i) noexcept {
  const auto* t = transfer_at(plan, i);
  return t != nullptr && t->send_token ? 1 : 0;
}

int64_t tf_plan_expires_at(const tf_plan* plan, size_t i) noexcept {
  const auto* t = transfer_at(plan, i);
  return t != nullptr ? t->expires_at : 0;
}

void tf_plan_free(tf_plan* plan) noexcept { delete plan; }

tf_code tf_select_for_rank(const tf_checkpoint* checkpoint, size_t rank, size_t world, const char* rules_json,
                           int expert_parallel, tf_tp_selection** out, tf_error** err) noexcept {
  clear_error(err);
  if (out == nullptr) return store_error(err, TF_ERR_INVALID_ARGUMENT, "tf_select_for_rank: out is NULL");
  *out = nullptr;
  if (checkpoint == nullptr) return store_error(err, TF_ERR_INVALID_ARGUMENT, "tf_select_for_rank: checkpoint is NULL");
  return guarded(err, [&]() -> tf_code {
    tensorfetch::TpRules rules;
    if (rules_json != nullptr) {
      auto parsed = tensorfetch::parse_tp_rules(rules_json, "rules_json");
      if (!parsed) return store_error(err, parsed.error());
      rules = std::move(*parsed);
    }
    rules.expert_parallel = expert_parallel != 0;
    auto model = checkpoint->checkpoint.tp_model();
    if (!model) return store_error(err, model.error());
    auto selected = checkpoint->checkpoint.select_for_rank(rank, world, rules);
    if (!selected) return store_error(err, selected.error());
    auto sel = std::make_unique<tf_tp_selection>();
    sel->checkpoint = checkpoint;
    sel->selection = std::move(*selected);
    for (const auto& s : sel->selection) {
      sel->slices.push_back(s.slice ? std::optional<std::string>(tensorfetch::to_string(*s.slice)) : std::nullopt);
    }
    sel->rule = tensorfetch::describe_tp(*model, rules);
    *out = sel.release();
    return TF_OK;
  });
}

size_t tf_tp_count(const tf_tp_selection* selection) noexcept {
  return selection != nullptr ? selection->selection.size() : 0;
}

const char* tf_tp_name(const tf_tp_selection* selection, size_t i) noexcept {
  const auto* s = tp_at(selection, i);
  return s != nullptr ? s->ref.info->name.data() : nullptr;  // NUL-terminated, as tf_tensor_name
}

const uint64_t* tf_tp_shape(const tf_tp_selection* selection, size_t i, size_t* ndim) noexcept {
  const auto* s = tp_at(selection, i);
  if (ndim != nullptr) *ndim = s != nullptr ? s->plan.shape.size() : 0;
  return s != nullptr ? s->plan.shape.data() : nullptr;
}

const char* tf_tp_slice(const tf_tp_selection* selection, size_t i) noexcept {
  return tp_at(selection, i) != nullptr && selection->slices[i] ? selection->slices[i]->c_str() : nullptr;
}

uint64_t tf_tp_nbytes(const tf_tp_selection* selection, size_t i) noexcept {
  const auto* s = tp_at(selection, i);
  return s != nullptr ? s->plan.nbytes : 0;
}

const char* tf_tp_rule(const tf_tp_selection* selection) noexcept {
  return selection != nullptr ? selection->rule.c_str() : "";
}

tf_code tf_tp_fetch(tf_checkpoint* checkpoint, const tf_tp_selection* selection, const tf_fetch_options* options,
                    tf_fetch_stats* stats, tf_error** err) noexcept {
  clear_error(err);
  return guarded(err, [&]() -> tf_code {
    if (tf_code c = check_tp(checkpoint, selection, "tf_tp_fetch", err); c != TF_OK) return c;
    return run_fetch(checkpoint, options, stats, err, [&](const tensorfetch::FetchOptions& fo) {
      if (selection->selection.empty()) return tensorfetch::Result<tensorfetch::FetchStats>(tensorfetch::FetchStats{});
      return checkpoint->checkpoint.fetch(selection->selection, fo);
    });
  });
}

tf_code tf_tp_read(const tf_checkpoint* checkpoint, const tf_tp_selection* selection, size_t i, void* out,
                   uint64_t len, tf_error** err) noexcept {
  clear_error(err);
  return guarded(err, [&]() -> tf_code {
    if (tf_code c = check_tp(checkpoint, selection, "tf_tp_read", err); c != TF_OK) return c;
    const auto* s = tp_at(selection, i);
    if (s == nullptr) {
      return store_error(err, TF_ERR_INVALID_ARGUMENT, "tf_tp_read: tensor " + std::to_string(i) + " is out of range (" +
                                                           std::to_string(selection->selection.size()) + " tensors)");
    }
    if (out == nullptr && len != 0) return store_error(err, TF_ERR_INVALID_ARGUMENT, "tf_tp_read: out is NULL");
    auto r = checkpoint->checkpoint.read(*s, std::span<std::byte>(static_cast<std::byte*>(out), len));
    return r ? TF_OK : store_error(err, r.error());
  });
}

void tf_tp_free(tf_tp_selection* selection) noexcept { delete selection; }

tf_code tf_fetch_all(tf_checkpoint* checkpoint, const tf_fetch_options* options, tf_fetch_stats* stats,
                     tf_error** err) noexcept {
  clear_error(err);
  if (checkpoint == nullptr) return store_error(err, TF_ERR_INVALID_ARGUMENT, "tf_fetch_all: checkpoint is NULL");
  return guarded(err, [&]() -> tf_code {
    return run_fetch(checkpoint, options, stats, err,
                     [&](const tensorfetch::FetchOptions& fo) { return checkpoint->checkpoint.fetch_all(fo); });
  });
}

void tf_cancel(tf_checkpoint* checkpoint) noexcept {
  if (checkpoint != nullptr) checkpoint->cancel.cancel();
}

tf_cancel_token* tf_cancel_token_new(void) noexcept {
  try {
    return new tf_cancel_token{tensorfetch::CancelToken::make()};
  } catch (...) {  // out of memory
    return nullptr;
  }
}

void tf_cancel_token_cancel(tf_cancel_token* token) noexcept {
  if (token != nullptr) token->token.cancel();
}

int tf_cancel_token_cancelled(const tf_cancel_token* token) noexcept {
  return token != nullptr && token->token.cancelled() ? 1 : 0;
}

void tf_cancel_token_reset(tf_cancel_token* token) noexcept {
  if (token != nullptr) token->token.reset();
}

void tf_cancel_token_free(tf_cancel_token* token) noexcept { delete token; }

tf_code tf_tensor_data(const tf_checkpoint* checkpoint, const char* name, const void** data, size_t* len) noexcept {
  if (data != nullptr) *data = nullptr;
  if (len != nullptr) *len = 0;
  if (checkpoint == nullptr || name == nullptr || data == nullptr || len == nullptr) return TF_ERR_INVALID_ARGUMENT;
  try {
    const auto* ref = checkpoint->checkpoint.find(name);
    if (ref == nullptr) return TF_ERR_NOT_FOUND;
    auto view = checkpoint->checkpoint.view(*ref);
    if (!view) return to_c(view.error().code);
    *data = view->bytes.data();
    *len = view->bytes.size();
    return TF_OK;
  } catch (...) {  // out of memory while building an error message
    return TF_ERR_INTERNAL;
  }
}

tf_code tf_trace_start(const char* path, tf_error** err) noexcept {
  clear_error(err);
  if (path == nullptr) return store_error(err, TF_ERR_INVALID_ARGUMENT, "tf_trace_start: path is NULL");
  return guarded(err, [&]() -> tf_code {
    auto started = tensorfetch::trace_start(path);
    if (!started) return store_error(err, started.error());
    return TF_OK;
  });
}

tf_code tf_trace_stop(tf_error** err) noexcept {
  clear_error(err);
  return guarded(err, [&]() -> tf_code {
    auto stopped = tensorfetch::trace_stop();
    if (!stopped) return store_error(err, stopped.error());
    return TF_OK;
  });
}

tf_code tf_save_files(const tf_checkpoint* checkpoint, const char* dir, tf_error** err) noexcept {
  clear_error(err);
  if (checkpoint == nullptr || dir == nullptr) {
    return store_error(err, TF_ERR_INVALID_ARGUMENT, "tf_save_files: checkpoint or dir is NULL");
  }
  return guarded(err, [&]() -> tf_code {
    // Fetches write what save_files reads: one at a time.
    std::lock_guard<std::mutex> lock(checkpoint->fetch_mutex);
    auto saved = checkpoint->checkpoint.save_files(dir);
    if (!saved) return store_error(err, saved.error());
    return TF_OK;
  });
}

tf_code tf_publish_to_hf_cache(const tf_checkpoint* checkpoint, size_t* published, tf_error** err) noexcept {
  clear_error(err);
  if (published != nullptr) *published = 0;
  if (checkpoint == nullptr) {
    return store_error(err, TF_ERR_INVALID_ARGUMENT, "tf_publish_to_hf_cache: checkpoint is NULL");
  }
  return guarded(err, [&]() -> tf_code {
    // Fetches write what publishing reads: one at a time.
    std::lock_guard<std::mutex> lock(checkpoint->fetch_mutex);
    auto n = checkpoint->checkpoint.publish_to_hf_cache();
    if (!n) return store_error(err, n.error());
    if (published != nullptr) *published = *n;
    return TF_OK;
  });
}

}  // extern "C"
