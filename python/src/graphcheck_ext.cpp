// graphcheck._C: the engine's bindings for the Python front. libgraphcheck stays Python-free; this
// module binds it: the model front ("python:" models), hooks, mutations and the CLI.
//
// Note [The GIL]: the engine runs with the GIL released (cli_main drops it on entry), and every
// call into Python code goes through call_python(), which takes it back and turns a Python
// exception into a PythonError that carries the traceback. Recording works across that boundary:
// the emulated backend's recorder is thread-local, and Python's ops run on the thread that records.

#include <torch/csrc/utils/pybind.h>  // the at::Tensor caster

#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <exception>
#include <iostream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "graphcheck/engine/backend.h"
#include "graphcheck/checkpoint.h"
#include "graphcheck/cli.h"
#include "graphcheck/engine/driver.h"
#include "graphcheck/engine/reporter.h"
#include "graphcheck/engine/session.h"
#include "graphcheck/engine/transport.h"
#include "graphcheck/hooks.h"
#include "graphcheck/model.h"
#include "graphcheck/mutation.h"

namespace py = pybind11;
namespace gc = graphcheck;

namespace {

// A Python exception raised by model code, with its traceback.
class PythonError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

std::string format_python_error(py::error_already_set& e) {
  try {
    py::object format = py::module_::import("graphcheck._front").attr("format_exception");
    return format(e.type(), e.value(), e.trace()).cast<std::string>();
  } catch (...) {
    return e.what();
  }
}

// Runs `fn` with the GIL held; a Python exception becomes a C++ one the engine classifies: the
// model's contract errors are user errors (exit 2), everything else a model failure.
template <class Fn>
auto call_python(const char* what, Fn&& fn) -> decltype(fn()) {
  py::gil_scoped_acquire gil;
  try {
    return fn();
  } catch (py::error_already_set& e) {
    const bool contract = e.matches(py::module_::import("graphcheck._model").attr("ContractError"));
    std::string text = format_python_error(e);
    if (contract) throw gc::ConfigError(std::string(what) + ": " + text);
    throw PythonError(std::string(what) + " raised a Python exception:\n" + text);
  } catch (const py::cast_error& e) {
    throw gc::ConfigError(std::string(what) + " returned a value of the wrong type: " + e.what());
  }
}

// A Python object that may be dropped without the GIL (the engine frees models on its threads).
class PyRef {
 public:
  explicit PyRef(py::object object)
      : m_object(new py::object(std::move(object)), [](py::object* o) {
          py::gil_scoped_acquire gil;
          delete o;
        }) {}
  [[nodiscard]] const py::object& get() const { return *m_object; }
  void reset() { m_object.reset(); }

 private:
  std::shared_ptr<py::object> m_object;
};

gc::TensorKind kind_of(const std::string& kind) {
  if (kind == "parameter") return gc::TensorKind::parameter;
  if (kind == "persistent_buffer") return gc::TensorKind::persistent_buffer;
  if (kind == "non_persistent_buffer") return gc::TensorKind::non_persistent_buffer;
  return gc::TensorKind::extra;
}

std::vector<gc::CatalogTensor> to_catalog(const py::list& items) {
  std::vector<gc::CatalogTensor> out;
  out.reserve(items.size());
  for (const auto& item : items) {
    auto t = item.cast<py::tuple>();
    out.push_back({t[0].cast<std::string>(), t[1].cast<at::Tensor>(), kind_of(t[2].cast<std::string>())});
  }
  return out;
}

class PyModel;

// The catalog of a Python model: its ModelAdapter walks named_parameters(), the buffers with
// their real persistence flag and every plain tensor a submodule holds.
class PyCatalog final : public gc::TensorCatalog {
 public:
  PyCatalog(PyRef adapter, gc::TensorAttributes& attributes)
      : m_adapter(std::move(adapter)), m_attributes(attributes) {}

  std::vector<gc::CatalogTensor> registered_tensors() override {
    return call_python("registered tensors", [&] { return to_catalog(m_adapter.get().attr("registered_tensors")()); });
  }
  std::vector<gc::CatalogTensor> extra_tensors() override {
    return call_python("extra_tensors()", [&] { return to_catalog(m_adapter.get().attr("extra_tensors")()); });
  }
  std::vector<gc::CatalogModule> modules() override {
    return call_python("named_modules()", [&] {
      std::vector<gc::CatalogModule> out;
      for (const auto& item : m_adapter.get().attr("modules")().cast<py::list>()) {
        auto t = item.cast<py::tuple>();
        const void* id = t[1].ptr();  // kept alive by the model that holds it
        out.push_back({t[0].cast<std::string>(), id, id});
      }
      return out;
    });
  }
  std::vector<gc::CatalogTensor> module_tensors(const gc::CatalogModule& module, bool recurse) override {
    return call_python("module tensors", [&] {
      py::handle m(static_cast<PyObject*>(const_cast<void*>(module.handle)));
      return to_catalog(m_adapter.get().attr("module_tensors")(m, recurse));
    });
  }
  const gc::TensorAttrs* attributes(const at::Tensor& tensor) override {
    return call_python("tensor attributes", [&]() -> const gc::TensorAttrs* {
      auto attrs = m_adapter.get().attr("attributes")(tensor).cast<py::tuple>();
      if (attrs[0].is_none() && attrs[1].is_none()) {
        m_attributes.erase(tensor);
        return nullptr;
      }
      gc::TensorAttrs a;
      if (!attrs[0].is_none()) a.dummy_weight_value = attrs[0].cast<double>();
      if (!attrs[1].is_none()) {
        PyRef loader(py::reinterpret_borrow<py::object>(attrs[1]));
        a.weight_loader = [loader](at::Tensor& param, const at::Tensor& loaded) {
          call_python("weight_loader", [&] {
            loader.get()(param, loaded);
            return 0;
          });
        };
      }
      // Non-persistence is the catalog's kind, not an attribute, for Python models.
      m_attributes.set(tensor, std::move(a));
      return m_attributes.find(tensor);
    });
  }
  void release() { m_adapter.reset(); }
  void to(const c10::Device& device) override {
    call_python("to(device)", [&] {
      m_adapter.get().attr("to")(device.str());
      return 0;
    });
  }

 private:
  PyRef m_adapter;
  gc::TensorAttributes& m_attributes;
};

// The stream of a load, as the Python iterable load_weights() consumes. Valid only during the
// load_weights() call it was made for.
struct WeightIterator {
  gc::WeightStream* stream = nullptr;
  std::string source;
  // What the stream threw (a truncated checkpoint, a shape the file cannot hold): rethrown as it
  // was once load_weights() returns, so that it keeps its meaning (a user error, exit 2) whatever
  // model code did with the Python exception that stood for it.
  std::exception_ptr error;
  py::tuple next() {
    if (!stream) {
      throw py::value_error("graphcheck: this weights iterator belongs to a load_weights() call that "
                            "has returned (" + source + "): consume the weights inside load_weights()");
    }
    std::optional<gc::NamedTensor> item;
    std::string what;
    {
      py::gil_scoped_release release;  // the stream reads files
      try {
        item = stream->next();
      } catch (const std::exception& e) {
        error = std::current_exception();
        what = e.what();
      }
    }
    if (error) throw py::value_error("graphcheck: the weight stream failed: " + what);
    if (!item) throw py::stop_iteration();
    return py::make_tuple(item->name, item->tensor);
  }
};

class PyModel final : public gc::LifecycleModel {
 public:
  explicit PyModel(py::object adapter)
      : m_adapter(std::move(adapter)), m_catalog(m_adapter, tensor_attributes()) {}
  // Model code keeps reference cycles (a parameter holding a loader bound to its module), which
  // only Python's cycle collector frees: collected here, so that a dropped model's memory is
  // freed when the engine drops it, not whenever the collector next runs (the memory probe would
  // see it as growth).
  ~PyModel() override {
    py::gil_scoped_acquire gil;
    try {
      // A full collection costs tens of milliseconds: only when a module outlives the model's
      // last reference, i.e. a cycle keeps it (vLLM's: a parameter whose weight_loader is bound
      // to its own layer).
      py::list alive;
      py::object ref = py::module_::import("weakref").attr("ref");
      for (const auto& item : m_adapter.get().attr("modules")()) alive.append(ref(item.cast<py::tuple>()[1]));
      tensor_attributes() = gc::TensorAttributes();  // the weight_loader wrappers hold Python objects
      m_catalog.release();
      m_adapter.reset();
      bool cycle = false;
      for (const auto& r : alive) cycle = cycle || !r().is_none();
      if (cycle) py::module_::import("gc").attr("collect")();
    } catch (...) {
      // Nothing may leave a destructor; a failed collection only delays the memory's release.
    }
  }
  PyModel(const PyModel&) = delete;
  PyModel& operator=(const PyModel&) = delete;

  gc::TensorCatalog& catalog() override { return m_catalog; }

  std::set<std::string> load_weights(gc::WeightStream& weights) override {
    return call_python("load_weights()", [&] {
      auto it = std::make_shared<WeightIterator>();
      it->stream = &weights;
      it->source = weights.source();
      py::object iterator = py::cast(it);
      struct Invalidate {
        WeightIterator& it;
        ~Invalidate() { it.stream = nullptr; }
      } invalidate{*it};
      std::vector<std::string> names;
      try {
        names = m_adapter.get().attr("load_weights")(iterator).cast<std::vector<std::string>>();
      } catch (py::error_already_set&) {
        if (it->error) std::rethrow_exception(it->error);
        throw;
      }
      if (it->error) std::rethrow_exception(it->error);
      return std::set<std::string>(names.begin(), names.end());
    });
  }
  void process_weights_after_loading() override {
    call_python("process_weights_after_loading()", [&] {
      m_adapter.get().attr("process_weights_after_loading")();
      return 0;
    });
  }
  void stage_for_refit() override {
    call_python("stage_for_refit()", [&] {
      m_adapter.get().attr("stage_for_refit")();
      return 0;
    });
  }
  gc::TensorList forward_all(const gc::TensorList& inputs) override {
    return call_python("forward()", [&] {
      return m_adapter.get().attr("forward")(inputs).cast<std::vector<at::Tensor>>();
    });
  }
  gc::TensorList make_inputs(std::int64_t batch_size, std::uint64_t seed) override {
    return call_python("make_inputs()", [&] {
      return m_adapter.get().attr("make_inputs")(batch_size, seed).cast<std::vector<at::Tensor>>();
    });
  }
  std::vector<gc::CheckpointShard> checkpoint_mapping() override {
    return call_python("checkpoint_mapping()", [&] {
      std::vector<gc::CheckpointShard> out;
      for (const auto& item : m_adapter.get().attr("checkpoint_mapping")().cast<py::list>()) {
        auto t = item.cast<py::tuple>();
        out.push_back({t[0].cast<std::string>(), t[1].cast<std::string>(), t[2].cast<std::int64_t>(),
                       t[3].cast<std::int64_t>(), t[4].cast<std::int64_t>(), t[5].cast<std::int64_t>(),
                       t[6].cast<std::vector<std::int64_t>>()});
      }
      return out;
    });
  }
  std::vector<gc::TensorParallel> tensor_parallel() override {
    return call_python("tensor_parallel()", [&] {
      std::vector<gc::TensorParallel> out;
      for (const auto& item : m_adapter.get().attr("tensor_parallel")().cast<py::list>()) {
        auto t = item.cast<py::tuple>();
        gc::TensorParallel tp;
        tp.pattern = t[0].cast<std::string>();
        const std::string kind = t[1].cast<std::string>();
        tp.kind = kind == "column"      ? gc::TensorParallel::Kind::column
                  : kind == "row"       ? gc::TensorParallel::Kind::row
                  : kind == "vocab"     ? gc::TensorParallel::Kind::vocab
                  : kind == "split_dim" ? gc::TensorParallel::Kind::split_dim
                                        : gc::TensorParallel::Kind::replicated;
        tp.dim = t[2].cast<std::int64_t>();
        out.push_back(std::move(tp));
      }
      return out;
    });
  }
  void load_dummy_weights(std::uint64_t seed) override {
    const bool own = call_python("load_dummy_weights()", [&] {
      return m_adapter.get().attr("load_dummy_weights")(seed).cast<bool>();
    });
    if (!own) gc::LifecycleModel::load_dummy_weights(seed);
  }
  std::vector<gc::NamedTensor> extra_tensors() override {
    std::vector<gc::NamedTensor> out;
    for (auto& t : m_catalog.extra_tensors()) out.push_back({std::move(t.name), std::move(t.tensor)});
    return out;
  }
  std::vector<gc::NamedTensor> synthesize_checkpoint(std::uint64_t seed) override {
    auto own = call_python("synthesize_checkpoint()", [&] {
      std::optional<std::vector<gc::NamedTensor>> out;
      py::object items = m_adapter.get().attr("synthesize_checkpoint")(seed);
      if (items.is_none()) return out;
      out.emplace();
      for (const auto& item : items.cast<py::list>()) {
        auto t = item.cast<py::tuple>();
        out->push_back({t[0].cast<std::string>(), t[1].cast<at::Tensor>()});
      }
      return out;
    });
    return own ? std::move(*own) : gc::LifecycleModel::synthesize_checkpoint(seed);
  }
  std::vector<gc::ExpectedHook> expected_hooks() const override {
    return call_python("expected_hooks()", [&] {
      std::vector<gc::ExpectedHook> out;
      for (const auto& item : m_adapter.get().attr("expected_hooks")().cast<py::list>()) {
        auto t = item.cast<py::tuple>();
        out.emplace_back(t[0].cast<std::string>(), t[1].cast<std::string>(),
                         t[3].cast<std::vector<std::string>>(), t[2].cast<std::vector<std::string>>());
      }
      return out;
    });
  }

 private:
  PyRef m_adapter;
  PyCatalog m_catalog;
};

py::object config_dict(const gc::ModelConfig& config) {
  py::dict out;
  for (const auto& [key, value] : config.values()) {
    // Read through the typed getters, so that the driver sees every key used (the factory
    // itself rejects unknown keyword arguments with a TypeError naming them).
    std::visit(
        [&](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, bool>) {
            out[py::str(key)] = config.get_bool(key, v);
          } else if constexpr (std::is_same_v<T, std::int64_t>) {
            out[py::str(key)] = config.get_int(key, v);
          } else if constexpr (std::is_same_v<T, double>) {
            out[py::str(key)] = config.get_double(key, v);
          } else {
            out[py::str(key)] = config.get_string(key, v);
          }
        },
        value);
  }
  return out;
}

void install_python_front() {
  gc::ModelFront front;
  front.prepare = [](const std::string& spec) {
    py::gil_scoped_acquire gil;
    return py::module_::import("graphcheck._front").attr("prepare")(spec).cast<std::string>();
  };
  front.create = [](const std::string& spec, const gc::ModelConfig& config) -> std::unique_ptr<gc::LifecycleModel> {
    return call_python("the model factory", [&]() -> std::unique_ptr<gc::LifecycleModel> {
      py::object adapter = py::module_::import("graphcheck._front").attr("create")(spec, config_dict(config));
      return std::make_unique<PyModel>(std::move(adapter));
    });
  };
  gc::ModelRegistry::get().set_front("python", std::move(front));
}

// ---- distributed scenarios (graphcheck.distributed) --------------------------------------

// A stream over a Python iterator of (name, tensor) pairs: what a rank receives.
class PyIteratorStream final : public gc::WeightStream {
 public:
  PyIteratorStream(PyRef iterator, std::string source) : m_iterator(std::move(iterator)), m_source(std::move(source)) {}
  std::optional<gc::NamedTensor> next() override {
    return call_python("update_weights (receiving)", [&]() -> std::optional<gc::NamedTensor> {
      py::object item;
      try {
        item = m_iterator.get().attr("__next__")();
      } catch (py::error_already_set& e) {
        if (e.matches(PyExc_StopIteration)) return std::nullopt;
        throw;
      }
      auto t = item.cast<py::tuple>();
      return gc::NamedTensor{t[0].cast<std::string>(), t[1].cast<at::Tensor>()};
    });
  }
  [[nodiscard]] std::string source() const override { return m_source; }

 private:
  PyRef m_iterator;
  std::string m_source;
};

// RefitTransport over graphcheck.distributed's Transport (a process group).
class PyTransport final : public gc::RefitTransport {
 public:
  explicit PyTransport(py::object transport) : m_transport(std::move(transport)) {}
  Incoming receive(int cycle) override {
    return call_python("start_weight_update", [&] {
      auto t = m_transport.get().attr("receive")(cycle).cast<py::tuple>();
      Incoming in;
      in.source = t[2].cast<std::string>();
      in.stream = std::make_unique<PyIteratorStream>(PyRef(py::reinterpret_borrow<py::object>(t[0])), in.source);
      in.names = t[1].cast<std::vector<std::string>>();
      in.checkpoint_format = t[3].cast<bool>();
      return in;
    });
  }
  std::vector<gc::SentTensor> manifest(int cycle) override {
    return call_python("finish_weight_update", [&] {
      std::vector<gc::SentTensor> out;
      for (const auto& item : m_transport.get().attr("manifest")(cycle).cast<py::list>()) {
        auto t = item.cast<py::tuple>();
        out.push_back({t[0].cast<std::string>(), t[1].cast<std::uint64_t>(), t[2].cast<std::string>()});
      }
      return out;
    });
  }
  void drain_from(int cycle) override {
    call_python("draining the trainer's refits", [&] {
      m_transport.get().attr("drain_from")(cycle);
      return 0;
    });
  }

 private:
  PyRef m_transport;
};

gc::Scenario load_scenario(const std::string& file) {
  py::gil_scoped_release release;  // the Python front prepares the model (takes the GIL itself)
  return gc::parse_scenario_file(file, gc::default_catalog());
}

py::dict scenario_info(const std::string& file, std::optional<std::uint64_t> seed) {
  const gc::Scenario s = load_scenario(file);
  py::dict out;
  out["name"] = s.name;
  out["file"] = s.file;
  out["fixture"] = s.fixture;
  const std::uint64_t run_seed = seed.value_or(s.seed);
  out["seed"] = run_seed;
  out["timeout"] = s.timeout;
  py::list cycles;
  for (const auto& c : s.cycles) {
    if (c.kind != gc::CycleKind::refit) continue;
    cycles.append(py::make_tuple(c.seed + (run_seed - s.seed), c.prefixes()));
  }
  out["cycles"] = cycles;
  if (s.distributed) {
    const gc::DistributedSpec& d = *s.distributed;
    py::dict dist;
    dist["world_size"] = d.world_size;
    dist["trainer"] = d.trainer;
    dist["rollout"] = d.rollout;
    dist["backend"] = d.backend;
    dist["transfer"] = std::string(gc::to_string(d.transfer));
    dist["bucket_bytes"] = d.bucket_bytes;
    dist["timeout"] = d.timeout;
    out["distributed"] = dist;
  } else {
    out["distributed"] = py::none();
  }
  return out;
}

// One rollout rank: the whole engine on this rank's shard, its refits from `transport`.
std::string run_rank(const std::string& file, int rank, int world_size, int tp_rank, int tp_size, py::object transport,
                     const std::string& backend, std::optional<std::uint64_t> seed,
                     const std::vector<std::string>& mutations, const std::string& work_dir) {
  const gc::Scenario s = load_scenario(file);
  gc::RunOptions options;
  options.backend = backend;
  options.seed = seed;
  options.mutations = std::set<std::string>(mutations.begin(), mutations.end());
  options.work_dir = work_dir;
  auto context = std::make_shared<gc::RankContext>();
  context->rank = rank;
  context->world_size = world_size;
  context->tp_rank = tp_rank;
  context->tp_size = tp_size;
  options.rank = std::move(context);
  options.transport = std::make_shared<PyTransport>(std::move(transport));
  gc::ScenarioRecord record;
  {
    py::gil_scoped_release release;  // Note [The GIL]
    record = gc::run_scenario(s, options);
  }
  options.transport.reset();  // drops the Python object with the GIL held (PyRef)
  return gc::scenario_record_json(record);
}

std::optional<gc::CrashInfo> crash_from(const py::handle& h) {
  if (h.is_none()) return std::nullopt;
  auto d = h.cast<py::dict>();
  gc::CrashInfo c;
  c.cause = d["cause"].cast<std::string>();
  c.signal = d.contains("signal") ? d["signal"].cast<std::string>() : std::string();
  c.exit_code = d.contains("exit_code") ? d["exit_code"].cast<int>() : 0;
  c.timeout = d.contains("timeout") ? d["timeout"].cast<double>() : 0.0;
  c.stderr_tail = d.contains("stderr_tail") ? d["stderr_tail"].cast<std::string>() : std::string();
  c.log = d.contains("log") ? d["log"].cast<std::string>() : std::string();
  c.last_pass = d.contains("last_pass") ? d["last_pass"].cast<std::string>() : std::string();
  return c;
}

std::string merge_ranks(const std::string& file, const py::list& ranks, const std::vector<std::string>& mutations) {
  const gc::Scenario s = load_scenario(file);
  std::vector<gc::session::RankRun> runs;
  for (const auto& item : ranks) {
    auto d = item.cast<py::dict>();
    gc::session::RankRun r;
    r.rank = d["rank"].cast<int>();
    r.tp_rank = d["tp_rank"].cast<int>();
    r.trainer = d["trainer"].cast<bool>();
    if (!d["record"].is_none()) r.record = gc::scenario_record_from_json(d["record"].cast<std::string>());
    r.crash = crash_from(d["crash"]);
    r.error = d["error"].cast<std::string>();
    runs.push_back(std::move(r));
  }
  return gc::scenario_record_json(gc::session::merge_ranks(s, std::move(runs), mutations));
}

// The Python runner of whole distributed scenarios (graphcheck.distributed.run_scenario).
void install_distributed_runner() {
  gc::set_distributed_runner([](const gc::Scenario& scenario, const gc::RunOptions& options,
                                gc::ProgressListener*) -> gc::ScenarioRecord {
    std::string json = call_python("the distributed launcher", [&] {
      py::dict o;
      o["backend"] = options.backend;
      o["seed"] = options.seed ? py::cast(*options.seed) : py::none();
      o["mutations"] = std::vector<std::string>(options.mutations.begin(), options.mutations.end());
      o["work_dir"] = options.work_dir;
      o["timeout"] = options.timeout;
      return py::module_::import("graphcheck.distributed").attr("run_scenario")(scenario.file, o).cast<std::string>();
    });
    return gc::scenario_record_from_json(json);
  });
}

// Note [Source of recorded ops] (graphcheck/engine/backend.h), for Python forwards: the innermost
// frame outside torch's own package, as "file:line"; the innermost frame where every one is
// torch's. A walk of a few frames under the GIL, once per op the emulated backend records.
std::string utf8(PyObject* text) {
  Py_ssize_t size = 0;
  const char* data = text != nullptr ? PyUnicode_AsUTF8AndSize(text, &size) : nullptr;
  if (data == nullptr) {
    PyErr_Clear();
    return {};
  }
  return std::string(data, static_cast<std::size_t>(size));
}

bool python_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

std::string source_now() {
  // A thread Python never ran on has no Python frames (and taking the GIL there would make it a
  // thread state per op); at exit, taking the GIL may never return.
  if (!Py_IsInitialized() || python_finalizing() || PyGILState_GetThisThreadState() == nullptr) return {};
  py::gil_scoped_acquire gil;
  const py::error_scope pending;  // a Python error set before this call stays as it was
  std::string innermost;
  py::object frame = py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(PyEval_GetFrame()));
  while (frame) {
    auto* f = reinterpret_cast<PyFrameObject*>(frame.ptr());
    const py::object code = py::reinterpret_steal<py::object>(reinterpret_cast<PyObject*>(PyFrame_GetCode(f)));
    const std::string filename = utf8(reinterpret_cast<const PyCodeObject*>(code.ptr())->co_filename);
    const bool torch_own = filename.find("/torch/") != std::string::npos;
    if (!torch_own || innermost.empty()) {
      std::string where = filename + ":" + std::to_string(PyFrame_GetLineNumber(f));
      if (!torch_own) return where;
      innermost = std::move(where);
    }
    frame = py::reinterpret_steal<py::object>(reinterpret_cast<PyObject*>(PyFrame_GetBack(f)));
  }
  return innermost;
}

int run_cli(const std::vector<std::string>& args) {
  std::vector<std::string> storage = args;
  std::vector<char*> argv;
  for (auto& a : storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  py::gil_scoped_release release;  // Note [The GIL]
  return gc::cli_main(static_cast<int>(storage.size()), argv.data());
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  // Note [Foreign objects in recorded forwards]: recordings may own Python objects.
  gc::set_host_lock([](const std::function<void()>& fn) {
    py::gil_scoped_acquire gil;
    fn();
  });
  gc::set_source_hook(&source_now);  // Note [Source of recorded ops]
  m.doc() = "graphcheck's engine, bound for the Python front (use the graphcheck package)";
  py::class_<WeightIterator, std::shared_ptr<WeightIterator>>(m, "WeightIterator")
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", &WeightIterator::next);

  m.def("cli_main", &run_cli, py::arg("argv"),
        "Runs the graphcheck CLI with argv (argv[0] is the program name); returns the exit code.");
  m.def("set_child_command", &gc::set_child_command, py::arg("command"),
        "The program and first arguments isolated scenarios run (`__scenario ...` follows).");
  m.def("capturing", &gc::tracing_forward,
        "True on this thread while the emulated backend records a forward (Note [Capturing, as model code asks]).");
  m.def(
      "hook",
      [](py::handle module, const std::string& name) { gc::hook_called(module.ptr(), name); },
      py::arg("module"), py::arg("hook"), "Announces that `module` ran lifecycle hook `hook`.");
  m.def(
      "add_mutation",
      [](const std::string& name, const std::string& owner, const std::string& description) {
        if (const auto* info = gc::mutation::find(name)) {
          if (info->owner == owner && info->description == description) return false;
          throw py::value_error("mutation '" + name + "' is already registered by '" + info->owner +
                                "' (" + info->description + "): give this one another name");
        }
        return gc::mutation::add(name, owner, description);
      },
      py::arg("name"), py::arg("owner"), py::arg("description"));
  m.def("mutation_enabled", [](const std::string& name) { return gc::mutation::enabled(name); }, py::arg("name"));
  m.def("mutations", [] {
    std::vector<std::tuple<std::string, std::string, std::string>> out;
    for (const auto& info : gc::mutation::all()) out.emplace_back(info.name, info.owner, info.description);
    return out;
  });
  m.def("scenario_info", &scenario_info, py::arg("file"), py::arg("seed") = py::none(),
        "A scenario file's name, seed, refit cycles (seed, prefixes) and `distributed:` spec.");
  m.def("run_rank", &run_rank, py::arg("file"), py::arg("rank"), py::arg("world_size"), py::arg("tp_rank"),
        py::arg("tp_size"), py::arg("transport"), py::arg("backend"), py::arg("seed"), py::arg("mutations"),
        py::arg("work_dir"),
        "Runs one rollout rank of a distributed scenario in this process; returns its record (JSON).");
  m.def("merge_ranks", &merge_ranks, py::arg("file"), py::arg("ranks"), py::arg("mutations") = std::vector<std::string>{},
        "The ranks' records as one, with the cross-rank checks; returns it (JSON).");
  m.def(
      "synthesize_full_checkpoint",
      [](const std::string& file, const std::string& work_dir, std::uint64_t seed, const std::vector<std::string>& mutations) {
        const gc::Scenario s = load_scenario(file);
        gc::RunOptions options;
        options.work_dir = work_dir;
        gc::mutation::Scope scope(std::set<std::string>(mutations.begin(), mutations.end()));
        py::gil_scoped_release release;
        return gc::synthesize_full_checkpoint(s, options, seed);
      },
      py::arg("file"), py::arg("work_dir"), py::arg("seed"), py::arg("mutations") = std::vector<std::string>{},
      "The full checkpoint of `seed` for a distributed scenario (an unsharded model's), written once; its path.");
  m.def(
      "read_checkpoint",
      [](const std::string& path, const std::vector<std::string>& prefixes) {
        std::vector<std::pair<std::string, at::Tensor>> out;
        gc::SafetensorsWeightStream stream(path, prefixes, {}, gc::StreamReads::copies);
        while (auto item = stream.next()) out.emplace_back(item->name, item->tensor);
        return out;
      },
      py::arg("path"), py::arg("prefixes") = std::vector<std::string>{},
      "The tensors of a safetensors file whose names have one of the prefixes (all when none), in order.");
  m.def(
      "write_reports",
      [](const std::vector<std::string>& records, const std::string& report_dir, const std::string& stem,
         const py::dict& options) {
        gc::session::ExecOptions exec;
        exec.backend = options.contains("backend") ? options["backend"].cast<std::string>() : "auto";
        if (options.contains("seed") && !options["seed"].is_none()) exec.seed = options["seed"].cast<std::uint64_t>();
        exec.threads = options.contains("threads") ? options["threads"].cast<int>() : 1;
        exec.report_dir = report_dir;
        gc::RunRecord run = gc::session::new_run(exec, gc::session::Shard{});
        for (const auto& text : records) {
          gc::ScenarioRecord r = gc::scenario_record_from_json(text);
          r.causes = gc::session::triage(r, gc::session::repro_command(r, exec));
          run.scenarios.push_back(std::move(r));
        }
        run.complete = true;
        gc::ReporterMux mux;
        std::string error;
        const auto paths = gc::session::open_reporters({}, report_dir, stem, mux, error);
        if (!paths) throw py::value_error(error);
        gc::ConsoleReporter console(std::cout);
        for (const auto& r : run.scenarios) console.on_scenario_done(r);
        console.on_run_done(run);
        mux.on_run_done(run);
        std::cout << "reports:";
        for (const auto& p : *paths) std::cout << ' ' << p;
        std::cout << std::endl;
        return run.exit_code();
      },
      py::arg("records"), py::arg("report_dir"), py::arg("stem"), py::arg("options"),
      "Writes every report of a run made of these scenario records (JSON); returns its exit code.");
  m.def("fingerprint", [](const at::Tensor& t) { return gc::tensor_fingerprint(t); }, py::arg("tensor"),
        "graphcheck's fingerprint of a tensor's bytes (what the transfer manifest carries).");
  m.def(
      "enable_mutations",
      [](const std::vector<std::string>& names) {
        // For the rest of this thread's life: a trainer-only rank runs no scenario of its own.
        static thread_local std::unique_ptr<gc::mutation::Scope> scope;
        scope.reset();
        scope = std::make_unique<gc::mutation::Scope>(std::set<std::string>(names.begin(), names.end()));
      },
      py::arg("names"), "Enables mutations on this thread for good (a trainer-only rank).");
  install_python_front();
  install_distributed_runner();
}
