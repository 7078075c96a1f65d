// SPDX-License-Identifier: Apache-2.0
// tensorfetch._tensorfetch: the pybind11 binding under the Python package `tensorfetch`
// (lib/python/tensorfetch/__init__.py holds the user-facing API: safe_open, load, inspect...).
//
// Thin, over the public C++ API only. What it adds:
// - Zero-copy tensors: NumPy arrays (read-only) over the checkpoint's mapping of the file or
//   cache blob, each holding a reference to the Python `Checkpoint` object, which owns the C++
//   `Checkpoint` and so the mapping; torch tensors (through DLPack) over a private copy-on-write
//   mapping (Checkpoint::private_view), writable as safetensors' are, which they keep alive
//   themselves.
// - Blocking work (open, fetch, download) runs on a worker thread while the calling thread, GIL
//   released, waits in 50 ms steps; between them it checks for signals (Ctrl-C: the work is
//   cancelled through a CancelToken, then KeyboardInterrupt is raised) and calls the Python
//   progress callback, so that every Python call happens on the caller's thread.
// - Library errors become the exception classes of tensorfetch.errors, by exit code.
#include <Python.h>
#include <dlpack/dlpack.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <chrono>
#include <cstring>
#include <future>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tensorfetch/tensorfetch.hpp"

namespace py = pybind11;
namespace tf = tensorfetch;

namespace {

// ---------------------------------------------------------------------------------------------
// Errors

// Where an error came from, for the Python class: a tensor lookup (KeyError), opening (a
// missing file is FileNotFoundError), anything else.
enum class Origin { Other, Tensor, Open };

// A library error on its way to Python (see the translator in the module init).
struct LibraryError : std::exception {
  tf::Error error;
  Origin origin;
  LibraryError(tf::Error e, Origin o) : error(std::move(e)), origin(o) {}
  const char* what() const noexcept override { return error.message.c_str(); }
};

[[noreturn]] void raise(tf::Error e, Origin origin = Origin::Other) { throw LibraryError(std::move(e), origin); }

// A framework cannot represent a dtype (BF16 in NumPy, F8 in an old torch): tensorfetch.DtypeError.
struct DtypeUnsupported : std::exception {
  std::string message;
  explicit DtypeUnsupported(std::string m) : message(std::move(m)) {}
  const char* what() const noexcept override { return message.c_str(); }
};

std::string quoted(std::string_view name) { return "'" + std::string(name) + "'"; }

// ---------------------------------------------------------------------------------------------
// Options (validated by the Python layer: names, types and ranges)

tf::OpenOptions open_options(const py::dict& d) {
  tf::OpenOptions o;
  auto get = [&](const char* key) -> std::optional<py::object> {
    if (!d.contains(key)) return std::nullopt;
    py::object v = d[key];
    if (v.is_none()) return std::nullopt;
    return v;
  };
  if (auto v = get("endpoint")) o.endpoint = v->cast<std::string>();
  if (auto v = get("token")) o.token = v->cast<std::string>();
  if (auto v = get("cacert")) o.ca_file = v->cast<std::string>();
  if (auto v = get("window")) o.header_window = v->cast<std::uint64_t>();
  if (auto v = get("connections")) o.connections = v->cast<std::size_t>();
  if (auto v = get("max_connections")) o.max_connections = v->cast<std::size_t>();
  if (auto v = get("header_connections")) o.header_connections = v->cast<std::size_t>();
  if (auto v = get("retries")) o.max_retries = v->cast<int>();
  if (auto v = get("stall_timeout")) o.stall_timeout_ms = v->cast<long>();
  if (auto v = get("min_rate")) o.min_rate = v->cast<std::uint64_t>();
  if (auto v = get("max_rate")) o.max_rate = v->cast<std::uint64_t>();
  if (auto v = get("cache_dir")) o.cache_dir = v->cast<std::string>();
  if (auto v = get("offline")) o.offline = v->cast<bool>();
  if (auto v = get("shared_cache")) o.shared_cache = v->cast<bool>();
  if (auto v = get("hf_hub_cache")) o.hf_hub_cache = v->cast<std::string>();
  if (auto v = get("warm_connections")) o.warm_connections = v->cast<bool>();
  if (auto v = get("s3_endpoint")) o.s3_endpoint = v->cast<std::string>();
  if (auto v = get("no_sign_request")) o.s3_no_sign_request = v->cast<bool>();
  if (auto v = get("presign_expires")) o.s3_presign_seconds = v->cast<std::int64_t>();
  return o;
}

tf::FetchOptions fetch_options(const py::dict& d) {
  tf::FetchOptions o;
  if (d.contains("chunk_size") && !d["chunk_size"].is_none()) o.chunk_size = d["chunk_size"].cast<std::uint64_t>();
  if (d.contains("coalesce_gap") && !d["coalesce_gap"].is_none()) {
    o.coalesce_gap = d["coalesce_gap"].cast<std::uint64_t>();
  }
  if (d.contains("coalesce_overfetch_percent") && !d["coalesce_overfetch_percent"].is_none()) {
    o.coalesce_overfetch_percent = d["coalesce_overfetch_percent"].cast<std::uint32_t>();
  }
  return o;
}

// ---------------------------------------------------------------------------------------------
// Blocking work: on a worker thread; the caller waits with the GIL released, checking signals
// and reporting progress every 50 ms.

// The latest progress of a fetch, written by the fetching thread, read by the caller's.
struct ProgressSlot {
  std::mutex mutex;
  tf::FetchProgress latest;  // per_file is not kept (valid during the callback only)
  bool fresh = false;

  void store(const tf::FetchProgress& p) {
    std::lock_guard lock(mutex);
    latest = p;
    latest.per_file = {};
    fresh = true;
  }
  std::optional<tf::FetchProgress> take() {
    std::lock_guard lock(mutex);
    if (!fresh) return std::nullopt;
    fresh = false;
    return latest;
  }
};

// A dict of a plain struct's fields, each given as ("name", &Struct::member).
template <class S, class... M>
py::dict fields_dict(const S& s, const std::pair<const char*, M S::*>&... fields) {
  py::dict d;
  ((d[fields.first] = s.*fields.second), ...);
  return d;
}

py::dict progress_dict(const tf::FetchProgress& p) {
  using P = tf::FetchProgress;
  return fields_dict(p, std::pair{"bytes_done", &P::bytes_done}, std::pair{"bytes_total", &P::bytes_total},
                     std::pair{"bytes_cached", &P::bytes_cached}, std::pair{"files_done", &P::files_done},
                     std::pair{"files_total", &P::files_total}, std::pair{"seconds", &P::seconds},
                     std::pair{"waiting_seconds", &P::waiting_seconds});
}

// Runs `work` (which must not touch Python) on a worker thread. Ctrl-C (a pending signal whose
// handler raises) cancels `token` and, once the work has stopped, re-raises in the caller.
// `progress` (may be None) is called with a dict whenever `slot` has news; an exception from it
// also cancels the work and is re-raised; a return value of False cancels the work (the
// library's Cancelled error follows).
template <class F>
auto run_blocking(F&& work, const tf::CancelToken& token, ProgressSlot* slot = nullptr,
                  const py::object& progress = py::none()) {
  using R = std::invoke_result_t<F>;
  std::packaged_task<R()> task(std::forward<F>(work));
  std::future<R> done = task.get_future();
  std::thread worker(std::move(task));
  std::optional<py::error_already_set> pending;
  auto report = [&] {
    if (!slot || progress.is_none() || pending) return;
    if (auto p = slot->take()) {
      try {
        py::object r = progress(progress_dict(*p));
        if (r.is(py::bool_(false))) token.cancel();
      } catch (py::error_already_set& e) {
        pending.emplace(std::move(e));
        token.cancel();
      }
    }
  };
  while (true) {
    bool ready;
    {
      py::gil_scoped_release release;
      ready = done.wait_for(std::chrono::milliseconds(50)) == std::future_status::ready;
      if (ready) worker.join();
    }
    if (ready) break;
    if (!pending && PyErr_CheckSignals() != 0) {
      pending.emplace();  // takes the raised exception (KeyboardInterrupt)
      token.cancel();
      continue;
    }
    report();
  }
  report();  // the last figures
  if (pending) throw std::move(*pending);
  return done.get();
}

// ---------------------------------------------------------------------------------------------
// dtypes: NumPy as safetensors' numpy rules, torch as its torch rules

enum class Framework { NumPy = 0, Torch = 1 };

const char* numpy_name(tf::DType t) {
  using D = tf::DType;
  switch (t) {
    case D::F64: return "float64";
    case D::F32: return "float32";
    case D::F16: return "float16";
    case D::U64: return "uint64";
    case D::I64: return "int64";
    case D::U32: return "uint32";
    case D::I32: return "int32";
    case D::U16: return "uint16";
    case D::I16: return "int16";
    case D::U8: return "uint8";
    case D::I8: return "int8";
    case D::BOOL: return "bool";
    case D::C64: return "complex64";
    default: return nullptr;
  }
}

// torch's name for a dtype (as safetensors maps them), and whether DLPack (v0.6, as torch 1.13
// reads it) carries it directly; else the bytes go as uint8 and are reinterpreted with view().
struct TorchType {
  const char* name = nullptr;
  DLDataType dl{kDLUInt, 8, 1};
  bool direct = false;
};

TorchType torch_type(tf::DType t) {
  using D = tf::DType;
  auto direct = [](const char* n, std::uint8_t code, std::uint8_t bits) {
    return TorchType{n, DLDataType{code, bits, 1}, true};
  };
  auto viewed = [](const char* n) { return TorchType{n, DLDataType{kDLUInt, 8, 1}, false}; };
  switch (t) {
    case D::F64: return direct("float64", kDLFloat, 64);
    case D::F32: return direct("float32", kDLFloat, 32);
    case D::F16: return direct("float16", kDLFloat, 16);
    case D::BF16: return direct("bfloat16", kDLBfloat, 16);
    case D::I64: return direct("int64", kDLInt, 64);
    case D::I32: return direct("int32", kDLInt, 32);
    case D::I16: return direct("int16", kDLInt, 16);
    case D::I8: return direct("int8", kDLInt, 8);
    case D::U8: return direct("uint8", kDLUInt, 8);
    case D::C64: return direct("complex64", kDLComplex, 64);
    case D::BOOL: return viewed("bool");
    case D::U16: return viewed("uint16");
    case D::U32: return viewed("uint32");
    case D::U64: return viewed("uint64");
    case D::F8_E4M3: return viewed("float8_e4m3fn");
    case D::F8_E5M2: return viewed("float8_e5m2");
    case D::F8_E4M3FNUZ: return viewed("float8_e4m3fnuz");
    case D::F8_E5M2FNUZ: return viewed("float8_e5m2fnuz");
    case D::F8_E8M0: return viewed("float8_e8m0fnu");
    case D::F4: return viewed("float4_e2m1fn_x2");
    default: return TorchType{};
  }
}

// Python objects looked up once and kept for the life of the process (never released: they
// would outlive the interpreter's teardown otherwise).
struct Cache {
  std::array<PyObject*, tf::kDTypeCount> numpy_dtype{};  // nullptr: not looked up yet
  std::array<PyObject*, tf::kDTypeCount> torch_dtype{};
  PyObject* torch = nullptr;
  PyObject* from_dlpack = nullptr;
  PyObject* torch_from_numpy = nullptr;
};
Cache& cache() {
  static Cache c;
  return c;
}

std::string where(const tf::Checkpoint& ckpt, const tf::TensorRef& ref) {
  return "tensor " + quoted(ref.info->name) + " (" + std::string(tf::to_string(ref.info->dtype)) + ", " +
         ckpt.files()[ref.file].path + ")";
}

py::handle numpy_dtype(const tf::Checkpoint& ckpt, const tf::TensorRef& ref) {
  const tf::DType t = ref.info->dtype;
  PyObject*& slot = cache().numpy_dtype[static_cast<std::size_t>(t)];
  if (slot) return slot;
  if (t == tf::DType::BF16) {
    // As safetensors: numpy.dtype("bfloat16"), which exists once a package such as ml_dtypes
    // has registered it.
    try {
      slot = py::dtype(std::string("bfloat16")).release().ptr();
      return slot;
    } catch (py::error_already_set&) {
      throw DtypeUnsupported(where(ckpt, ref) + ": NumPy has no bfloat16 dtype (install ml_dtypes to add one); "
                             "use framework=\"pt\", which has torch.bfloat16");
    }
  }
  const char* name = numpy_name(t);
  if (!name) {
    throw DtypeUnsupported(where(ckpt, ref) + ": NumPy has no " + std::string(tf::to_string(t)) +
                           " dtype; use framework=\"pt\" with a torch that has it");
  }
  slot = py::dtype(std::string(name)).release().ptr();
  return slot;
}

py::handle torch_module() {
  Cache& c = cache();
  if (!c.torch) {
    c.torch = py::module_::import("torch").release().ptr();
    py::object dl = py::module_::import("torch.utils.dlpack").attr("from_dlpack");
    c.from_dlpack = dl.release().ptr();
    c.torch_from_numpy = py::object(py::reinterpret_borrow<py::object>(c.torch).attr("from_numpy")).release().ptr();
  }
  return c.torch;
}

py::handle torch_dtype(const tf::Checkpoint& ckpt, const tf::TensorRef& ref) {
  const tf::DType t = ref.info->dtype;
  PyObject*& slot = cache().torch_dtype[static_cast<std::size_t>(t)];
  if (slot) return slot;
  const TorchType tt = torch_type(t);
  py::object torch = py::reinterpret_borrow<py::object>(torch_module());
  const std::string version = py::str(torch.attr("__version__"));
  if (!tt.name) {
    throw DtypeUnsupported(where(ckpt, ref) + ": torch has no " + std::string(tf::to_string(t)) +
                           " dtype (safetensors does not map it either)");
  }
  if (!py::hasattr(torch, tt.name)) {
    throw DtypeUnsupported(where(ckpt, ref) + ": this torch (" + version + ") has no torch." + tt.name +
                           " (a newer torch has it); the bytes are not reinterpreted as another dtype");
  }
  slot = py::object(torch.attr(tt.name)).release().ptr();
  return slot;
}

// The framework's shape for a tensor of `shape`: F4 packs two values per torch element.
std::vector<std::int64_t> framework_shape(const tf::Checkpoint& ckpt, const tf::TensorRef& ref,
                                          std::span<const std::uint64_t> shape) {
  std::vector<std::int64_t> out(shape.begin(), shape.end());
  if (ref.info->dtype == tf::DType::F4) {
    if (out.empty() || out.back() % 2 != 0) {
      throw DtypeUnsupported(where(ckpt, ref) + ": an F4 tensor becomes torch.float4_e2m1fn_x2 only when its last "
                             "dimension is even");
    }
    out.back() /= 2;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Zero-copy tensors

// A read-only NumPy array over `bytes`, keeping `owner` alive.
py::object numpy_view(const tf::Checkpoint& ckpt, const tf::TensorRef& ref, std::span<const std::byte> bytes,
                      std::span<const std::uint64_t> shape, const py::object& owner) {
  py::dtype dtype = py::reinterpret_borrow<py::dtype>(numpy_dtype(ckpt, ref));
  std::vector<py::ssize_t> dims(shape.begin(), shape.end());
  std::vector<py::ssize_t> strides(dims.size());
  py::ssize_t step = dtype.itemsize();
  for (std::size_t i = dims.size(); i-- > 0;) {
    strides[i] = step;
    step *= dims[i];
  }
  static const std::byte empty{};
  const void* data = bytes.empty() ? static_cast<const void*>(&empty) : bytes.data();
  py::array a(dtype, std::move(dims), std::move(strides), data, owner);
  py::detail::array_proxy(a.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return a;
}

// What a DLPack capsule owns: the tensor description and the private mapping of its bytes,
// released (unmapped) when torch frees the tensor, on whatever thread that happens: no Python
// object is involved, so no GIL is needed.
struct DlpackOwner {
  DLManagedTensor managed{};
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;
  std::shared_ptr<void> mapping;
};

void dlpack_delete(DLManagedTensor* m) { delete static_cast<DlpackOwner*>(m->manager_ctx); }

void dlpack_capsule_delete(PyObject* capsule) {
  // A consumer renames the capsule "used_dltensor" once it owns the tensor.
  if (PyCapsule_IsValid(capsule, "dltensor")) {
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
    if (m && m->deleter) m->deleter(m);
  }
}

// A torch tensor over `view`, a private copy-on-write mapping (torch has no read-only tensors:
// as safetensors' torch storage, `UntypedStorage.from_file(..., shared=False)`, a write into it
// stays in this process and reaches neither the file nor the cache; see
// Checkpoint::private_view for which tensors share a mapping). The tensor keeps the mapping
// alive, not the checkpoint.
py::object torch_view(const tf::Checkpoint& ckpt, const tf::TensorRef& ref, tf::PrivateTensorView view) {
  const std::span<std::byte> bytes = view.bytes;
  const std::span<const std::uint64_t> shape = view.shape;
  py::handle dtype = torch_dtype(ckpt, ref);
  const TorchType tt = torch_type(ref.info->dtype);
  auto* o = new DlpackOwner;
  if (tt.direct) {
    o->shape.assign(shape.begin(), shape.end());
  } else {
    o->shape = {static_cast<std::int64_t>(bytes.size())};
  }
  o->strides.resize(o->shape.size());
  std::int64_t step = 1;
  for (std::size_t i = o->shape.size(); i-- > 0;) {
    o->strides[i] = step;
    step *= o->shape[i];
  }
  static std::byte empty{};
  DLTensor& t = o->managed.dl_tensor;
  t.data = bytes.empty() ? static_cast<void*>(&empty) : bytes.data();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = static_cast<std::int32_t>(o->shape.size());
  t.dtype = tt.dl;
  t.shape = o->shape.data();
  t.strides = o->strides.data();
  t.byte_offset = 0;
  o->managed.manager_ctx = o;
  o->managed.deleter = dlpack_delete;
  o->mapping = std::move(view.owner);
  PyObject* capsule = PyCapsule_New(&o->managed, "dltensor", dlpack_capsule_delete);
  if (!capsule) {
    dlpack_delete(&o->managed);
    throw py::error_already_set();
  }
  py::object cap = py::reinterpret_steal<py::object>(capsule);
  py::object tensor = py::reinterpret_borrow<py::object>(cache().from_dlpack)(cap);
  if (!tt.direct) {
    auto dims = framework_shape(ckpt, ref, shape);
    tensor = tensor.attr("view")(dtype).attr("reshape")(py::cast(dims));
  }
  return tensor;
}

// A tensor (copy) from `buffer`, a writable uint8 NumPy array holding its bytes.
py::object from_buffer(const tf::Checkpoint& ckpt, const tf::TensorRef& ref, py::array buffer,
                       std::span<const std::uint64_t> shape, Framework fw) {
  if (fw == Framework::NumPy) {
    py::handle dtype = numpy_dtype(ckpt, ref);
    std::vector<py::ssize_t> dims(shape.begin(), shape.end());
    return buffer.attr("view")(dtype).attr("reshape")(py::cast(dims));
  }
  py::handle dtype = torch_dtype(ckpt, ref);
  auto dims = framework_shape(ckpt, ref, shape);
  if (buffer.size() == 0) {  // from_numpy gives an empty uint8 tensor stride 0, which view() refuses
    return py::reinterpret_borrow<py::object>(torch_module()).attr("empty")(py::cast(dims), py::arg("dtype") = dtype);
  }
  py::object t = py::reinterpret_borrow<py::object>(cache().torch_from_numpy)(buffer);
  return t.attr("view")(dtype).attr("reshape")(py::cast(dims));
}

// ---------------------------------------------------------------------------------------------
// The checkpoint object

// An open checkpoint as Python holds it. Tensors handed out hold a reference to this object,
// which owns the mappings they point into. Const members of `ckpt` are thread-safe; fetches
// (and plans, downloads) run one at a time, serialized by `fetch_mutex`.
struct PyCheckpoint {
  tf::Checkpoint ckpt;
  tf::FetchOptions fetch_defaults;
  std::mutex fetch_mutex;
  std::vector<std::string> notices;  // what the open found worth a warning (take_notices)

  PyCheckpoint(tf::Checkpoint c, tf::FetchOptions f) : ckpt(std::move(c)), fetch_defaults(std::move(f)) {}

  const tf::TensorRef& find(const std::string& name) const {
    const tf::TensorRef* ref = ckpt.find(name);
    if (!ref) {
      raise(tf::Error{tf::ErrorCode::NotFound, ckpt.location() + ": no tensor named " + quoted(name)}, Origin::Tensor);
    }
    return *ref;
  }

  tf::Selection whole(const tf::TensorRef& ref) const {
    auto plan = tf::plan_slice(*ref.info, tf::SliceSpec{});
    if (!plan) raise(plan.error());
    return tf::Selection{ref, std::nullopt, std::move(*plan)};
  }

  // Resolves names (exact first) and globs, without duplicates.
  std::vector<tf::Selection> select(const std::vector<std::string>& patterns) const {
    std::vector<tf::Selection> out;
    std::vector<const tf::TensorInfo*> seen;
    auto add = [&](tf::Selection s) {
      for (const auto* p : seen) {
        if (p == s.ref.info) return;
      }
      seen.push_back(s.ref.info);
      out.push_back(std::move(s));
    };
    for (const auto& p : patterns) {
      if (const tf::TensorRef* ref = ckpt.find(p)) {
        add(whole(*ref));
        continue;
      }
      std::vector<tf::Selector> one{tf::Selector{p, std::nullopt}};
      auto sel = ckpt.select(one);
      if (!sel) raise(sel.error(), sel.error().code == tf::ErrorCode::NotFound ? Origin::Tensor : Origin::Other);
      for (auto& s : *sel) add(std::move(s));
    }
    return out;
  }

  // Fetches the selection into the cache (remote checkpoints; a no-op otherwise).
  tf::FetchStats fetch(const std::vector<tf::Selection>& selection, const py::object& progress) {
    if (!ckpt.remote()) return {};
    ProgressSlot slot;
    tf::FetchOptions options = fetch_defaults;
    options.cancel = tf::CancelToken::make();
    options.progress = [&slot](const tf::FetchProgress& p) {
      slot.store(p);
      return true;
    };
    std::unique_lock lock(fetch_mutex, std::defer_lock);
    {
      py::gil_scoped_release release;
      lock.lock();
    }
    auto r = run_blocking([&] { return ckpt.fetch(selection, options); }, options.cancel, &slot, progress);
    if (!r) raise(r.error());
    return *r;
  }
};

py::dict stats_dict(const tf::FetchStats& s) {
  using S = tf::FetchStats;
  return fields_dict(s, std::pair{"bytes_transferred", &S::bytes_transferred},
                     std::pair{"bytes_cached", &S::bytes_cached}, std::pair{"requests", &S::requests},
                     std::pair{"retries", &S::retries}, std::pair{"chunks", &S::chunks},
                     std::pair{"connections", &S::connections});
}

std::shared_ptr<PyCheckpoint> open_checkpoint(const std::string& location, const py::dict& open,
                                              const py::dict& fetch) {
  tf::OpenOptions options = open_options(open);
  options.cancel = tf::CancelToken::make();
  options.bare_names_are_paths = true;  // as safetensors: a string without a scheme is a path
  // Told on the worker thread; warned about (warnings.warn) by the Python layer.
  std::vector<std::string> notices;
  options.on_stale_cache = [&notices](const tf::StaleCache& s) { notices.push_back(s.message); };
  auto r = run_blocking([&] { return tf::Checkpoint::open(location, options); }, options.cancel);
  if (!r) raise(r.error(), Origin::Open);
  auto out = std::make_shared<PyCheckpoint>(std::move(*r), fetch_options(fetch));
  out->notices = std::move(notices);
  return out;
}

// The zero-copy tensor `name` (fetched first when remote and not yet in the cache).
// NumPy: a read-only array over the checkpoint's shared mapping, keeping `self` alive; torch: a
// writable tensor over a private copy-on-write mapping (see torch_view).
py::object get_tensor(const py::object& self, const std::string& name, int framework) {
  PyCheckpoint& h = self.cast<PyCheckpoint&>();
  const tf::TensorRef& ref = h.find(name);
  const bool numpy = static_cast<Framework>(framework) == Framework::NumPy;
  if (!numpy) torch_dtype(h.ckpt, ref);  // an unsupported dtype fails before any byte moves
  auto served = [&]<class View>(tf::Result<View> (tf::Checkpoint::*get)(const tf::TensorRef&) const) {
    auto v = (h.ckpt.*get)(ref);
    if (!v && v.error().code == tf::ErrorCode::NotFetched && h.ckpt.remote()) {
      h.fetch({h.whole(ref)}, py::none());
      v = (h.ckpt.*get)(ref);
    }
    if (!v) raise(v.error());
    return std::move(*v);
  };
  if (numpy) {
    const tf::TensorView v = served(&tf::Checkpoint::view);
    return numpy_view(h.ckpt, ref, v.bytes, v.shape, self);
  }
  return torch_view(h.ckpt, ref, served(&tf::Checkpoint::private_view));
}

// The bytes of one selection as a new tensor (a copy), fetched first when remote and not yet in
// the cache (only its byte ranges).
py::object read_selection(PyCheckpoint& h, const tf::Selection& selection, Framework fw) {
  const tf::TensorRef& ref = selection.ref;
  // Resolve the dtype before moving any byte: an unsupported one fails at once.
  if (fw == Framework::NumPy) {
    numpy_dtype(h.ckpt, ref);
  } else {
    torch_dtype(h.ckpt, ref);
    framework_shape(h.ckpt, ref, selection.plan.shape);
  }
  py::array_t<std::uint8_t> buffer(static_cast<py::ssize_t>(selection.plan.nbytes));
  std::span<std::byte> out(reinterpret_cast<std::byte*>(buffer.mutable_data()), selection.plan.nbytes);
  auto read = [&] {
    py::gil_scoped_release release;
    return h.ckpt.read(selection, out);
  };
  auto r = read();
  if (!r && r.error().code == tf::ErrorCode::NotFetched && h.ckpt.remote()) {
    h.fetch({selection}, py::none());
    r = read();
  }
  if (!r) raise(r.error());
  return from_buffer(h.ckpt, ref, buffer, selection.plan.shape, fw);
}

// The selection of one rank of a tensor-parallel group (Checkpoint::select_for_rank), holding
// its checkpoint alive. Read-only once made.
struct PyRankSelection {
  std::shared_ptr<PyCheckpoint> owner;
  std::vector<tf::Selection> selection;
  std::string rule;  // describe_tp: the convention and rules applied

  const tf::Selection& find(const std::string& name) const {
    for (const auto& s : selection) {
      if (s.ref.info->name == name) return s;
    }
    raise(tf::Error{tf::ErrorCode::NotFound, owner->ckpt.location() + ": this rank holds no tensor named " + quoted(name)},
          Origin::Tensor);
  }
};

std::shared_ptr<PyRankSelection> select_for_rank(const std::shared_ptr<PyCheckpoint>& h, std::size_t rank,
                                                 std::size_t world, const std::optional<std::string>& rules_json,
                                                 const std::string& rules_source, bool expert_parallel,
                                                 const std::vector<std::string>& patterns) {
  tf::TpRules rules;
  if (rules_json) {
    auto parsed = tf::parse_tp_rules(*rules_json, rules_source);
    if (!parsed) raise(parsed.error());
    rules = std::move(*parsed);
  }
  rules.expert_parallel = expert_parallel;
  std::vector<tf::Selector> only;
  for (const auto& p : patterns) only.push_back(tf::Selector{p, std::nullopt});
  auto model = h->ckpt.tp_model();
  if (!model) raise(model.error());
  auto sel = h->ckpt.select_for_rank(rank, world, rules, only);
  if (!sel) raise(sel.error(), sel.error().code == tf::ErrorCode::NotFound ? Origin::Tensor : Origin::Other);
  return std::make_shared<PyRankSelection>(PyRankSelection{h, std::move(*sel), tf::describe_tp(*model, rules)});
}

// A slice of `name` (a copy): `dims` are (is_index, index, start, stop) per leading dimension,
// already normalized to the tensor's shape. Only the slice's byte ranges are fetched.
py::object get_slice(const py::object& self, const std::string& name,
                     const std::vector<std::tuple<bool, std::int64_t, std::uint64_t, std::uint64_t>>& dims,
                     int framework) {
  PyCheckpoint& h = self.cast<PyCheckpoint&>();
  const tf::TensorRef& ref = h.find(name);
  tf::SliceSpec spec;
  for (const auto& [is_index, index, start, stop] : dims) {
    tf::DimSelect d;
    d.is_index = is_index;
    if (is_index) {
      d.index = index;
    } else {
      d.start = start;
      d.stop = stop;
    }
    spec.dims.push_back(d);
  }
  auto plan = tf::plan_slice(*ref.info, spec);
  if (!plan) raise(plan.error().with_context(h.ckpt.files()[ref.file].path + ": tensor " + quoted(name)));
  return read_selection(h, tf::Selection{ref, spec, std::move(*plan)}, static_cast<Framework>(framework));
}

py::object metadata_of(const tf::Checkpoint& ckpt) {
  if (ckpt.files().empty()) return py::none();
  const auto& md = ckpt.header(0)->metadata;
  if (!md) return py::none();
  py::dict d;
  for (const auto& [k, v] : *md) d[py::str(k)] = py::str(v);
  return d;
}

py::object optional_str(const std::optional<std::string>& s) {
  return s ? py::object(py::str(*s)) : py::object(py::none());
}

// The transfers fetching `selection` would make, as dicts (Checkpoint::plan).
py::list plan_list(PyCheckpoint& h, const std::vector<tf::Selection>& selection) {
  tf::Result<std::vector<tf::PlannedTransfer>> r = std::vector<tf::PlannedTransfer>{};
  {
    py::gil_scoped_release release;
    std::lock_guard lock(h.fetch_mutex);
    r = h.ckpt.plan(selection, h.fetch_defaults);
  }
  if (!r) raise(r.error());
  py::list out;
  for (const auto& t : *r) {
    py::dict d;
    d["file"] = h.ckpt.files()[t.file].path;
    d["url"] = t.url;
    d["offset"] = t.range.offset;
    d["length"] = t.range.length;
    d["if_match"] = optional_str(t.if_match);
    d["send_token"] = t.send_token;
    d["expires_at"] = t.expires_at != 0 ? py::object(py::int_(t.expires_at)) : py::object(py::none());
    out.append(d);
  }
  return out;
}

// The object `tensorfetch inspect --json` prints (DESIGN.md, CLI contract), as Python values.
py::dict inspect_dict(const tf::Checkpoint& ckpt) {
  py::dict d;
  d["location"] = ckpt.location();
  d["sharded"] = ckpt.sharded();
  py::list files;
  for (std::size_t i = 0; i < ckpt.files().size(); ++i) {
    const auto& f = ckpt.files()[i];
    py::dict fd;
    fd["path"] = f.path;
    fd["size"] = f.size;
    fd["header_size"] = ckpt.header(i)->header_size;
    fd["etag"] = optional_str(f.etag);
    fd["sha256"] = optional_str(f.sha256);
    files.append(fd);
  }
  d["files"] = files;
  d["metadata"] = metadata_of(ckpt);
  py::list tensors;
  std::vector<const tf::TensorInfo*> infos;
  std::uint64_t total_bytes = 0;
  for (const auto& ref : ckpt.tensors()) {
    py::dict t;
    t["name"] = py::str(ref.info->name.data(), ref.info->name.size());
    t["dtype"] = std::string(tf::to_string(ref.info->dtype));
    t["shape"] = std::vector<std::uint64_t>(ref.info->shape.begin(), ref.info->shape.end());
    t["file"] = ckpt.files()[ref.file].path;
    t["data_offsets"] = py::make_tuple(ref.info->begin, ref.info->end);
    tensors.append(t);
    infos.push_back(ref.info);
    total_bytes += ref.info->nbytes();
  }
  d["tensors"] = tensors;
  std::optional<std::string_view> config;
  if (ckpt.config_json()) config = *ckpt.config_json();
  const tf::ParameterCount params = tf::count_parameters(infos, config);
  py::dict by_dtype;
  for (const auto& [dtype, n] : params.by_dtype) by_dtype[py::str(std::string(tf::to_string(dtype)))] = n;
  d["parameters"] = by_dtype;
  d["total_parameters"] = params.total;
  d["parameter_rule"] = params.rule;
  d["total_bytes"] = total_bytes;
  if (ckpt.commit()) d["commit"] = *ckpt.commit();
  if (ckpt.remote()) d["requests"] = ckpt.requests();
  if (const auto& index = ckpt.index()) {
    py::dict im;
    if (index->total_size) im["total_size"] = *index->total_size;
    if (index->total_parameters) im["total_parameters"] = *index->total_parameters;
    for (const auto& [k, v] : index->extra_metadata) im[py::str(k)] = v;
    d["index_metadata"] = im;
  }
  return d;
}

}  // namespace

PYBIND11_MODULE(_tensorfetch, m) {
  m.doc() = "tensorfetch's binding over the C++ library (use the `tensorfetch` package, not this module)";
  m.attr("__version__") = tf::version();

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const LibraryError& e) {
      const char* origin = e.origin == Origin::Tensor ? "tensor" : e.origin == Origin::Open ? "open" : "";
      py::object exc = py::module_::import("tensorfetch.errors")
                           .attr("_from_library")(std::string(tf::to_string(e.error.code)),
                                                  tf::exit_code(e.error.code), e.error.message, origin);
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
    } catch (const DtypeUnsupported& e) {
      py::object cls = py::module_::import("tensorfetch.errors").attr("DtypeError");
      PyErr_SetObject(cls.ptr(), py::str(e.message).ptr());
    }
  });

  m.def(
      "trace_start",
      [](const std::string& path) {
        if (auto r = tf::trace_start(path); !r) raise(r.error());
      },
      py::arg("path"), "Starts recording a timeline of this process's tensorfetch work (see tensorfetch.trace)");
  m.def(
      "trace_stop",
      [] {
        py::gil_scoped_release release;
        if (auto r = tf::trace_stop(); !r) {
          py::gil_scoped_acquire acquire;
          raise(r.error());
        }
      },
      "Stops the trace and writes its Chrome trace-event JSON file");

  py::class_<PyCheckpoint, std::shared_ptr<PyCheckpoint>>(
      m, "Checkpoint", "An open checkpoint (see tensorfetch.safe_open); tensors handed out keep it alive")
      .def_static("open", &open_checkpoint, py::arg("location"), py::arg("open_options"), py::arg("fetch_options"),
                  "Opens LOCATION (file, directory, index, URL or Hub repo); Ctrl-C cancels")
      .def_property_readonly("location", [](const PyCheckpoint& h) { return h.ckpt.location(); })
      .def_property_readonly("remote", [](const PyCheckpoint& h) { return h.ckpt.remote(); })
      .def_property_readonly("sharded", [](const PyCheckpoint& h) { return h.ckpt.sharded(); })
      .def_property_readonly("commit", [](const PyCheckpoint& h) { return optional_str(h.ckpt.commit()); })
      .def_property_readonly("requests", [](const PyCheckpoint& h) { return h.ckpt.requests(); })
      .def("take_notices",
           [](PyCheckpoint& h) {
             std::vector<std::string> out;
             out.swap(h.notices);
             return out;
           },
           "What the open found worth a warning (stale cached bytes, retired), once")
      .def("keys",
           [](const PyCheckpoint& h) {
             py::list out;
             for (const auto& ref : h.ckpt.tensors()) out.append(py::str(ref.info->name.data(), ref.info->name.size()));
             return out;
           },
           "Tensor names in natural order")
      .def("offset_keys",
           [](const PyCheckpoint& h) {
             py::list out;
             for (std::size_t f = 0; f < h.ckpt.files().size(); ++f) {
               for (const auto& t : h.ckpt.header(f)->tensors()) out.append(py::str(t.name.data(), t.name.size()));
             }
             return out;
           },
           "Tensor names in file order, then offset order")
      .def("metadata", [](const PyCheckpoint& h) { return metadata_of(h.ckpt); }, "__metadata__ of the (first) file")
      .def("contains", [](const PyCheckpoint& h, const std::string& name) { return h.ckpt.find(name) != nullptr; })
      .def("info",
           [](const PyCheckpoint& h, const std::string& name) {
             const tf::TensorRef& ref = h.find(name);
             return py::make_tuple(std::string(tf::to_string(ref.info->dtype)),
                                   std::vector<std::uint64_t>(ref.info->shape.begin(), ref.info->shape.end()),
                                   h.ckpt.files()[ref.file].path, py::make_tuple(ref.info->begin, ref.info->end));
           },
           "(dtype, shape, file, data_offsets) of a tensor")
      .def("files",
           [](const PyCheckpoint& h) {
             py::list out;
             for (const auto& f : h.ckpt.files()) {
               py::dict d;
               d["path"] = f.path;
               d["size"] = f.size;
               d["etag"] = optional_str(f.etag);
               d["sha256"] = optional_str(f.sha256);
               d["url"] = f.url;
               out.append(d);
             }
             return out;
           })
      .def("get_tensor", &get_tensor, py::arg("name"), py::arg("framework"),
           "Zero-copy tensor (0: NumPy, 1: torch); fetched first when remote")
      .def("get_slice", &get_slice, py::arg("name"), py::arg("dims"), py::arg("framework"),
           "A slice (copy); only its byte ranges are fetched")
      .def(
          "fetch",
          [](PyCheckpoint& h, const std::vector<std::string>& patterns, bool all, const py::object& progress) {
            std::vector<tf::Selection> selection;
            if (all) {
              for (const auto& ref : h.ckpt.tensors()) selection.push_back(h.whole(ref));
            } else {
              selection = h.select(patterns);
            }
            return stats_dict(h.fetch(selection, progress));
          },
          py::arg("patterns"), py::arg("all"), py::arg("progress"),
          "Fetches the selected tensors into the cache in one parallel fetch")
      .def(
          "plan",
          [](PyCheckpoint& h, const std::vector<std::string>& patterns, bool all) {
            std::vector<tf::Selection> selection;
            if (all) {
              for (const auto& ref : h.ckpt.tensors()) selection.push_back(h.whole(ref));
            } else {
              selection = h.select(patterns);
            }
            return plan_list(h, selection);
          },
          py::arg("patterns"), py::arg("all"), "The transfers a fetch would make, without making them")
      .def(
          "download",
          [](PyCheckpoint& h, const std::string& dir, bool hf_cache, const py::object& progress) {
            ProgressSlot slot;
            tf::FetchOptions options = h.fetch_defaults;
            options.cancel = tf::CancelToken::make();
            options.progress = [&slot](const tf::FetchProgress& p) {
              slot.store(p);
              return true;
            };
            std::unique_lock lock(h.fetch_mutex, std::defer_lock);
            {
              py::gil_scoped_release release;
              lock.lock();
            }
            tf::FetchStats stats;
            if (h.ckpt.remote()) {
              auto r = run_blocking([&] { return h.ckpt.fetch_all(options); }, options.cancel, &slot, progress);
              if (!r) raise(r.error());
              stats = *r;
            }
            auto saved = run_blocking([&] { return h.ckpt.save_files(dir); }, options.cancel);
            if (!saved) raise(saved.error());
            py::dict d = stats_dict(stats);
            py::object published = py::none();
            if (hf_cache) {
              auto n = run_blocking([&] { return h.ckpt.publish_to_hf_cache(); }, options.cancel);
              if (!n) raise(n.error());
              published = py::int_(*n);
            }
            d["published"] = published;
            py::list unverified;
            for (const auto& f : h.ckpt.files()) {
              if (h.ckpt.remote() && !f.sha256) unverified.append(f.path);
            }
            d["unverified"] = unverified;
            return d;
          },
          py::arg("dir"), py::arg("hf_cache"), py::arg("progress"),
          "Fetches every file whole (verified against its sha256 when the server names one) and saves them in DIR")
      .def("inspect", [](const PyCheckpoint& h) { return inspect_dict(h.ckpt); },
           "The object `tensorfetch inspect --json` prints")
      .def("select_for_rank", &select_for_rank, py::arg("rank"), py::arg("world"), py::arg("rules_json"),
           py::arg("rules_source"), py::arg("expert_parallel"), py::arg("patterns"),
           "The tensors (and slices) rank RANK of WORLD tensor-parallel ranks holds");

  py::class_<PyRankSelection, std::shared_ptr<PyRankSelection>>(
      m, "RankSelection", "The selection of one tensor-parallel rank (use tensorfetch.TpSelection)")
      .def_property_readonly("rule", [](const PyRankSelection& s) { return s.rule; })
      .def(
          "entries",
          [](const PyRankSelection& s) {
            py::list out;
            for (const auto& sel : s.selection) {
              py::dict d;
              d["name"] = py::str(sel.ref.info->name.data(), sel.ref.info->name.size());
              d["dtype"] = std::string(tf::to_string(sel.ref.info->dtype));
              d["shape"] = sel.plan.shape;
              d["slice"] = sel.slice ? py::object(py::str(tf::to_string(*sel.slice))) : py::object(py::none());
              d["nbytes"] = sel.plan.nbytes;
              d["file"] = s.owner->ckpt.files()[sel.ref.file].path;
              out.append(d);
            }
            return out;
          },
          "name, dtype, shape (the rank's), slice (None: whole), nbytes, file of every tensor held")
      .def(
          "fetch", [](PyRankSelection& s, const py::object& progress) { return stats_dict(s.owner->fetch(s.selection, progress)); },
          py::arg("progress"), "Fetches the rank's byte ranges into the cache in one parallel fetch")
      .def("plan", [](PyRankSelection& s) { return plan_list(*s.owner, s.selection); },
           "The transfers fetch would make, without making them")
      .def(
          "get",
          [](PyRankSelection& s, const std::string& name, int framework) {
            return read_selection(*s.owner, s.find(name), static_cast<Framework>(framework));
          },
          py::arg("name"), py::arg("framework"), "The rank's part of a tensor (a copy); fetched first when remote");
}
