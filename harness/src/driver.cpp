#include "graphcheck/driver.h"

#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/nn/module.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <filesystem>
#include <functional>
#include <type_traits>

#include "address_index.h"
#include "counting_allocator.h"
#include "fingerprint.h"
#include "graphcheck/backend.h"
#include "graphcheck/checkpoint.h"
#include "graphcheck/model.h"
#include "graphcheck/mutation.h"
#include "graphcheck/probe.h"
#include "graphcheck/safetensors.h"
#include "passes/passes.h"
#include "poison.h"
#include "probe_event_name.h"
#include "tensor_format.h"
#include "tolerance.h"

namespace graphcheck {

const char* to_string(Phase phase) {
  switch (phase) {
    case Phase::construct: return "construct";
    case Phase::load: return "load";
    case Phase::pwal: return "pwal";
    case Phase::warmup: return "warmup";
    case Phase::capture: return "capture";
    case Phase::replay: return "replay";
    case Phase::compare: return "compare";
    case Phase::refit: return "refit";
    case Phase::sleep: return "sleep";
    case Phase::wake: return "wake";
  }
  return "unknown";
}

const char* to_string(Pass pass) {
  switch (pass) {
    case Pass::observe: return "observe";
    case Pass::validate: return "validate";
    case Pass::idempotence: return "idempotence";
    case Pass::census: return "census";
    case Pass::poison: return "poison";
    case Pass::coverage: return "coverage";
    case Pass::growth: return "growth";
  }
  return "unknown";
}

ScenarioCatalog default_catalog() {
  ScenarioCatalog catalog;
  catalog.fixtures = ModelRegistry::get().names();
  catalog.probes = ProbeRegistry::get().names();
  catalog.is_mutation = [](const std::string& name) { return mutation::find(name) != nullptr; };
  if (ModelRegistry::get().front("python")) {
    catalog.prepare_model = [](const std::string& kind, const std::string& spec) -> std::string {
      const ModelFront* front = ModelRegistry::get().front(kind);
      if (!front) return fmt::format("no front for '{}' models is loaded", kind);
      return front->prepare ? front->prepare(spec) : std::string();
    };
  }
  return catalog;
}

GRAPHCHECK_REGISTER_MUTATION(
    "driver.skip_pwal_on_dummy", "driver",
    "the loader does not call process_weights_after_loading() after a dummy load (any model)");
GRAPHCHECK_REGISTER_MUTATION(
    "driver.skip_pwal_on_refit", "driver",
    "the loader does not call process_weights_after_loading() after a refit (any model)");
GRAPHCHECK_REGISTER_MUTATION(
    "driver.sleep_drops_buffers", "driver",
    "the engine does not save the model's registered buffers before a level-2 sleep, so buffers "
    "computed at construction (rotary cos/sin tables) stay discarded after the wake (vLLM #16564 "
    "reverted; any model with such a buffer)");

std::string RunContext::after_cycle(int cycle) const {
  if (cycle == 0) return "after the initial load";
  const CycleStep* step = cycle_step(cycle);
  return step ? fmt::format("after {}", step->label) : fmt::format("after cycle {}", cycle);
}

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// A user error (bad config, checkpoint, backend): Status::error, exit 2.
class UserError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Model code threw, or the forward cannot be captured: a failed check, exit 1.
class ModelFailure : public std::runtime_error {
 public:
  ModelFailure(Phase phase, std::string message)
      : std::runtime_error(std::move(message)), m_phase(phase) {}
  [[nodiscard]] Phase phase() const { return m_phase; }

 private:
  Phase m_phase;
};

std::string what_of(const std::exception& e) {
  if (auto* c10_error = dynamic_cast<const c10::Error*>(&e)) return c10_error->what_without_backtrace();
  return e.what();
}

// Runs model code; sorts its exceptions into user errors and model failures.
template <class Fn>
auto call_model(Phase phase, const std::string& what, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const ModelFailure&) {
    throw;
  } catch (const UserError&) {
    throw;
  } catch (const CheckpointMismatch& e) {
    throw UserError(e.what());
  } catch (const ConfigError& e) {
    throw UserError(e.what());
  } catch (const safetensors::Error& e) {
    throw UserError(e.what());
  } catch (const NotCapturable& e) {
    throw ModelFailure(phase, fmt::format("{}: not capturable: {}", what, e.what()));
  } catch (const std::exception& e) {
    throw ModelFailure(phase, fmt::format("{} threw: {}", what, what_of(e)));
  } catch (...) {
    throw ModelFailure(phase, fmt::format("{} threw an exception not derived from std::exception",
                                          what));
  }
}

// Sets a flag for its lifetime and restores the previous value.
class FlagScope {
 public:
  explicit FlagScope(bool& flag) : m_flag(flag), m_previous(flag) { m_flag = true; }
  ~FlagScope() { m_flag = m_previous; }
  FlagScope(const FlagScope&) = delete;
  FlagScope& operator=(const FlagScope&) = delete;

 private:
  bool& m_flag;
  bool m_previous;
};

// Adds the time it lives to a counter: the harness's own work inside a phase window, which the
// window's timing leaves out.
class HarnessTime {
 public:
  explicit HarnessTime(double& seconds) : m_seconds(seconds), m_start(Clock::now()) {}
  ~HarnessTime() { m_seconds += std::chrono::duration<double>(Clock::now() - m_start).count(); }
  HarnessTime(const HarnessTime&) = delete;
  HarnessTime& operator=(const HarnessTime&) = delete;

 private:
  double& m_seconds;
  Clock::time_point m_start;
};

void freeze(LifecycleModel& model) {
  for (auto& t : model.catalog().registered_tensors()) {
    if (t.kind == TensorKind::parameter) t.tensor.requires_grad_(false);
  }
}

// What each pass runs of the lifecycle.
struct PassSpec {
  bool forwards = true;  // warm-up, capture (and with replays: replay + compare)
  bool replays = true;   // replay + compare after the initial load and every refit
  bool refits = true;
};

PassSpec spec_of(Pass pass) {
  switch (pass) {
    case Pass::observe:
    case Pass::poison:
    case Pass::coverage: return {true, true, true};
    case Pass::validate: return {true, false, false};
    case Pass::idempotence:
    case Pass::census: return {false, false, true};
    case Pass::growth: return {false, false, false};
  }
  return {};
}

class Driver;

// Remembers every tensor a stream yields (by checkpoint name): the weights model A should hold
// afterwards. A stream that yields fresh tensors (a checkpoint file) is recorded without a copy:
// finish() checks each one after the load and takes a copy only where needed (copy-on-need): a
// fresh read from the source where the loader wrote into the streamed tensor (its version counter
// or its content moved), a clone where the loader kept a reference to it (a later PWAL could write
// into it). A stream of tensors the harness holds elsewhere (`copy`) is cloned as it streams.
class RecordingStream final : public WeightStream {
 public:
  using Reread = std::function<torch::Tensor(const std::string&)>;
  // `superseded`: records the new ones replace (a refit's names win over the initial load's, so
  // the initial record of a name a refit streamed is never read again and is dropped).
  RecordingStream(WeightStream& inner, std::map<std::string, torch::Tensor>& into, double& harness, bool copy,
                  Reread reread = {}, std::map<std::string, torch::Tensor>* superseded = nullptr)
      : m_inner(inner), m_into(into), m_harness(harness), m_copy(copy), m_reread(std::move(reread)),
        m_superseded(superseded) {}
  std::optional<NamedTensor> next() override {
    std::optional<NamedTensor> item;
    {
      // The checkpoint's tensors are the harness's memory, not the model's: the records keep them.
      UncountedScope uncounted;
      item = m_inner.next();
    }
    if (item) {
      HarnessTime t(m_harness);
      UncountedScope uncounted;  // the harness's copy, not the model's memory
      Recorded r{{item->name, m_copy ? item->tensor.clone() : item->tensor}, 0, 0, 0};
      if (!m_copy && r.item.tensor.defined()) {
        r.version = version_of(r.item.tensor);
        r.print = fingerprint(r.item.tensor);
        // Other tensors on its storage now (the source's views, if any): a loader that keeps a view
        // or rebinds a parameter onto it (set_data) adds one.
        r.storage_refs = r.item.tensor.has_storage() ? r.item.tensor.storage().use_count() : 0;
      }
      m_recorded.push_back(std::move(r));
      m_seen.insert(item->name);
    }
    return item;
  }
  [[nodiscard]] std::string source() const override { return m_inner.source(); }
  [[nodiscard]] const std::set<std::string>& seen() const { return m_seen; }

  // After load_weights() returned: settles the records (see above) and returns them in stream order.
  std::vector<NamedTensor> finish() {
    HarnessTime t(m_harness);
    UncountedScope uncounted;
    std::vector<NamedTensor> streamed;
    streamed.reserve(m_recorded.size());
    for (Recorded& r : m_recorded) {
      torch::Tensor& tensor = r.item.tensor;
      if (!m_copy && tensor.defined()) {
        const bool written = version_of(tensor) != r.version || fingerprint(tensor) != r.print;
        // Kept: a handle to the same tensor besides ours (the loader stored the item), or another
        // tensor on its storage (a view, a parameter rebound onto it).
        const bool kept = tensor.use_count() > 1 ||
                          (tensor.has_storage() && tensor.storage().use_count() > r.storage_refs);
        if (written && m_reread) {
          tensor = m_reread(r.item.name);
        } else if (written || kept) {
          tensor = tensor.clone();
        }
      }
      m_into[r.item.name] = tensor;
      if (m_superseded) m_superseded->erase(r.item.name);
      streamed.push_back(std::move(r.item));
    }
    m_recorded.clear();
    return streamed;
  }

 private:
  struct Recorded {
    NamedTensor item;
    std::int64_t version = 0;
    std::uint64_t print = 0;
    std::size_t storage_refs = 0;
  };
  static std::int64_t version_of(const torch::Tensor& t) {
    try {
      return static_cast<std::int64_t>(t._version());
    } catch (const c10::Error&) {
      return -1;  // an inference tensor has no version counter: the fingerprint decides
    }
  }
  WeightStream& m_inner;
  std::map<std::string, torch::Tensor>& m_into;
  double& m_harness;
  bool m_copy;
  Reread m_reread;
  std::map<std::string, torch::Tensor>* m_superseded;
  std::vector<Recorded> m_recorded;
  std::set<std::string> m_seen;
};

// Yields a clone of each tensor of another stream, made as it is asked for.
class CloningStream final : public WeightStream {
 public:
  explicit CloningStream(WeightStream& inner) : m_inner(inner) {}
  std::optional<NamedTensor> next() override {
    auto item = m_inner.next();
    if (item && item->tensor.defined()) item->tensor = item->tensor.clone();
    return item;
  }
  [[nodiscard]] std::string source() const override { return m_inner.source(); }

 private:
  WeightStream& m_inner;
};

// One pass of a scenario: its own model A, graphs and model B, and the probes of that pass.
class PassRun final : public RunContext {
 public:
  PassRun(Driver& driver, Pass pass, std::vector<Probe*> probes);

  void run();
  void fire_scenario_end() {
    if (m_started) fire(&Probe::on_scenario_end);
  }
  void hook(const void* module, std::string_view hook);
  [[nodiscard]] Phase phase() const { return m_phase; }
  [[nodiscard]] int cycle() const { return m_cycle; }
  [[nodiscard]] std::int64_t batch_size() const { return m_batch_size; }

  // ---- RunContext ---------------------------------------------------------------------------
  [[nodiscard]] const Scenario& scenario() const override;
  [[nodiscard]] const GraphBackend& backend() const override;
  [[nodiscard]] MemoryMeter& memory_meter() override;
  [[nodiscard]] Pass pass() const override { return m_pass; }
  [[nodiscard]] double noise_floor(std::int64_t batch_size) const override;
  [[nodiscard]] std::uint64_t seed() const override;
  [[nodiscard]] const std::vector<GraphView>& graphs() const override { return m_views; }
  [[nodiscard]] const CycleStep* cycle_step(int cycle) const override {
    if (cycle < 1 || static_cast<std::size_t>(cycle) > m_steps.size()) return nullptr;
    return &m_steps[static_cast<std::size_t>(cycle) - 1];
  }
  [[nodiscard]] std::vector<NamedTensor> live_tensors() override {
    if (!m_model) return {};
    return call_model(m_phase, "extra_tensors()", [&] { return graphcheck::live_tensors(*m_model); });
  }
  [[nodiscard]] std::vector<NamedTensor> checkpoint_tensors() override {
    return m_model ? graphcheck::checkpoint_tensors(*m_model) : std::vector<NamedTensor>{};
  }
  [[nodiscard]] std::vector<CheckpointEntry> checkpoint_layout() override {
    if (!m_model) return {};
    return call_model(m_phase, "checkpoint_mapping()", [&] { return graphcheck::checkpoint_layout(*m_model); });
  }
  [[nodiscard]] const TensorAttrs* tensor_attrs(const torch::Tensor& tensor) const override {
    return m_model ? m_model->catalog().attributes(tensor) : nullptr;
  }
  [[nodiscard]] std::map<std::string, std::string> tensor_kinds() override {
    std::map<std::string, std::string> kinds;
    if (!m_model) return kinds;
    TensorCatalog& catalog = m_model->catalog();
    const auto extras = call_model(m_phase, "extra_tensors()", [&] { return catalog.extra_tensors(); });
    for (const auto& t : extras) kinds[t.name] = std::string(to_string(t.kind));
    // Registered tensors win over an extra of the same name; parameters over buffers.
    auto registered = catalog.registered_tensors();
    for (const auto& t : registered) {
      if (t.kind != TensorKind::parameter) kinds[t.name] = std::string(to_string(t.kind));
    }
    for (const auto& t : registered) {
      if (t.kind == TensorKind::parameter) kinds[t.name] = std::string(to_string(t.kind));
    }
    return kinds;
  }
  [[nodiscard]] std::vector<ExpectedHook> expected_hooks() const override {
    if (!m_model) return {};
    return call_model(m_phase, "expected_hooks()", [&] { return m_model->expected_hooks(); });
  }
  [[nodiscard]] std::vector<std::string> module_paths() override {
    index_modules();
    std::vector<std::string> paths = {"(model)"};
    for (const auto& m : m_model->catalog().modules()) paths.push_back(m.path.empty() ? "(root)" : m.path);
    return paths;
  }
  [[nodiscard]] std::optional<AddressHit> resolve(const void* address, std::size_t bytes) override {
    return AddressIndex(live_tensors()).resolve(address, bytes);
  }
  [[nodiscard]] std::vector<NamedTensor> reference_tensors() override {
    return graphcheck::live_tensors(reference_model());
  }
  void add_finding(Finding finding) override;
  void add_measurement(Measurement m) override;

  // ---- model calls, the driver's own --------------------------------------------------------
  [[nodiscard]] TensorList make_inputs(std::int64_t batch_size, std::uint64_t seed) {
    TensorList inputs =
        call_model(m_phase, "make_inputs()", [&] { return m_model->make_inputs(batch_size, seed); });
    const c10::Device device = backend().device();  // the model's inputs live with the model
    if (!device.is_cpu()) {
      for (auto& t : inputs) t = t.to(device);
    }
    return inputs;
  }
  // Copies: a model may return a preallocated output buffer that its next forward overwrites.
  [[nodiscard]] TensorList eager(const TensorList& inputs) {
    TensorList out = call_model(m_phase, "forward()", [&] {
      torch::NoGradGuard no_grad;
      return m_model->forward_all(inputs);
    });
    for (auto& t : out) {
      if (t.defined()) t = t.clone();
    }
    return out;
  }
  void load_dummy(LifecycleModel& model, std::uint64_t seed) {
    FlagScope quiet(m_quiet);
    call_model(m_phase, "load_dummy_weights()", [&] {
      torch::NoGradGuard no_grad;
      model.load_dummy_weights(seed);
      return 0;
    });
  }
  // Writes the inputs into the static buffers of graph `index`, replays, returns copies of the
  // outputs.
  [[nodiscard]] TensorList replay(std::size_t index, const TensorList& inputs) {
    CapturedGraph& graph = *m_graphs.at(index);
    write_inputs(graph, inputs);
    call_model(m_phase, "graph replay", [&] {
      graph.replay();
      return 0;
    });
    TensorList out;
    for (const auto& t : graph.static_outputs()) out.push_back(t.clone());
    return out;
  }
  // Model B's forward (B: a fresh model loaded with the weights A should hold now).
  [[nodiscard]] TensorList reference_forward(const TensorList& inputs);
  void run_pwal(LifecycleModel& model) {
    FlagScope quiet(m_quiet);
    call_model(m_phase, "process_weights_after_loading()", [&] {
      torch::NoGradGuard no_grad;
      model.process_weights_after_loading();
      return 0;
    });
  }
  // Another instance of the scenario's model with `config` (hooks unreported).
  [[nodiscard]] std::unique_ptr<LifecycleModel> construct_model(const ModelConfig& config);

 private:
  // Where a load's tensors come from: a checkpoint file, or the weights model A holds (in memory).
  struct LoadSource {
    std::string path;
    const std::vector<NamedTensor>* tensors = nullptr;
    // A checkpoint this run wrote (checkpoint_for()), never rewritten in place: streamed as views
    // of its copy-on-write map (StreamReads::mapped), not as copies. A user's file is copied, so
    // that a rewrite of it during the run cannot fault a record.
    bool generated = false;
  };
  void lifecycle();
  void run_cycles();
  CycleStep& new_step(const RefitSpec& spec);
  void run_step(const CycleStep& step);
  void sweep(const RefitSpec& spec);
  void refit_step(const CycleStep& step);
  void sleep_step(const CycleStep& step);
  LoadSource source_for(const CycleStep& step);
  void load(bool refit, const LoadSource& source, const CycleStep::Bucket& bucket, bool first_of_refit = false);
  void eager_compare(std::int64_t batch_size);
  double measure_noise(const TensorList& inputs);
  void load_dummy();
  void check_loaded(const std::set<std::string>& streamed, const std::set<std::string>& loaded,
                    bool refit, const std::string& source);
  void pwal();
  void replay_all();
  void write_inputs(CapturedGraph& graph, const TensorList& inputs);
  LifecycleModel& reference_model();
  std::unique_ptr<LifecycleModel> build_loaded(const char* what);
  std::unique_ptr<LifecycleModel> construct_quiet(const char* what, const ModelConfig* config = nullptr);
  std::unique_ptr<LifecycleModel> construct(ModelConfig config, const char* what);
  TensorList input_for(std::int64_t batch_size, int salt);
  void index_modules();
  std::string module_path(const void* module);
  // The disturbing passes' work (passes/passes.h), each followed by its evidence event.
  void census_fill(const LoadEvent& load);
  void poison_fill(PoisonFillEvent::Kind kind, const CycleStep& step);
  void idempotence_check();
  void validate_capture(std::size_t index, const CaptureEvent& capture);
  void coverage(std::size_t index, const CompareEvent& compare);
  void growth();
  PhaseEvent event(Phase phase) const {
    PhaseEvent e;
    e.phase = phase;
    e.cycle = m_cycle;
    e.batch_size = m_batch_size;
    return e;
  }

  // Begin events in probe order, end events in reverse order. The timing of a phase window
  // (gc/timing/<phase>, observe pass) counts model calls only: the probes' work and the
  // harness's own (model B, copies of streamed weights) are left out.
  template <class Event>
  void begin(void (Probe::*fn)(RunContext&, const Event&), const Event& e) {
    m_phase = e.phase;
    if (m_progress) {
      m_progress->on_step(to_string(m_pass), to_string(e.phase), e.cycle, e.batch_size);
      if (m_pass == Pass::observe) m_progress->on_phase(to_string(e.phase), e.cycle, e.batch_size);
    }
    const std::size_t span = open_span(to_string(e.phase), e.cycle, e.batch_size);
    {
      HarnessTime t(m_harness_seconds);
      for (Probe* p : m_probes) deliver(p, fn, e);
    }
    m_windows.push_back({Clock::now(), m_harness_seconds, span});
  }
  template <class Event>
  void end(void (Probe::*fn)(RunContext&, const Event&), const Event& e) {
    const Window w = m_windows.back();
    m_windows.pop_back();
    const double seconds = std::chrono::duration<double>(Clock::now() - w.start).count() -
                           (m_harness_seconds - w.harness_at_start);
    {
      HarnessTime t(m_harness_seconds);
      for (auto it = m_probes.rbegin(); it != m_probes.rend(); ++it) deliver(*it, fn, e);
    }
    close_span(w.span);
    if (m_pass != Pass::observe) return;
    Measurement m;
    m.tag = fmt::format("gc/timing/{}", to_string(e.phase));
    m.value = std::max(0.0, seconds);
    m.unit = "s";
    m.phase = to_string(e.phase);
    m.cycle = e.cycle;
    m.batch_size = e.batch_size;
    add_measurement(std::move(m));
  }
  void fire(void (Probe::*fn)(RunContext&)) {
    for (Probe* p : m_probes) deliver(p, fn);
  }
  // A single event (hooks, the passes' evidence), in probe order.
  template <class Event>
  void notify(void (Probe::*fn)(RunContext&, const Event&), const Event& e) {
    HarnessTime t(m_harness_seconds);
    for (Probe* p : m_probes) deliver(p, fn, e);
  }
  // The one place events reach probes. A probe that throws becomes a finding of probe "harness"
  // naming it and the event, and the scenario goes on; the driver's own exceptions (model code
  // reached through RunContext, user errors) keep their meaning.
  template <class... Event>
  void deliver(Probe* p, void (Probe::*fn)(RunContext&, const Event&...), const Event&... e) {
    try {
      (p->*fn)(*this, e...);
    } catch (const ModelFailure&) {
      throw;
    } catch (const UserError&) {
      throw;
    } catch (const std::exception& ex) {
      probe_threw(*p, fn, what_of(ex));
    } catch (...) {
      probe_threw(*p, fn, "an exception not derived from std::exception");
    }
  }
  template <class Fn>
  void probe_threw(const Probe& p, Fn fn, const std::string& what) {
    const std::string probe = p.name();
    Finding f;
    f.probe = "harness";
    f.phase = to_string(m_phase);
    f.cycle = m_cycle;
    f.batch_size = m_batch_size;
    f.subject = fmt::format("probe '{}'", probe);
    f.message = fmt::format(
        "probe '{}' threw in {} ({} pass, phase {}, cycle {}): {}; that check of this event is "
        "lost and the scenario went on: fix the probe",
        probe, event_name(fn), to_string(m_pass), to_string(m_phase), m_cycle, what);
    f.evidence = {{"probe", probe}, {"event", event_name(fn)}, {"error", what}};
    add_finding(std::move(f));
  }

  struct Window {
    Clock::time_point start;
    double harness_at_start = 0;
    std::size_t span = 0;  // its entry in the record's spans
  };
  std::size_t open_span(std::string phase, int cycle, std::int64_t batch_size);
  void close_span(std::size_t index);

  Driver& m_driver;
  Pass m_pass;
  PassSpec m_spec;
  std::vector<Probe*> m_probes;
  ProgressListener* m_progress = nullptr;
  bool m_started = false;

  std::unique_ptr<LifecycleModel> m_model;
  std::vector<std::unique_ptr<CapturedGraph>> m_graphs;
  std::vector<GraphView> m_views;
  // What model A should hold: the initial checkpoint (empty for a dummy load, which B repeats)
  // and every tensor streamed by the refits so far, by checkpoint name.
  std::map<std::string, torch::Tensor> m_initial_weights;
  std::map<std::string, torch::Tensor> m_refit_weights;
  std::unique_ptr<LifecycleModel> m_reference;
  int m_reference_cycle = -1;
  bool m_quiet = false;
  std::map<const void*, std::string> m_module_paths;

  std::deque<CycleStep> m_steps;   // the cycles as run so far (stable addresses)
  std::vector<NamedTensor> m_held;  // a reload's weights: what model A holds, by checkpoint name
  Phase m_phase = Phase::construct;
  int m_cycle = 0;
  std::int64_t m_batch_size = 0;
  std::vector<Window> m_windows;
  double m_harness_seconds = 0;
};

class Driver final : public HookSink {
 public:
  Driver(const Scenario& scenario, const RunOptions& options, ProgressListener* progress)
      : m_scenario(scenario), m_options(options), m_progress(progress) {
    m_record.name = scenario.name;
    m_record.file = scenario.file;
    m_record.description = scenario.description;
    m_record.fixture = scenario.fixture;
    m_record.expected_catches = scenario.mutations;
    m_record.warnings = scenario.warnings;
    m_record.mutations.assign(options.mutations.begin(), options.mutations.end());
    m_seed = options.seed.value_or(scenario.seed);
  }

  ScenarioRecord run() {
    const auto start = m_start;
    {
      mutation::Scope mutations(m_options.mutations);
      HookSinkScope hooks(*this);
      bool go_on = true;
      try {
        setup();
      } catch (const UserError& e) {
        m_record.status = Status::error;
        m_record.reason = e.what();
        go_on = false;
      }
      for (Pass pass : m_passes) {
        if (!go_on) break;
        go_on = run_pass(pass);
      }
    }
    if (m_record.status == Status::passed && !m_record.findings.empty()) {
      m_record.status = Status::failed;
    }
    if (m_record.status == Status::passed || m_record.status == Status::failed) {
      for (const auto& mutation : m_options.mutations) {
        m_record.verdicts.push_back(judge_mutation(m_record, mutation));
      }
    }
    m_record.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return std::move(m_record);
  }

  // ---- shared by the passes -----------------------------------------------------------------
  [[nodiscard]] const Scenario& scenario() const { return m_scenario; }
  [[nodiscard]] GraphBackend& backend() { return *m_backend; }
  [[nodiscard]] std::uint64_t seed() const { return m_seed; }
  [[nodiscard]] ProgressListener* progress() { return m_progress; }
  [[nodiscard]] std::map<std::int64_t, double>& noise() { return m_noise; }

  void add_finding(Finding finding, Pass pass, Phase phase) {
    if (finding.phase.empty()) finding.phase = to_string(phase);
    if (finding.pass.empty()) finding.pass = to_string(pass);
    // The driver's own findings (model failures, names a load did not report) are about the
    // lifecycle, which every pass repeats: the first pass that meets one reports it.
    if (finding.probe == "driver") {
      const bool seen = std::any_of(m_record.findings.begin(), m_record.findings.end(), [&](const Finding& g) {
        return g.probe == "driver" && g.message == finding.message && g.cycle == finding.cycle;
      });
      if (seen) return;
    }
    m_record.findings.push_back(std::move(finding));
  }
  void add_measurement(Measurement m, Pass pass, Phase phase) {
    if (m.phase.empty()) m.phase = to_string(phase);
    if (m.pass.empty()) m.pass = to_string(pass);
    m_record.measurements.push_back(std::move(m));
  }

  // Synthesized by a freshly constructed model, so that the checkpoint layout does not depend on
  // what PWAL did to model A (repacked or freed raw weights). Written once per seed per scenario
  // run and shared by the passes.
  std::string checkpoint_for(std::uint64_t seed, PassRun& pass,
                             const std::function<std::unique_ptr<LifecycleModel>()>& construct) {
    auto cached = m_checkpoints.find(seed);
    if (cached != m_checkpoints.end()) return cached->second;
    const SpanScope span(*this, open_span(to_string(pass.pass()), "checkpoint synthesis", pass.cycle(), 0));
    std::vector<NamedTensor> tensors;
    {
      std::unique_ptr<LifecycleModel> fresh = construct();
      tensors = call_model(pass.phase(), "synthesize_checkpoint()",
                           [&] { return fresh->synthesize_checkpoint(seed); });
    }
    for (auto& t : tensors) {
      if (t.tensor.defined()) t.tensor = t.tensor.cpu();  // a model on the GPU synthesizes there
    }
    std::error_code ec;
    fs::create_directories(m_work_dir, ec);
    if (ec) {
      throw UserError(fmt::format("cannot create '{}' for generated checkpoints: {}: choose a "
                                  "writable --report-dir",
                                  m_work_dir.string(), ec.message()));
    }
    std::string path = (m_work_dir / fmt::format("seed-{}.safetensors", seed)).string();
    try {
      // Scratch: regenerated by every run, so not worth an fsync.
      save_checkpoint(path, tensors,
                      {{"graphcheck.fixture", m_scenario.fixture},
                       {"graphcheck.seed", std::to_string(seed)}},
                      safetensors::Durability::scratch);
    } catch (const safetensors::Error& e) {
      // A dtype the format cannot hold comes from the model's synthesize_checkpoint().
      throw ModelFailure(pass.phase(), fmt::format("synthesize_checkpoint(): {}", e.what()));
    } catch (const std::exception& e) {
      throw UserError(fmt::format("cannot write checkpoint '{}': {}", path, e.what()));
    }
    m_checkpoints[seed] = path;
    return path;
  }

  // ---- HookSink -----------------------------------------------------------------------------
  void on_hook(const void* module, std::string_view hook) override {
    if (m_current) m_current->hook(module, hook);
  }

  // The record's timeline (DESIGN §6: the Chrome trace and the HTML timing bars).
  std::size_t open_span(std::string pass, std::string phase, int cycle, std::int64_t batch_size) {
    Span span;
    span.pass = std::move(pass);
    span.phase = std::move(phase);
    span.cycle = cycle;
    span.batch_size = batch_size;
    span.start = std::chrono::duration<double>(Clock::now() - m_start).count();
    m_record.spans.push_back(std::move(span));
    return m_record.spans.size() - 1;
  }
  void close_span(std::size_t index) {
    Span& span = m_record.spans.at(index);
    span.seconds = std::chrono::duration<double>(Clock::now() - m_start).count() - span.start;
  }
  // Closes a span on every way out.
  class SpanScope {
   public:
    SpanScope(Driver& driver, std::size_t index) : m_driver(driver), m_index(index) {}
    SpanScope(const SpanScope&) = delete;
    SpanScope& operator=(const SpanScope&) = delete;
    ~SpanScope() { m_driver.close_span(m_index); }

   private:
    Driver& m_driver;
    std::size_t m_index;
  };

 private:
  void setup() {
    m_work_dir = fs::path(m_options.work_dir) / m_scenario.name;
    try {
      BackendChoice choice = make_backend(m_options.backend);
      m_backend = std::move(choice.backend);
      m_record.backend = m_backend->name();
      m_record.backend_reason = choice.reason;
    } catch (const std::invalid_argument& e) {
      throw UserError(e.what());
    }
    // Which passes the checks need, in a fixed order; the observe pass always runs.
    std::set<Pass> needed = {Pass::observe};
    for (const auto& name : m_scenario.checks) {
      const ProbeRegistry::Entry* entry = ProbeRegistry::get().find(name);
      if (!entry) throw UserError(fmt::format("{}: unknown probe '{}'", m_scenario.file, name));
      m_record.probes.push_back(name);
      for (Pass p : entry->passes) {
        if (p == Pass::growth && !(m_scenario.dummy_growth && m_scenario.load == LoadFormat::dummy)) continue;
        needed.insert(p);
      }
    }
    for (Pass p : {Pass::validate, Pass::observe, Pass::idempotence, Pass::census, Pass::poison,
                   Pass::coverage, Pass::growth}) {
      if (needed.count(p)) m_passes.push_back(p);
    }
  }

  // Runs one pass with fresh instances of the probes registered for it. Returns whether the
  // scenario goes on with the next pass.
  bool run_pass(Pass pass) {
    std::vector<std::unique_ptr<Probe>> owned;
    std::vector<Probe*> probes;
    for (const auto& name : m_scenario.checks) {
      const ProbeRegistry::Entry* entry = ProbeRegistry::get().find(name);
      if (std::find(entry->passes.begin(), entry->passes.end(), pass) == entry->passes.end()) continue;
      owned.push_back(entry->factory());
      probes.push_back(owned.back().get());
    }
    if (pass == Pass::observe) {
      for (Probe* p : m_options.extra_probes) probes.push_back(p);
    }
    m_record.passes.push_back(to_string(pass));
    const auto start = Clock::now();
    const std::size_t span = open_span(to_string(pass), "", 0, 0);
    PassRun run(*this, pass, std::move(probes));
    m_current = &run;
    bool go_on = true;
    try {
      run.run();
      if (pass == Pass::observe && !m_scenario.expect_error.empty()) expected_error_missing(run);
    } catch (const ModelFailure& e) {
      if (!stopped_as_expected(pass, run, e.what())) {
        Finding f;
        f.probe = "driver";
        f.phase = to_string(e.phase());
        f.cycle = run.cycle();
        f.batch_size = run.batch_size();
        f.subject = "model code";
        f.message = e.what();
        if (!m_scenario.expect_error.empty()) {
          f.message += fmt::format(" (the scenario expects an error containing '{}' instead, {})",
                                   m_scenario.expect_error, m_scenario.expect_error_where);
        }
        add_finding(std::move(f), pass, e.phase());
      }
    } catch (const UserError& e) {
      if (!stopped_as_expected(pass, run, e.what())) {
        m_record.status = Status::error;
        m_record.reason = e.what();
        if (!m_scenario.expect_error.empty()) {
          m_record.reason += fmt::format(" (the scenario expects an error containing '{}' "
                                         "instead, {})",
                                         m_scenario.expect_error, m_scenario.expect_error_where);
        }
        go_on = false;
      }
    } catch (const std::exception& e) {
      m_record.status = Status::crashed;
      m_record.reason = fmt::format("harness failure in the {} pass, phase {}: {}", to_string(pass),
                                    to_string(run.phase()), what_of(e));
      go_on = false;
    }
    try {
      run.fire_scenario_end();
    } catch (const std::exception& e) {
      m_record.status = Status::crashed;
      m_record.reason = fmt::format("probe failed at the end of the {} pass: {}", to_string(pass), what_of(e));
      go_on = false;
    }
    m_current = nullptr;
    close_span(span);
    for (BackendMeasurement& b : m_backend->take_measurements()) {
      Measurement bm;
      bm.tag = std::move(b.tag);
      bm.value = b.value;
      bm.unit = std::move(b.unit);
      bm.phase = std::move(b.phase);
      bm.batch_size = b.batch_size;
      bm.pass = to_string(pass);
      m_record.measurements.push_back(std::move(bm));
    }
    Measurement m;
    m.tag = fmt::format("gc/pass/{}/seconds", to_string(pass));
    m.value = std::chrono::duration<double>(Clock::now() - start).count();
    m.unit = "s";
    m.phase = "scenario";
    m_record.measurements.push_back(std::move(m));
    return go_on;
  }

  // expect_error: the run stopped with the expected error; the scenario passes (other findings
  // made before it still count). Passes other than observe stop there quietly.
  bool stopped_as_expected(Pass pass, const PassRun& run, const std::string& message) {
    if (m_scenario.expect_error.empty() || message.find(m_scenario.expect_error) == std::string::npos) {
      return false;
    }
    if (pass == Pass::observe) {
      m_record.reason = fmt::format("stopped as expected in phase {} (cycle {}): {}",
                                    to_string(run.phase()), run.cycle(), message);
    }
    return true;
  }

  void expected_error_missing(const PassRun& run) {
    Finding f;
    f.probe = "driver";
    f.phase = "end";
    f.cycle = run.cycle();
    f.subject = "expected error";
    f.message = fmt::format(
        "the scenario expects the run to stop with an error containing '{}' ({}), but it "
        "completed: the model accepted what it must refuse loudly",
        m_scenario.expect_error, m_scenario.expect_error_where);
    f.evidence = {{"expect_error", m_scenario.expect_error}};
    add_finding(std::move(f), Pass::observe, Phase::refit);
  }

  const Scenario& m_scenario;
  RunOptions m_options;
  ProgressListener* m_progress;
  ScenarioRecord m_record;
  const Clock::time_point m_start = Clock::now();  // the scenario's, for its spans
  std::uint64_t m_seed = 1;
  fs::path m_work_dir;
  std::unique_ptr<GraphBackend> m_backend;
  std::vector<Pass> m_passes;
  std::map<std::uint64_t, std::string> m_checkpoints;
  std::map<std::int64_t, double> m_noise;
  PassRun* m_current = nullptr;
};

// ---- PassRun --------------------------------------------------------------------------------

PassRun::PassRun(Driver& driver, Pass pass, std::vector<Probe*> probes)
    : m_driver(driver), m_pass(pass), m_spec(spec_of(pass)), m_probes(std::move(probes)),
      m_progress(driver.progress()) {}

const Scenario& PassRun::scenario() const { return m_driver.scenario(); }
const GraphBackend& PassRun::backend() const { return m_driver.backend(); }
MemoryMeter& PassRun::memory_meter() { return m_driver.backend().memory_meter(); }
std::uint64_t PassRun::seed() const { return m_driver.seed(); }

double PassRun::noise_floor(std::int64_t batch_size) const {
  auto it = m_driver.noise().find(batch_size);
  return it == m_driver.noise().end() ? -1.0 : it->second;
}
std::size_t PassRun::open_span(std::string phase, int cycle, std::int64_t batch_size) {
  return m_driver.open_span(to_string(m_pass), std::move(phase), cycle, batch_size);
}
void PassRun::close_span(std::size_t index) { m_driver.close_span(index); }
void PassRun::add_finding(Finding finding) { m_driver.add_finding(std::move(finding), m_pass, m_phase); }
void PassRun::add_measurement(Measurement m) { m_driver.add_measurement(std::move(m), m_pass, m_phase); }

void PassRun::hook(const void* module, std::string_view hook) {
  if (m_quiet || !m_model) return;
  HookEvent event;
  event.module_path = module_path(module);
  event.hook = std::string(hook);
  event.phase = m_phase;
  event.cycle = m_cycle;
  for (Probe* p : m_probes) deliver(p, &Probe::on_hook, event);
}

void PassRun::run() {
  m_started = true;  // on_scenario_end runs even when a probe's begin throws
  fire(&Probe::on_scenario_begin);
  if (m_pass == Pass::growth) {  // no lifecycle: the growth reruns only
    if (scenario().dummy_growth) growth();
    return;
  }
  lifecycle();
}

void PassRun::lifecycle() {
  const Scenario& s = scenario();
  // construct
  m_phase = Phase::construct;
  begin(&Probe::on_construct_begin, event(Phase::construct));
  m_model = construct(s.config, "model constructor");
  index_modules();
  end(&Probe::on_construct_end, event(Phase::construct));

  // initial load + PWAL (the loader calls it for every load format)
  if (s.load == LoadFormat::dummy) {
    load_dummy();
    if (mutation::enabled("driver.skip_pwal_on_dummy")) {
      // Mutation: the loader skips PWAL after a dummy load.
    } else {
      pwal();
    }
  } else {
    const LoadSource source =
        s.checkpoint.empty()
            ? LoadSource{m_driver.checkpoint_for(m_driver.seed(), *this,
                                                 [&] { return construct_quiet("checkpoint synthesis"); }),
                         nullptr, /*generated=*/true}
            : LoadSource{s.checkpoint};
    load(/*refit=*/false, source, CycleStep::Bucket{});
    pwal();
  }

  if (m_spec.forwards) {
    // warm-up and capture, one per batch size
    for (std::int64_t b : s.batch_sizes) {
      m_batch_size = b;
      PhaseEvent e = event(Phase::warmup);
      TensorList inputs = input_for(b, 0);  // before the window: only forward's own memory counts
      begin(&Probe::on_warmup_begin, e);
      (void)eager(inputs);
      end(&Probe::on_warmup_end, e);
      if (m_pass == Pass::validate) {
        const double noise = measure_noise(inputs);
        m_driver.noise()[b] = noise;
        measure(e, "gc/replay_diff/noise_floor", noise, "abs");
      }
    }
    if (m_pass == Pass::validate) {
      // The noise floor of the eager-only (prefill) batch sizes, compared with B after each load.
      for (std::int64_t b : s.eager_batch_sizes) {
        m_batch_size = b;
        m_driver.noise()[b] = measure_noise(input_for(b, 0));
      }
    }
    m_views.reserve(s.batch_sizes.size());  // CaptureEvent::graph points into it
    for (std::int64_t b : s.batch_sizes) {
      m_batch_size = b;
      CaptureEvent e;
      static_cast<PhaseEvent&>(e) = event(Phase::capture);
      TensorList inputs = input_for(b, 0);
      begin(&Probe::on_capture_begin, e);
      m_graphs.push_back(call_model(Phase::capture, "forward() under capture",
                                    [&] { return m_driver.backend().capture(*m_model, inputs, b); }));
      {
        HarnessTime t(m_harness_seconds);
        GraphView view;
        view.graph = m_graphs.back().get();
        view.batch_size = b;
        view.reads = resolve_reads(m_graphs.back()->reads(), AddressIndex(live_tensors()));
        m_views.push_back(std::move(view));
      }
      e.graph = &m_views.back();
      end(&Probe::on_capture_end, e);
      if (m_pass == Pass::validate) validate_capture(m_graphs.size() - 1, e);
    }
    m_batch_size = 0;
    if (m_spec.replays) replay_all();
  }
  if (!m_spec.refits) return;

  run_cycles();
}

// ---- cycles ---------------------------------------------------------------------------------

CycleStep& PassRun::new_step(const RefitSpec& spec) {
  CycleStep& step = m_steps.emplace_back();
  step.cycle = static_cast<int>(m_steps.size());
  step.kind = spec.kind;
  step.sleep_level = spec.sleep_level;
  step.where = spec.where;
  // A `--seed` shifts every seed of the scenario alike.
  step.seed = spec.seed + (m_driver.seed() - scenario().seed);
  step.pwal_per_bucket = spec.pwal_per_bucket;
  m_cycle = step.cycle;
  return step;
}

void PassRun::run_cycles() {
  for (const RefitSpec& spec : scenario().cycles) {
    if (spec.kind == CycleKind::refit && spec.sweep) {
      sweep(spec);
      continue;
    }
    CycleStep& step = new_step(spec);
    switch (spec.kind) {
      case CycleKind::refit:
        step.prefixes = spec.prefixes();
        for (const RefitBucket& b : spec.buckets) step.buckets.push_back({b.name, b.only, {}});
        step.label = fmt::format("refit cycle {}", step.cycle);
        if (spec.pwal_per_bucket) step.label += " (chunked: stage, load and PWAL per bucket)";
        break;
      case CycleKind::reload:
        step.held_weights = true;
        step.label = fmt::format("cycle {} (a reload of the weights the model holds)", step.cycle);
        break;
      case CycleKind::sleep:
        step.loads = spec.sleep_level == 2;
        step.held_weights = step.loads && !spec.has_seed;
        step.label = fmt::format("cycle {} (sleep level {}, wake{})", step.cycle, spec.sleep_level,
                                 spec.sleep_level == 1  ? std::string()
                                 : step.held_weights ? std::string(", reload of the held weights")
                                                     : fmt::format(", reload of new weights, seed {}", step.seed));
        break;
    }
    run_step(step);
  }
}

void PassRun::run_step(const CycleStep& step) {
  m_cycle = step.cycle;
  // The last cycle's model B is stale from here on (reference_model() builds this cycle's): freed
  // before this cycle synthesizes its checkpoint, so that the two never share the peak.
  m_reference.reset();
  if (step.kind == CycleKind::sleep) {
    sleep_step(step);
  } else {
    refit_step(step);
  }
  if (m_spec.replays) replay_all();
}

// `buckets: sweep`: one refit per split position of the stream (the checkpoint's tensor order),
// two buckets each, each step with weights of its own (seed + step) so that a tensor left stale
// by one split differs from what it should hold.
void PassRun::sweep(const RefitSpec& spec) {
  m_reference.reset();  // stale, and not to share the peak with the synthesis below (run_step)
  const std::uint64_t first_seed = spec.seed + (m_driver.seed() - scenario().seed);
  const std::string path =
      m_driver.checkpoint_for(first_seed, *this, [&] { return construct_quiet("checkpoint synthesis"); });
  std::vector<std::string> names;
  try {
    const safetensors::File file = safetensors::File::open(path);
    for (const auto& info : file.tensors()) names.push_back(info.name);
  } catch (const safetensors::Error& e) {
    throw UserError(e.what());
  }
  const auto n = static_cast<std::int64_t>(names.size());
  if (n < 2) {
    throw UserError(fmt::format("{}: a bucket sweep splits the refit stream in two, but the "
                                "checkpoint holds {} tensor: drop 'buckets: sweep'",
                                spec.where, n));
  }
  // Split positions k (the first bucket streams tensors [0, k)): all of 1 .. n-1, or max_splits
  // of them evenly spaced, the first and the last included.
  std::vector<std::int64_t> positions;
  const std::int64_t count = std::min(n - 1, spec.max_splits);
  for (std::int64_t j = 0; j < count; ++j) {
    const std::int64_t k = count == 1 ? 1 : 1 + j * (n - 2) / (count - 1);
    if (positions.empty() || positions.back() != k) positions.push_back(k);
  }
  for (std::size_t j = 0; j < positions.size(); ++j) {
    const std::int64_t k = positions[j];
    CycleStep& step = new_step(spec);
    step.seed = first_seed + j;
    CycleStep::Bucket head{fmt::format("tensors 1-{}", k), {}, {}};
    CycleStep::Bucket tail{fmt::format("tensors {}-{}", k + 1, n), {}, {}};
    for (std::int64_t i = 0; i < n; ++i) (i < k ? head : tail).names.insert(names[static_cast<std::size_t>(i)]);
    step.buckets = {std::move(head), std::move(tail)};
    step.label = fmt::format("refit cycle {} (bucket sweep, split {} of {}: after '{}', tensor {} of {}, seed {})",
                             step.cycle, j + 1, positions.size(), names[static_cast<std::size_t>(k - 1)], k, n,
                             step.seed);
    run_step(step);
  }
}

PassRun::LoadSource PassRun::source_for(const CycleStep& step) {
  if (!step.held_weights) {
    return LoadSource{m_driver.checkpoint_for(step.seed, *this, [&] { return construct_quiet("checkpoint synthesis"); }),
                      nullptr, /*generated=*/true};
  }
  // What A holds: every refit so far over the initial checkpoint, in the checkpoint layout.
  HarnessTime t(m_harness_seconds);
  UncountedScope uncounted;  // the harness's copies, not the model's memory
  m_held.clear();
  for (const CheckpointEntry& entry : checkpoint_layout()) {
    torch::Tensor held;
    if (auto it = m_refit_weights.find(entry.checkpoint); it != m_refit_weights.end()) {
      held = it->second;
    } else if (auto initial = m_initial_weights.find(entry.checkpoint); initial != m_initial_weights.end()) {
      held = initial->second;
    }
    if (!held.defined()) {
      throw UserError(fmt::format(
          "{}: {} streams the weights the model holds, but '{}' was never streamed (the initial "
          "load was dummy and no earlier refit sent it): put a full refit before it",
          step.where, step.label, entry.checkpoint));
    }
    // A copy: a loader that keeps the streamed tensor must not share storage with the records
    // model B is built from.
    m_held.push_back({entry.checkpoint, held.clone()});
  }
  return LoadSource{"", &m_held};
}

void PassRun::refit_step(const CycleStep& step) {
  m_phase = Phase::refit;
  // Synthesized before the window opens: the harness's work, not the model's.
  const LoadSource source = source_for(step);
  PhaseEvent e = event(Phase::refit);
  begin(&Probe::on_refit_begin, e);
  if (m_pass == Pass::poison && scenario().poison.before_refit) poison_fill(PoisonFillEvent::Kind::before_refit, step);
  const auto stage = [&] {
    call_model(Phase::refit, "stage_for_refit()", [&] {
      torch::NoGradGuard no_grad;
      m_model->stage_for_refit();
      return 0;
    });
  };
  const auto finish = [&] {
    if (mutation::enabled("driver.skip_pwal_on_refit")) {
      // Mutation: the loader skips PWAL after a refit.
    } else {
      pwal();
    }
  };
  const std::vector<CycleStep::Bucket> whole = {CycleStep::Bucket{"", step.prefixes, {}}};
  const std::vector<CycleStep::Bucket>& buckets = step.buckets.empty() ? whole : step.buckets;
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    // The loader stages once per refit, before the first bucket (DESIGN §1.4); a chunked reload
    // calls the whole loader per bucket.
    if (i == 0 || step.pwal_per_bucket) stage();
    load(/*refit=*/true, source, buckets[i], /*first_of_refit=*/i == 0);
    if (step.pwal_per_bucket) finish();
  }
  if (!step.pwal_per_bucket) finish();
  m_held.clear();
  m_phase = Phase::refit;
  end(&Probe::on_refit_end, e);
  if (m_pass == Pass::poison) poison_fill(PoisonFillEvent::Kind::orphans, step);
}

namespace {

// A storage's bytes as a uint8 tensor on its device.
torch::Tensor storage_bytes(const c10::Storage& storage) {
  torch::Tensor bytes = torch::empty({0}, torch::TensorOptions().dtype(torch::kUInt8).device(storage.device()));
  bytes.set_(storage, 0, {static_cast<std::int64_t>(storage.nbytes())}, {1});
  return bytes;
}

}  // namespace

// Sleep mode as vLLM's allocator does it: what the level keeps is copied to host memory, every
// storage of the model and of the graphs' reads is discarded (poison where it reads as NaN or as
// a byte payload, zeros elsewhere: indices must stay in range), and the wake copies the kept
// bytes back into the same storages. Level 2 keeps the registered buffers only (the engine's
// save, vLLM #16564); the weights come back by the reload that follows.
void PassRun::sleep_step(const CycleStep& step) {
  SleepEvent se;
  static_cast<PhaseEvent&>(se) = event(Phase::sleep);
  se.level = step.sleep_level;
  m_phase = Phase::sleep;
  begin(&Probe::on_sleep_begin, se);
  // Level 1 keeps whole storages (the allocator offloads allocations); level 2 keeps each
  // registered buffer's own elements (the engine clones named buffers), so a tensor that shares
  // a storage with a buffer is not restored with it.
  std::vector<std::pair<c10::Storage, torch::Tensor>> kept_storages;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> kept_buffers;
  {
    HarnessTime t(m_harness_seconds);
    UncountedScope uncounted;  // the host copies are the engine's, not the model's memory
    if (step.sleep_level == 1) {
      std::set<const c10::StorageImpl*> seen;
      for (const auto& t : live_tensors()) {
        if (!t.tensor.defined() || !t.tensor.has_storage()) continue;
        const c10::Storage& storage = t.tensor.storage();
        if (storage.nbytes() == 0 || !seen.insert(storage.unsafeGetStorageImpl()).second) continue;
        kept_storages.emplace_back(storage, storage_bytes(storage).to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true));
      }
    } else if (!mutation::enabled("driver.sleep_drops_buffers")) {
      for (const auto& item : m_model->catalog().registered_tensors()) {
        if (item.kind == TensorKind::parameter) continue;
        const torch::Tensor& b = item.tensor;
        if (b.defined() && b.numel() > 0) kept_buffers.emplace_back(b, b.to(torch::kCPU, false, /*copy=*/true));
      }
    }
    // Discard: every storage of the model and of the graphs' reads. A storage that any tensor or
    // read views as integers or bools gets zeros (indices must stay in range), the others the
    // poison of their dtype (NaN for floats, the sentinel byte for byte payloads).
    std::map<const c10::StorageImpl*, std::pair<c10::Storage, c10::ScalarType>> storages;
    std::set<const c10::StorageImpl*> integral;
    const auto note = [&](const c10::Storage& storage, c10::ScalarType dtype) {
      if (storage.nbytes() == 0) return;
      storages.emplace(storage.unsafeGetStorageImpl(), std::make_pair(storage, dtype));
      if (!c10::isFloatingType(dtype) && dtype != torch::kUInt8) integral.insert(storage.unsafeGetStorageImpl());
    };
    for (const auto& t : live_tensors()) {
      if (t.tensor.defined() && t.tensor.has_storage()) note(t.tensor.storage(), t.tensor.scalar_type());
    }
    for (const GraphView& graph : m_views) {
      for (const ResolvedRead& r : graph.reads) {
        if (r.read.held) note(r.read.held, r.read.dtype);
      }
    }
    for (const auto& [impl, item] : storages) {
      fill_storage(item.first, integral.count(impl) ? std::uint8_t{0} : poison_byte(item.second));
    }
    m_driver.backend().synchronize();
  }
  end(&Probe::on_sleep_end, se);

  SleepEvent we = se;
  we.phase = Phase::wake;
  m_phase = Phase::wake;
  begin(&Probe::on_wake_begin, we);
  {
    HarnessTime t(m_harness_seconds);
    UncountedScope uncounted;
    for (const auto& [storage, bytes] : kept_storages) storage_bytes(storage).copy_(bytes);
    for (const auto& [buffer, saved] : kept_buffers) buffer.copy_(saved);
    m_driver.backend().synchronize();
  }
  end(&Probe::on_wake_end, we);
  if (step.loads) refit_step(step);
}

void PassRun::load(bool refit, const LoadSource& source, const CycleStep::Bucket& bucket, bool first_of_refit) {
  m_phase = Phase::load;
  const auto wanted = [&](const std::string& name) {
    if (!bucket.names.empty()) return bucket.names.count(name) > 0;
    return bucket.only.empty() || matches_any_prefix(name, bucket.only);
  };
  LoadEvent e;
  static_cast<PhaseEvent&>(e) = event(Phase::load);
  e.format = refit ? LoadFormat::checkpoint : scenario().load;
  e.refit = refit;
  e.bucket = bucket.name;
  std::unique_ptr<WeightStream> stream_source;
  if (source.tensors) {
    std::vector<NamedTensor> list;
    for (const auto& t : *source.tensors) {
      if (wanted(t.name)) list.push_back(t);
    }
    for (const auto& t : list) e.expected.push_back(t.name);
    e.source = fmt::format("the weights the model holds (cycle {})", m_cycle);
    stream_source = std::make_unique<TensorListWeightStream>(std::move(list), e.source);
  } else {
    std::unique_ptr<SafetensorsWeightStream> file;
    try {
      file = std::make_unique<SafetensorsWeightStream>(source.path, bucket.only, bucket.names,
                                                       source.generated ? StreamReads::mapped : StreamReads::copies);
    } catch (const safetensors::Error& e) {
      throw UserError(e.what());
    }
    e.source = file->source();
    for (const auto& info : file->file().tensors()) {
      if (wanted(info.name)) e.expected.push_back(info.name);
    }
    stream_source = std::move(file);
  }
  if (!bucket.only.empty() && e.expected.empty()) {
    const CycleStep* step = cycle_step(m_cycle);
    throw UserError(fmt::format("{}: {}{} streams only {} but no tensor of {} has "
                                "such a prefix: fix the prefixes",
                                step ? step->where : scenario().file,
                                step ? step->label : fmt::format("refit cycle {}", m_cycle),
                                bucket.name.empty() ? "" : fmt::format(" (bucket '{}')", bucket.name),
                                fmt::join(bucket.only, ", "), e.source));
  }
  begin(&Probe::on_load_begin, e);
  if (m_pass == Pass::census) census_fill(e);
  if (m_pass == Pass::poison && refit && first_of_refit && !scenario().poison.staged.empty()) {
    // A chunked reload stages per bucket and runs PWAL between them: the staged check is made
    // for refits staged once (the model's staging of later chunks is not known here).
    const CycleStep* step = cycle_step(m_cycle);
    if (step && !step->pwal_per_bucket) poison_fill(PoisonFillEvent::Kind::staged, *step);
  }
  RecordingStream::Reread reread;
  if (!source.tensors) {
    reread = [path = source.path](const std::string& name) {
      const safetensors::File file = safetensors::File::open(path);
      for (const auto& info : file.tensors()) {
        if (info.name == name) return read_tensor(file, info);
      }
      throw std::logic_error(fmt::format("'{}' vanished from '{}'", name, path));
    };
  }
  RecordingStream stream(*stream_source, refit ? m_refit_weights : m_initial_weights, m_harness_seconds,
                         /*copy=*/source.tensors != nullptr, std::move(reread),
                         refit ? &m_initial_weights : nullptr);
  try {
    e.loaded = call_model(Phase::load, "load_weights()", [&] { return m_model->load_weights(stream); });
  } catch (...) {
    (void)stream.finish();  // what was streamed before the failure stays on record
    throw;
  }
  e.streamed = stream.finish();
  check_loaded(stream.seen(), e.loaded, refit, e.source);
  end(&Probe::on_load_end, e);
}

void PassRun::load_dummy() {
  m_phase = Phase::load;
  LoadEvent e;
  static_cast<PhaseEvent&>(e) = event(Phase::load);
  e.format = LoadFormat::dummy;
  e.source = fmt::format("dummy weights (seed {})", m_driver.seed());
  begin(&Probe::on_load_begin, e);
  if (m_pass == Pass::census) census_fill(e);
  call_model(Phase::load, "load_dummy_weights()", [&] {
    torch::NoGradGuard no_grad;
    m_model->load_dummy_weights(m_driver.seed());
    return 0;
  });
  for (const auto& t : graphcheck::checkpoint_tensors(*m_model)) e.loaded.insert(t.name);
  end(&Probe::on_load_end, e);
}

// Every checkpoint tensor must be streamed on the initial load, and every streamed tensor must be
// reported loaded, by its checkpoint name or by the live name it is stored in.
void PassRun::check_loaded(const std::set<std::string>& streamed, const std::set<std::string>& loaded,
                           bool refit, const std::string& source) {
  const std::vector<CheckpointEntry> layout = checkpoint_layout();
  if (!refit) {
    std::vector<std::string> missing;
    for (const auto& entry : layout) {
      if (!streamed.count(entry.checkpoint)) {
        missing.push_back(fmt::format("{} of shape {}", entry.describe(), shape_string(entry.region.sizes())));
      }
    }
    if (!missing.empty()) {
      const bool mapped = std::any_of(layout.begin(), layout.end(), [](const auto& e) { return e.sharded; });
      throw UserError(fmt::format(
          "{} lacks {} tensor{} of the model's checkpoint layout: {}{}; regenerate the checkpoint "
          "for this model config{}",
          source, missing.size(), missing.size() == 1 ? "" : "s",
          fmt::join(missing.begin(), missing.begin() + std::min<std::size_t>(missing.size(), 4), "; "),
          missing.size() > 4 ? fmt::format(" and {} more", missing.size() - 4) : "",
          mapped ? "" : ", or declare checkpoint_mapping() if the model fuses checkpoint tensors"));
    }
  }
  std::map<std::string, std::string> live_of;
  for (const auto& entry : layout) live_of[entry.checkpoint] = entry.live;
  for (const auto& name : streamed) {
    if (loaded.count(name)) continue;
    auto live = live_of.find(name);
    if (live != live_of.end() && loaded.count(live->second)) continue;
    Finding f;
    f.probe = "driver";
    f.cycle = m_cycle;
    f.subject = name;
    f.message = fmt::format(
        "load_weights() consumed '{}' from {} but did not report it loaded: return every "
        "loaded name (live or checkpoint), or the weight is silently dropped",
        name, source);
    add_finding(std::move(f));
  }
}

void PassRun::pwal() {
  m_phase = Phase::pwal;
  PhaseEvent e = event(Phase::pwal);
  begin(&Probe::on_pwal_begin, e);
  call_model(Phase::pwal, "process_weights_after_loading()", [&] {
    torch::NoGradGuard no_grad;
    m_model->process_weights_after_loading();
    return 0;
  });
  end(&Probe::on_pwal_end, e);
  if (m_pass == Pass::idempotence) idempotence_check();
}

void PassRun::write_inputs(CapturedGraph& graph, const TensorList& inputs) {
  const TensorList& statics = graph.static_inputs();
  if (inputs.size() != statics.size()) {
    throw ModelFailure(m_phase, fmt::format("make_inputs({}) returned {} tensors but the graph was "
                                            "captured with {}: inputs must keep their count",
                                            graph.batch_size(), inputs.size(), statics.size()));
  }
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].sizes() != statics[i].sizes() || inputs[i].scalar_type() != statics[i].scalar_type()) {
      throw ModelFailure(m_phase, fmt::format(
                                      "make_inputs({}) returned input {} as {} {} but the graph was "
                                      "captured with {} {}: inputs of one batch size must keep "
                                      "their shape and dtype",
                                      graph.batch_size(), i, c10::toString(inputs[i].scalar_type()),
                                      shape_string(inputs[i].sizes()),
                                      c10::toString(statics[i].scalar_type()),
                                      shape_string(statics[i].sizes())));
    }
    statics[i].copy_(inputs[i]);
  }
}

// The noise floor: the largest difference between two more eager(A) runs on the same inputs.
double PassRun::measure_noise(const TensorList& inputs) {
  UncountedScope uncounted;
  const TensorList first = eager(inputs);
  const TensorList second = eager(inputs);
  double noise = 0;
  for (std::size_t i = 0; i < first.size() && i < second.size(); ++i) {
    if (!first[i].defined() || !second[i].defined() || first[i].sizes() != second[i].sizes()) continue;
    const torch::Tensor d = (first[i].to(torch::kFloat64) - second[i].to(torch::kFloat64)).abs().nan_to_num(0.0);
    if (d.numel() > 0) noise = std::max(noise, d.max().item<double>());
  }
  return noise;
}

// Prefill: an eager-only batch size (capture.eager_batch_sizes) runs through A and B as the
// graphs' inputs do, so that a difference only the captured (decode) graphs show is told apart.
void PassRun::eager_compare(std::int64_t batch_size) {
  m_batch_size = batch_size;
  TensorList inputs = input_for(batch_size, m_cycle + 1);
  (void)reference_model();  // model B, outside every window
  m_phase = Phase::compare;
  CompareEvent c;
  static_cast<PhaseEvent&>(c) = event(Phase::compare);
  c.inputs = inputs;
  c.reference_outputs = reference_forward(inputs);
  begin(&Probe::on_compare_begin, c);
  c.eager_outputs = eager(inputs);
  {
    HarnessTime t(m_harness_seconds);
    UncountedScope uncounted;
    c.noise_floor = noise_floor(batch_size);
    const GraphBackend& backend = m_driver.backend();
    for (const auto& out : c.eager_outputs) {
      if (!out.defined() || out.numel() == 0 || !c10::isFloatingType(out.scalar_type())) continue;
      const double magnitude = out.to(torch::kFloat64).abs().nan_to_num(0.0, 0.0, 0.0).max().item<double>();
      c.tolerance = std::max(c.tolerance, replay_tolerance(backend.exact(), backend.min_tolerance(),
                                                           c.noise_floor, out.scalar_type(), magnitude));
    }
  }
  end(&Probe::on_compare_end, c);
}

void PassRun::replay_all() {
  if (m_pass == Pass::observe) {
    for (std::int64_t b : scenario().eager_batch_sizes) eager_compare(b);
  }
  for (std::size_t i = 0; i < m_graphs.size(); ++i) {
    CapturedGraph& graph = *m_graphs[i];
    const std::int64_t b = graph.batch_size();
    m_batch_size = b;
    TensorList inputs = input_for(b, m_cycle + 1);
    if (m_pass == Pass::observe) (void)reference_model();  // model B, outside every window

    m_phase = Phase::replay;
    ReplayEvent r;
    static_cast<PhaseEvent&>(r) = event(Phase::replay);
    r.graph = &m_views[i];
    begin(&Probe::on_replay_begin, r);
    write_inputs(graph, inputs);
    call_model(Phase::replay, "graph replay", [&] {
      graph.replay();
      m_driver.backend().synchronize();
      return 0;
    });
    r.replay_outputs = graph.static_outputs();
    end(&Probe::on_replay_end, r);
    if (m_pass == Pass::poison && passes::holds_nan(r.replay_outputs)) {
      ReplayNanEvent n;
      static_cast<PhaseEvent&>(n) = r;
      n.graph = r.graph;
      n.replay_outputs = r.replay_outputs;
      n.reference_outputs = reference_forward(graph.static_inputs());
      notify(&Probe::on_replay_nan, n);
    }

    m_phase = Phase::compare;
    CompareEvent c;
    static_cast<PhaseEvent&>(c) = event(Phase::compare);
    c.graph = &m_views[i];
    c.inputs = inputs;
    for (const auto& t : r.replay_outputs) c.replay_outputs.push_back(t.clone());
    if (m_pass == Pass::observe) c.reference_outputs = reference_forward(inputs);  // outside windows
    begin(&Probe::on_compare_begin, c);
    c.eager_outputs = eager(inputs);
    {
      HarnessTime t(m_harness_seconds);
      UncountedScope uncounted;
      c.noise_floor = noise_floor(b);
      // Per output (its dtype and magnitude); the largest applies.
      const GraphBackend& backend = m_driver.backend();
      c.tolerance = 0;
      for (const auto& out : c.eager_outputs) {
        if (!out.defined() || out.numel() == 0 || !c10::isFloatingType(out.scalar_type())) continue;
        const double magnitude = out.to(torch::kFloat64).abs().nan_to_num(0.0, 0.0, 0.0).max().item<double>();
        c.tolerance = std::max(c.tolerance, replay_tolerance(backend.exact(), backend.min_tolerance(),
                                                             c.noise_floor, out.scalar_type(), magnitude));
      }
    }
    end(&Probe::on_compare_end, c);
    if (m_pass == Pass::coverage) coverage(i, c);
  }
  m_batch_size = 0;
}

LifecycleModel& PassRun::reference_model() {
  if (!m_reference || m_reference_cycle != m_cycle) {
    HarnessTime t(m_harness_seconds);
    const Driver::SpanScope span(m_driver, open_span("model B", m_cycle, 0));
    m_reference.reset();
    m_reference = build_loaded("reference model");
    m_reference_cycle = m_cycle;
  }
  return *m_reference;
}

TensorList PassRun::reference_forward(const TensorList& inputs) {
  LifecycleModel& reference = reference_model();
  FlagScope quiet(m_quiet);
  UncountedScope uncounted;
  return call_model(m_phase, "reference model forward()", [&] {
    torch::NoGradGuard no_grad;
    return reference.forward_all(inputs);
  });
}

// A fresh model loaded in one go with the weights A should hold now: the initial checkpoint
// (or, for a dummy load, the same dummy fill) overlaid with every refit so far, then PWAL.
std::unique_ptr<LifecycleModel> PassRun::build_loaded(const char* what) {
  FlagScope quiet(m_quiet);
  UncountedScope uncounted;  // the harness's model, not model A's memory
  std::unique_ptr<LifecycleModel> model = construct_quiet(what);
  std::map<std::string, torch::Tensor> weights = m_refit_weights;
  if (scenario().load == LoadFormat::dummy) {
    call_model(m_phase, fmt::format("{} load_dummy_weights()", what), [&] {
      torch::NoGradGuard no_grad;
      model->load_dummy_weights(m_driver.seed());
      return 0;
    });
  } else {
    weights.insert(m_initial_weights.begin(), m_initial_weights.end());  // refits win
  }
  if (!weights.empty()) {
    std::vector<NamedTensor> list;
    for (const auto& [name, tensor] : weights) list.push_back({name, tensor});
    TensorListWeightStream records(
        std::move(list), fmt::format("the weights model A should hold at cycle {}", m_cycle));
    // One copy at a time: a loader that writes into what it is streamed must not change the
    // records, which later builds read again.
    CloningStream stream(records);
    call_model(m_phase, fmt::format("{} load_weights()", what), [&] { return model->load_weights(stream); });
  }
  call_model(m_phase, fmt::format("{} process_weights_after_loading()", what), [&] {
    torch::NoGradGuard no_grad;
    model->process_weights_after_loading();
    return 0;
  });
  return model;
}

// ---- the disturbing passes' work (passes/passes.h) -------------------------------------------

void PassRun::census_fill(const LoadEvent& load) {
  CensusFillEvent f;
  static_cast<PhaseEvent&>(f) = load;
  f.load = &load;
  passes::fill_census(load, checkpoint_layout(), f);
  notify(&Probe::on_census_filled, f);
}

void PassRun::poison_fill(PoisonFillEvent::Kind kind, const CycleStep& step) {
  PoisonFillEvent f;
  static_cast<PhaseEvent&>(f) = event(kind == PoisonFillEvent::Kind::staged ? Phase::load : Phase::refit);
  {
    UncountedScope uncounted;
    switch (kind) {
      case PoisonFillEvent::Kind::before_refit:
        passes::poison_before_refit(checkpoint_layout(), step.prefixes, f);
        break;
      case PoisonFillEvent::Kind::staged:
        passes::poison_staged(checkpoint_layout(), scenario().poison.staged, step.prefixes, f);
        break;
      case PoisonFillEvent::Kind::orphans: passes::poison_orphans(m_views, live_tensors(), f); break;
    }
  }
  notify(&Probe::on_poison_filled, f);
}

// A second PWAL right after the loader's must change nothing.
void PassRun::idempotence_check() {
  IdempotenceEvent f;
  static_cast<PhaseEvent&>(f) = event(Phase::pwal);
  f.before = passes::snapshot(graphcheck::live_tensors(*m_model));
  run_pwal(*m_model);
  f.after = passes::snapshot(graphcheck::live_tensors(*m_model));
  notify(&Probe::on_idempotence_checked, f);
}

// Fresh inputs the graph never saw (other seeds, signs and scales), replayed and run eagerly.
void PassRun::validate_capture(std::size_t index, const CaptureEvent& capture) {
  ValidationEvent v;
  static_cast<PhaseEvent&>(v) = capture;
  v.graph = capture.graph;
  const std::int64_t b = capture.batch_size;
  for (const auto& [seed, scale] : passes::validation_inputs(scenario().seed, b)) {
    ValidationReplay r;
    r.seed = seed;
    r.scale = scale;
    TensorList inputs = make_inputs(b, seed);
    for (auto& t : inputs) {
      if (t.defined() && c10::isFloatingType(t.scalar_type())) t = t * scale;
    }
    r.replay_outputs = replay(index, inputs);
    r.eager_outputs = eager(inputs);
    // The differential's own tolerance, per output (dtype and magnitude of each).
    for (const auto& t : r.eager_outputs) {
      if (!t.defined() || t.numel() == 0 || !c10::isFloatingType(t.scalar_type())) continue;
      const double magnitude = t.to(torch::kFloat64).abs().nan_to_num(0, 0, 0).max().item<double>();
      r.tolerance = std::max(r.tolerance, replay_tolerance(backend().exact(), backend().min_tolerance(),
                                                           noise_floor(b), t.scalar_type(), magnitude));
    }
    const bool agrees = passes::agree(r.replay_outputs, r.eager_outputs, r.tolerance);
    v.replays.push_back(std::move(r));
    if (!agrees) break;  // one input that shows it is enough
  }
  notify(&Probe::on_validation_replays, v);
}

void PassRun::coverage(std::size_t index, const CompareEvent& compare) {
  CoverageEvent f;
  static_cast<PhaseEvent&>(f) = compare;
  passes::measure_coverage(
      m_views[index], live_tensors(), compare,
      [&] {
        TensorList replayed = replay(index, compare.inputs);
        TensorList eager_outputs = eager(compare.inputs);
        return std::make_pair(std::move(replayed), std::move(eager_outputs));
      },
      f);
  notify(&Probe::on_coverage_measured, f);
}

// Dummy loads of models grown through a config key (scenario dummy_growth).
void PassRun::growth() {
  GrowthEvent g;
  g.phase = Phase::load;
  passes::measure_growth(
      scenario(), [&](const ModelConfig& config) { return construct_model(config); },
      [&](LifecycleModel& model) { load_dummy(model, m_driver.seed()); }, g);
  notify(&Probe::on_growth_measured, g);
}

std::unique_ptr<LifecycleModel> PassRun::construct_model(const ModelConfig& config) {
  return construct_quiet("model variant", &config);
}

// Another instance of the scenario's model whose hooks reach no probe.
std::unique_ptr<LifecycleModel> PassRun::construct_quiet(const char* what, const ModelConfig* config_override) {
  FlagScope quiet(m_quiet);
  return construct(config_override ? *config_override : scenario().config, what);
}

std::unique_ptr<LifecycleModel> PassRun::construct(ModelConfig config, const char* what) {
  const Scenario& s = scenario();
  const auto split = ModelRegistry::split_front(s.fixture);
  const std::string& kind = split.first;
  const std::string& spec = split.second;
  std::unique_ptr<LifecycleModel> model;
  if (kind.empty()) {
    const ModelRegistry::Entry* entry = ModelRegistry::get().find(s.fixture);
    if (!entry) throw UserError(fmt::format("{}: unknown fixture '{}'", s.file, s.fixture));
    model = call_model(Phase::construct, what, [&] { return entry->factory(config); });
  } else {
    const ModelFront* front = ModelRegistry::get().front(kind);
    if (!front) {
      throw UserError(fmt::format("{}: the scenario names a {} model ('{}') and no {} front is loaded",
                                  s.file, kind, spec, kind));
    }
    model = call_model(Phase::construct, what, [&] { return front->create(spec, config); });
  }
  if (!model) throw ModelFailure(Phase::construct, fmt::format("{}: the factory returned no model", what));
  auto unused = config.unused_keys();
  if (!unused.empty()) {
    throw UserError(fmt::format(
        "{}: unknown config key '{}' for fixture '{}': check its spelling (the fixture never "
        "read it)",
        config.where(unused.front()), unused.front(), s.fixture));
  }
  freeze(*model);
  // The backend's device (CUDA on the cuda backend): parameters and buffers move in place
  // (set_data), so tensor attributes keyed by identity survive.
  const c10::Device device = m_driver.backend().device();
  if (!device.is_cpu()) {
    call_model(Phase::construct, what, [&] {
      model->catalog().to(device);
      return 0;
    });
  }
  return model;
}

TensorList PassRun::input_for(std::int64_t batch_size, int salt) {
  HarnessTime t(m_harness_seconds);
  const std::uint64_t seed = m_driver.seed() * 1000003u + static_cast<std::uint64_t>(salt) * 7919u +
                             static_cast<std::uint64_t>(batch_size);
  return make_inputs(batch_size, seed);
}

void PassRun::index_modules() {
  m_module_paths.clear();
  m_module_paths[detail::object_address(m_model.get())] = "(model)";
  for (const auto& m : m_model->catalog().modules()) {
    m_module_paths[m.identity] = m.path.empty() ? "(root)" : m.path;
  }
}

std::string PassRun::module_path(const void* module) {
  auto it = m_module_paths.find(module);
  if (it != m_module_paths.end()) return it->second;
  index_modules();  // modules may be created after construction
  it = m_module_paths.find(module);
  return it == m_module_paths.end() ? fmt::format("(unregistered module at {})", module) : it->second;
}

}  // namespace

MutationVerdict judge_mutation(const ScenarioRecord& record, const std::string& mutation,
                               const std::set<std::string>& clean_failed) {
  MutationVerdict v;
  v.mutation = mutation;
  auto declared = record.expected_catches.find(mutation);
  v.declared = declared != record.expected_catches.end();
  if (v.declared) v.expected = declared->second;
  for (const Finding& f : record.findings) {
    if (clean_failed.count(f.probe) || v.caught.count(f.probe)) continue;
    const ProbeRegistry::Entry* entry = ProbeRegistry::get().find(f.probe);
    bool own = entry == nullptr;  // "driver": the lifecycle itself failed
    if (entry) {
      for (Pass p : entry->passes) own = own || f.pass == to_string(p);
    }
    if (own) v.caught[f.probe] = f.pass;
  }
  for (const auto& p : v.expected) {
    if (!v.caught.count(p)) v.missed.push_back(p);
  }
  return v;
}

int set_intra_op_threads(int threads) {
  if (threads > 0) at::set_num_threads(threads);
  return at::get_num_threads();
}

std::vector<std::pair<std::string, std::string>> run_environment(const std::string& backend) {
  std::vector<std::pair<std::string, std::string>> env;
  env.emplace_back("graphcheck", GRAPHCHECK_VERSION);
  env.emplace_back("libtorch", fmt::format("{}.{}.{}", TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR,
                                           TORCH_VERSION_PATCH));
#if defined(__clang__)
  env.emplace_back("compiler", fmt::format("clang {}.{}.{}", __clang_major__, __clang_minor__, __clang_patchlevel__));
#elif defined(__GNUC__)
  env.emplace_back("compiler", fmt::format("gcc {}.{}.{}", __GNUC__, __GNUC_MINOR__, __GNUC_PATCHLEVEL__));
#endif
  env.emplace_back("cuda_build", GRAPHCHECK_HAS_CUDA ? "yes" : "no");
  try {
    const BackendChoice choice = make_backend(backend);
    env.emplace_back("backend", fmt::format("{} ({})", choice.backend->name(), choice.reason));
  } catch (const std::exception& e) {
    env.emplace_back("backend", fmt::format("{}: unavailable ({})", backend, e.what()));
  }
  return env;
}

ScenarioRecord run_scenario(const Scenario& scenario, const RunOptions& options,
                            ProgressListener* progress) {
  try {
    return Driver(scenario, options, progress).run();
  } catch (const std::exception& e) {
    ScenarioRecord record;
    record.name = scenario.name;
    record.file = scenario.file;
    record.status = Status::crashed;
    record.reason = fmt::format("harness failure: {}", e.what());
    return record;
  }
}

}  // namespace graphcheck
