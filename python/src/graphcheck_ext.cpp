// graphcheck._C: the engine's bindings for the Python front. libgraphcheck stays Python-free; this
// module binds it: the model front ("python:" models), hooks, mutations and the CLI.
//
// Note [The GIL]: the engine runs with the GIL released (cli_main drops it on entry), and every
// call into Python code goes through call_python(), which takes it back and turns a Python
// exception into a PythonError that carries the traceback. Tracing works across that boundary:
// the tracer's state is thread-local, and Python's ops run on the thread that traces.

#include <torch/csrc/utils/pybind.h>  // the at::Tensor caster

#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "graphcheck/cli.h"
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
  m.doc() = "graphcheck's engine, bound for the Python front (use the graphcheck package)";
  py::class_<WeightIterator, std::shared_ptr<WeightIterator>>(m, "WeightIterator")
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", &WeightIterator::next);

  m.def("cli_main", &run_cli, py::arg("argv"),
        "Runs the graphcheck CLI with argv (argv[0] is the program name); returns the exit code.");
  m.def("set_child_command", &gc::set_child_command, py::arg("command"),
        "The program and first arguments isolated scenarios run (`__scenario ...` follows).");
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
  install_python_front();
}
