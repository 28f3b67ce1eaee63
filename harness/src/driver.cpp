#include "graphcheck/driver.h"

#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <type_traits>

#include "graphcheck/backend.h"
#include "graphcheck/checkpoint.h"
#include "graphcheck/model.h"
#include "graphcheck/mutation.h"
#include "graphcheck/probe.h"
#include "counting_allocator.h"
#include "dummy_loader.h"
#include "tensor_format.h"

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
  }
  return "unknown";
}

ScenarioCatalog default_catalog() {
  ScenarioCatalog catalog;
  catalog.fixtures = ModelRegistry::get().names();
  catalog.probes = ProbeRegistry::get().names();
  catalog.is_mutation = [](const std::string& name) { return mutation::find(name) != nullptr; };
  return catalog;
}

GRAPHCHECK_REGISTER_MUTATION(
    "driver.skip_pwal_on_dummy", "driver",
    "the loader does not call process_weights_after_loading() after a dummy load (any model)");
GRAPHCHECK_REGISTER_MUTATION(
    "driver.skip_pwal_on_refit", "driver",
    "the loader does not call process_weights_after_loading() after a refit (any model)");

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
auto call_model(Phase phase, const char* what, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
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

// Remembers every tensor a stream yields: the weights model A should hold afterwards.
class RecordingStream final : public WeightStream {
 public:
  RecordingStream(WeightStream& inner, std::map<std::string, torch::Tensor>& into)
      : m_inner(inner), m_into(into) {}
  std::optional<NamedTensor> next() override {
    auto item = m_inner.next();
    if (item) {
      UncountedScope uncounted;  // the harness's copy, not the model's memory
      torch::Tensor copy = item->tensor.clone();
      m_into[item->name] = copy;
      m_streamed.push_back({item->name, copy});
      m_seen.insert(item->name);
    }
    return item;
  }
  [[nodiscard]] std::string source() const override { return m_inner.source(); }
  [[nodiscard]] const std::set<std::string>& seen() const { return m_seen; }
  [[nodiscard]] std::vector<NamedTensor> take_streamed() { return std::move(m_streamed); }

 private:
  WeightStream& m_inner;
  std::map<std::string, torch::Tensor>& m_into;
  std::vector<NamedTensor> m_streamed;
  std::set<std::string> m_seen;
};

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

void freeze(LifecycleModel& model) {
  for (auto& p : model.module().parameters(true)) p.requires_grad_(false);
}

class Driver final : public RunContext, public HookSink {
 public:
  Driver(const Scenario& scenario, const RunOptions& options, ProgressListener* progress)
      : m_scenario(scenario), m_options(options), m_progress(progress) {
    m_record.name = scenario.name;
    m_record.file = scenario.file;
    m_record.description = scenario.description;
    m_record.fixture = scenario.fixture;
    m_record.expected_catches = scenario.mutations;
    m_record.mutations.assign(options.mutations.begin(), options.mutations.end());
    m_seed = options.seed.value_or(scenario.seed);
  }

  ScenarioRecord run() {
    const auto start = Clock::now();
    {
      mutation::Scope mutations(m_options.mutations);
      HookSinkScope hooks(*this);
      try {
        setup();
        m_started = true;  // on_scenario_end runs even when a probe's begin throws
        fire(&Probe::on_scenario_begin);
        lifecycle();
        if (!m_scenario.expect_error.empty()) expected_error_missing();
      } catch (const ModelFailure& e) {
        if (!stopped_as_expected(e.what())) {
          Finding f;
          f.probe = "driver";
          f.phase = to_string(e.phase());
          f.cycle = m_cycle;
          f.batch_size = m_batch_size;
          f.subject = "model code";
          f.message = e.what();
          if (!m_scenario.expect_error.empty()) {
            f.message += fmt::format(" (the scenario expects an error containing '{}' instead, {})",
                                     m_scenario.expect_error, m_scenario.expect_error_where);
          }
          add_finding(std::move(f));
        }
      } catch (const UserError& e) {
        if (!stopped_as_expected(e.what())) {
          m_record.status = Status::error;
          m_record.reason = e.what();
          if (!m_scenario.expect_error.empty()) {
            m_record.reason += fmt::format(" (the scenario expects an error containing '{}' "
                                           "instead, {})",
                                           m_scenario.expect_error, m_scenario.expect_error_where);
          }
        }
      } catch (const std::exception& e) {
        m_record.status = Status::crashed;
        m_record.reason = fmt::format("harness failure in phase {}: {}", to_string(m_phase), what_of(e));
      }
      if (m_started) {
        try {
          fire(&Probe::on_scenario_end);
        } catch (const std::exception& e) {
          m_record.status = Status::crashed;
          m_record.reason = fmt::format("probe failed at scenario end: {}", what_of(e));
        }
      }
    }
    if (m_record.status == Status::passed && !m_record.findings.empty()) {
      m_record.status = Status::failed;
    }
    m_record.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return std::move(m_record);
  }

  // expect_error: the run stopped with the expected error; the scenario passes (other findings
  // made before it still count).
  bool stopped_as_expected(const std::string& message) {
    if (m_scenario.expect_error.empty() || message.find(m_scenario.expect_error) == std::string::npos) {
      return false;
    }
    m_record.reason = fmt::format("stopped as expected in phase {} (cycle {}): {}",
                                  to_string(m_phase), m_cycle, message);
    return true;
  }

  void expected_error_missing() {
    Finding f;
    f.probe = "driver";
    f.phase = "end";
    f.cycle = m_cycle;
    f.subject = "expected error";
    f.message = fmt::format(
        "the scenario expects the run to stop with an error containing '{}' ({}), but it "
        "completed: the model accepted what it must refuse loudly",
        m_scenario.expect_error, m_scenario.expect_error_where);
    f.evidence = {{"expect_error", m_scenario.expect_error}};
    add_finding(std::move(f));
  }

  // ---- RunContext ---------------------------------------------------------------------------
  [[nodiscard]] const Scenario& scenario() const override { return m_scenario; }
  [[nodiscard]] LifecycleModel& model() override { return *m_model; }
  [[nodiscard]] const GraphBackend& backend() const override { return *m_backend; }
  [[nodiscard]] std::vector<CapturedGraph*> graphs() override {
    std::vector<CapturedGraph*> out;
    for (auto& g : m_graphs) out.push_back(g.get());
    return out;
  }
  [[nodiscard]] LifecycleModel& reference_model() {
    if (!m_reference || m_reference_cycle != m_cycle) build_reference();
    return *m_reference;
  }
  [[nodiscard]] torch::Tensor reference_forward(const torch::Tensor& input) override {
    LifecycleModel& reference = reference_model();
    FlagScope quiet(m_quiet);
    return call_model(m_phase, "reference model forward()", [&] {
      torch::NoGradGuard no_grad;
      return reference.forward(input);
    });
  }
  [[nodiscard]] std::vector<NamedTensor> reference_tensors() override {
    return live_tensors(reference_model());
  }
  [[nodiscard]] std::unique_ptr<LifecycleModel> construct_loaded_model() override {
    return build_loaded("fresh model");
  }
  void run_pwal(LifecycleModel& model) override {
    FlagScope quiet(m_quiet);
    call_model(m_phase, "process_weights_after_loading()", [&] {
      torch::NoGradGuard no_grad;
      model.process_weights_after_loading();
      return 0;
    });
  }
  [[nodiscard]] std::unique_ptr<LifecycleModel> construct_model(const ModelConfig& config) override {
    return construct_quiet("model variant", &config);
  }
  [[nodiscard]] std::vector<std::string> module_paths() override {
    index_modules();
    std::vector<std::string> paths = {"(model)", "(root)"};
    for (const auto& item : m_model->module().named_modules("", /*include_self=*/false)) {
      paths.push_back(item.key());
    }
    return paths;
  }
  void add_finding(Finding finding) override {
    if (finding.phase.empty()) finding.phase = to_string(m_phase);
    m_record.findings.push_back(std::move(finding));
  }
  void add_measurement(Measurement m) override {
    if (m.phase.empty()) m.phase = to_string(m_phase);
    m_record.measurements.push_back(std::move(m));
  }

  // ---- HookSink -----------------------------------------------------------------------------
  void on_hook(const void* module, std::string_view hook) override {
    if (m_quiet || !m_model) return;
    HookEvent event;
    event.module_path = module_path(module);
    event.hook = std::string(hook);
    event.phase = m_phase;
    event.cycle = m_cycle;
    for (Probe* p : m_probes) p->on_hook(*this, event);
  }

 private:
  void setup() {
    for (const auto& name : m_scenario.checks) {
      const ProbeRegistry::Entry* entry = ProbeRegistry::get().find(name);
      if (!entry) {
        throw UserError(fmt::format("{}: unknown probe '{}'", m_scenario.file, name));
      }
      m_owned_probes.push_back(entry->factory());
      m_probes.push_back(m_owned_probes.back().get());
      m_record.probes.push_back(name);
    }
    for (Probe* p : m_options.extra_probes) m_probes.push_back(p);
    try {
      m_backend = make_backend(m_options.backend);
    } catch (const std::invalid_argument& e) {
      throw UserError(e.what());
    }
    m_record.backend = m_backend->name();
    m_work_dir = fs::path(m_options.work_dir) / m_scenario.name;
  }

  void lifecycle() {
    // construct
    m_phase = Phase::construct;
    begin(&Probe::on_construct_begin, event(Phase::construct));
    m_model = construct(m_scenario.config, "model constructor");
    index_modules();
    end(&Probe::on_construct_end, event(Phase::construct));

    // initial load + PWAL (the loader calls it for every load format)
    if (m_scenario.load == LoadFormat::dummy) {
      load_dummy();
      if (mutation::enabled("driver.skip_pwal_on_dummy")) {
        // Mutation: the loader skips PWAL after a dummy load.
      } else {
        pwal();
      }
    } else {
      load(/*refit=*/false,
           m_scenario.checkpoint.empty() ? write_checkpoint(m_seed) : m_scenario.checkpoint, {}, "");
      pwal();
    }

    // warm-up and capture, one per batch size
    for (std::int64_t b : m_scenario.batch_sizes) {
      m_batch_size = b;
      PhaseEvent e = event(Phase::warmup);
      torch::Tensor input = input_for(b, 0);  // before the window: only forward's own memory counts
      begin(&Probe::on_warmup_begin, e);
      call_model(Phase::warmup, "forward()", [&] {
        torch::NoGradGuard no_grad;
        return m_model->forward(input);
      });
      end(&Probe::on_warmup_end, e);
    }
    for (std::int64_t b : m_scenario.batch_sizes) {
      m_batch_size = b;
      CaptureEvent e;
      static_cast<PhaseEvent&>(e) = event(Phase::capture);
      torch::Tensor input = input_for(b, 0);
      begin(&Probe::on_capture_begin, e);
      m_graphs.push_back(call_model(Phase::capture, "forward() under capture",
                                    [&] { return m_backend->capture(*m_model, input, b); }));
      e.graph = m_graphs.back().get();
      end(&Probe::on_capture_end, e);
    }
    m_batch_size = 0;
    replay_all();

    // refit cycles
    for (std::size_t k = 0; k < m_scenario.cycles.size(); ++k) {
      const RefitSpec& spec = m_scenario.cycles[k];
      m_cycle = static_cast<int>(k) + 1;
      m_phase = Phase::refit;
      PhaseEvent e = event(Phase::refit);
      begin(&Probe::on_refit_begin, e);
      const std::string path = write_checkpoint(spec.seed + (m_seed - m_scenario.seed));
      // The loader stages once per refit, before the first bucket (DESIGN §1.4).
      call_model(Phase::refit, "stage_for_refit()", [&] {
        torch::NoGradGuard no_grad;
        m_model->stage_for_refit();
        return 0;
      });
      if (spec.buckets.empty()) {
        load(/*refit=*/true, path, spec.only, "");
      } else {
        for (const RefitBucket& bucket : spec.buckets) load(/*refit=*/true, path, bucket.only, bucket.name);
      }
      if (mutation::enabled("driver.skip_pwal_on_refit")) {
        // Mutation: the loader skips PWAL after a refit.
      } else {
        pwal();
      }
      m_phase = Phase::refit;
      end(&Probe::on_refit_end, e);
      replay_all();
    }
  }

  // Synthesized by a freshly constructed model, so that the checkpoint layout does not depend on
  // what PWAL did to model A (repacked or freed raw weights).
  std::string write_checkpoint(std::uint64_t seed) {
    std::vector<NamedTensor> tensors;
    {
      std::unique_ptr<LifecycleModel> fresh = construct_quiet("checkpoint synthesis");
      tensors = call_model(m_phase, "synthesize_checkpoint()",
                           [&] { return fresh->synthesize_checkpoint(seed); });
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
      save_checkpoint(path, tensors,
                      {{"graphcheck.fixture", m_scenario.fixture},
                       {"graphcheck.seed", std::to_string(seed)}});
    } catch (const safetensors::Error& e) {
      // A dtype the format cannot hold comes from the model's synthesize_checkpoint().
      throw ModelFailure(m_phase, fmt::format("synthesize_checkpoint(): {}", e.what()));
    } catch (const std::exception& e) {
      throw UserError(fmt::format("cannot write checkpoint '{}': {}", path, e.what()));
    }
    return path;
  }

  void load(bool refit, const std::string& path, const std::vector<std::string>& only,
            const std::string& bucket) {
    m_phase = Phase::load;
    std::unique_ptr<SafetensorsWeightStream> file;
    try {
      file = std::make_unique<SafetensorsWeightStream>(path, only);
    } catch (const safetensors::Error& e) {
      throw UserError(e.what());
    }
    LoadEvent e;
    static_cast<PhaseEvent&>(e) = event(Phase::load);
    e.format = refit ? LoadFormat::checkpoint : m_scenario.load;
    e.refit = refit;
    e.source = file->source();
    e.bucket = bucket;
    if (!only.empty()) {
      bool any = false;
      for (const auto& info : file->file().tensors()) any |= matches_any_prefix(info.name, only);
      if (!any) {
        throw UserError(fmt::format("{}: refit cycle {}{} streams only {} but no tensor of {} has "
                                    "such a prefix: fix the prefixes",
                                    m_scenario.file, m_cycle,
                                    bucket.empty() ? "" : fmt::format(" (bucket '{}')", bucket),
                                    fmt::join(only, ", "), e.source));
      }
    }
    begin(&Probe::on_load_begin, e);
    RecordingStream stream(*file, refit ? m_refit_weights : m_initial_weights);
    e.loaded = call_model(Phase::load, "load_weights()",
                          [&] { return m_model->load_weights(stream); });
    check_loaded(stream.seen(), e.loaded, refit, e.source);
    e.streamed = stream.take_streamed();
    end(&Probe::on_load_end, e);
  }

  void load_dummy() {
    m_phase = Phase::load;
    LoadEvent e;
    static_cast<PhaseEvent&>(e) = event(Phase::load);
    e.format = LoadFormat::dummy;
    e.source = fmt::format("dummy weights (seed {})", m_seed);
    begin(&Probe::on_load_begin, e);
    auto on_write = [this](const std::string& name, const torch::Tensor& tensor) {
      InitWriteEvent w{name, tensor};
      for (Probe* p : m_probes) p->on_init_write(*this, w);
    };
    std::vector<std::string> names = call_model(
        Phase::load, "dummy load", [&] { return dummy_load(*m_model, m_seed, on_write); });
    e.loaded.insert(names.begin(), names.end());
    end(&Probe::on_load_end, e);
  }

  void check_loaded(const std::set<std::string>& streamed, const std::set<std::string>& loaded,
                    bool refit, const std::string& source) {
    if (!refit) {
      for (const auto& t : checkpoint_tensors(*m_model)) {
        if (!streamed.count(t.name)) {
          throw UserError(fmt::format(
              "{} lacks tensor '{}' (shape {}), which the model needs: regenerate the checkpoint "
              "for this model config",
              source, t.name, shape_string(t.tensor.sizes())));
        }
      }
    }
    for (const auto& name : streamed) {
      if (loaded.count(name)) continue;
      Finding f;
      f.probe = "driver";
      f.subject = name;
      f.message = fmt::format(
          "load_weights() consumed '{}' from {} but did not report it loaded: return every "
          "loaded name, or the weight is silently dropped",
          name, source);
      add_finding(std::move(f));
    }
  }

  void pwal() {
    m_phase = Phase::pwal;
    PhaseEvent e = event(Phase::pwal);
    begin(&Probe::on_pwal_begin, e);
    call_model(Phase::pwal, "process_weights_after_loading()", [&] {
      torch::NoGradGuard no_grad;
      m_model->process_weights_after_loading();
      return 0;
    });
    end(&Probe::on_pwal_end, e);
  }

  void replay_all() {
    for (auto& graph : m_graphs) {
      const std::int64_t b = graph->batch_size();
      m_batch_size = b;
      torch::Tensor input = input_for(b, m_cycle + 1);

      m_phase = Phase::replay;
      ReplayEvent r;
      static_cast<PhaseEvent&>(r) = event(Phase::replay);
      r.graph = graph.get();
      begin(&Probe::on_replay_begin, r);
      if (input.sizes() != graph->static_input().sizes()) {
        throw ModelFailure(Phase::replay,
                           fmt::format("make_input({}) returned shape {} but the graph was captured "
                                       "with {}: inputs of one batch size must keep their shape",
                                       b, shape_string(input.sizes()),
                                       shape_string(graph->static_input().sizes())));
      }
      graph->static_input().copy_(input);
      call_model(Phase::replay, "graph replay", [&] {
        graph->replay();
        return 0;
      });
      r.replay_output = graph->static_output();
      end(&Probe::on_replay_end, r);

      m_phase = Phase::compare;
      CompareEvent c;
      static_cast<PhaseEvent&>(c) = event(Phase::compare);
      c.graph = graph.get();
      c.input = input;
      c.replay_output = r.replay_output.clone();
      begin(&Probe::on_compare_begin, c);
      c.eager_output = call_model(Phase::compare, "forward()", [&] {
        torch::NoGradGuard no_grad;
        return m_model->forward(input);
      });
      end(&Probe::on_compare_end, c);
    }
    m_batch_size = 0;
  }

  void build_reference() {
    m_reference.reset();
    m_reference = build_loaded("reference model");
    m_reference_cycle = m_cycle;
  }

  // A fresh model loaded in one go with the weights A should hold now: the initial checkpoint
  // (or, for a dummy load, the same dummy fill) overlaid with every refit so far, then PWAL.
  std::unique_ptr<LifecycleModel> build_loaded(const char* what) {
    FlagScope quiet(m_quiet);
    UncountedScope uncounted;  // the harness's model, not model A's memory
    std::unique_ptr<LifecycleModel> model = construct_quiet(what);
    std::map<std::string, torch::Tensor> weights = m_refit_weights;
    if (m_scenario.load == LoadFormat::dummy) {
      call_model(m_phase, "dummy load", [&] { return dummy_load(*model, m_seed); });
    } else {
      weights.insert(m_initial_weights.begin(), m_initial_weights.end());  // refits win
    }
    if (!weights.empty()) {
      std::vector<NamedTensor> list;
      for (const auto& [name, tensor] : weights) list.push_back({name, tensor});
      TensorListWeightStream stream(
          std::move(list), fmt::format("the weights model A should hold at cycle {}", m_cycle));
      call_model(m_phase, fmt::format("{} load_weights()", what).c_str(),
                 [&] { return model->load_weights(stream); });
    }
    call_model(m_phase, fmt::format("{} process_weights_after_loading()", what).c_str(), [&] {
      torch::NoGradGuard no_grad;
      model->process_weights_after_loading();
      return 0;
    });
    return model;
  }

  // Another instance of the scenario's model whose hooks reach no probe.
  std::unique_ptr<LifecycleModel> construct_quiet(const char* what,
                                                  const ModelConfig* config_override = nullptr) {
    FlagScope quiet(m_quiet);
    return construct(config_override ? *config_override : m_scenario.config, what);
  }

  // Constructs the scenario's fixture with `config`; unknown config keys are user errors.
  std::unique_ptr<LifecycleModel> construct(ModelConfig config, const char* what) {
    const ModelRegistry::Entry* entry = ModelRegistry::get().find(m_scenario.fixture);
    if (!entry) {
      throw UserError(fmt::format("{}: unknown fixture '{}'", m_scenario.file, m_scenario.fixture));
    }
    auto model = call_model(Phase::construct, what, [&] { return entry->factory(config); });
    if (!model) throw ModelFailure(Phase::construct, fmt::format("{}: the factory returned no model", what));
    auto unused = config.unused_keys();
    if (!unused.empty()) {
      throw UserError(fmt::format(
          "{}: unknown config key '{}' for fixture '{}': check its spelling (the fixture never "
          "read it)",
          config.where(unused.front()), unused.front(), m_scenario.fixture));
    }
    freeze(*model);
    return model;
  }

  torch::Tensor input_for(std::int64_t batch_size, int salt) {
    const std::uint64_t seed = m_seed * 1000003u + static_cast<std::uint64_t>(salt) * 7919u +
                               static_cast<std::uint64_t>(batch_size);
    return call_model(m_phase, "make_input()",
                      [&] { return m_model->make_input(batch_size, seed); });
  }

  void index_modules() {
    m_module_paths.clear();
    m_module_paths[detail::object_address(m_model.get())] = "(model)";
    // include_self=false: the root module need not live in a shared_ptr.
    m_module_paths[detail::object_address(&m_model->module())] = "(root)";
    for (const auto& item : m_model->module().named_modules("", /*include_self=*/false)) {
      m_module_paths[detail::object_address(item.value().get())] = item.key();
    }
  }

  std::string module_path(const void* module) {
    auto it = m_module_paths.find(module);
    if (it != m_module_paths.end()) return it->second;
    index_modules();  // modules may be created after construction
    it = m_module_paths.find(module);
    return it == m_module_paths.end() ? fmt::format("(unregistered module at {})", module)
                                      : it->second;
  }

  PhaseEvent event(Phase phase) const {
    PhaseEvent e;
    e.phase = phase;
    e.cycle = m_cycle;
    e.batch_size = m_batch_size;
    return e;
  }

  // Begin events in probe order, end events in reverse order.
  template <class Event>
  void begin(void (Probe::*fn)(RunContext&, const Event&), const Event& e) {
    m_phase = e.phase;
    if (m_progress) m_progress->on_phase(to_string(e.phase), e.cycle, e.batch_size);
    m_phase_start.push_back(Clock::now());
    for (Probe* p : m_probes) (p->*fn)(*this, e);
  }
  template <class Event>
  void end(void (Probe::*fn)(RunContext&, const Event&), const Event& e) {
    for (auto it = m_probes.rbegin(); it != m_probes.rend(); ++it) ((*it)->*fn)(*this, e);
    Measurement m;
    m.tag = fmt::format("gc/timing/{}", to_string(e.phase));
    m.value = std::chrono::duration<double>(Clock::now() - m_phase_start.back()).count();
    m.unit = "s";
    m.phase = to_string(e.phase);
    m.cycle = e.cycle;
    m.batch_size = e.batch_size;
    m_phase_start.pop_back();
    m_record.measurements.push_back(std::move(m));
  }
  void fire(void (Probe::*fn)(RunContext&)) {
    for (Probe* p : m_probes) (p->*fn)(*this);
  }

  const Scenario& m_scenario;
  RunOptions m_options;
  ProgressListener* m_progress;
  ScenarioRecord m_record;
  std::uint64_t m_seed = 1;
  fs::path m_work_dir;
  bool m_started = false;

  std::vector<std::unique_ptr<Probe>> m_owned_probes;
  std::vector<Probe*> m_probes;
  std::unique_ptr<GraphBackend> m_backend;
  std::unique_ptr<LifecycleModel> m_model;
  std::vector<std::unique_ptr<CapturedGraph>> m_graphs;
  // What model A should hold: the initial checkpoint (empty for a dummy load, which B repeats)
  // and every tensor streamed by the refits so far.
  std::map<std::string, torch::Tensor> m_initial_weights;
  std::map<std::string, torch::Tensor> m_refit_weights;
  std::unique_ptr<LifecycleModel> m_reference;
  int m_reference_cycle = -1;
  bool m_quiet = false;
  std::map<const void*, std::string> m_module_paths;

  Phase m_phase = Phase::construct;
  int m_cycle = 0;
  std::int64_t m_batch_size = 0;
  std::vector<Clock::time_point> m_phase_start;
};

}  // namespace

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
