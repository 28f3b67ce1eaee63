// The driver's entry points (run_scenario, run_environment, default_catalog), the names of the
// phases and passes, the driver's own mutations, and the Driver (engine/driver.h): set-up, the
// passes in turn, the record and its timeline, the checkpoints the passes share.

#include "graphcheck/engine/driver.h"

#include <fmt/format.h>
#include <torch/types.h>
#include <torch/utils.h>
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>

#include "engine/driver.h"
#include "engine/errors.h"
#include "engine/pass_run.h"
#include "graphcheck/engine/backend.h"
#include "graphcheck/checkpoint.h"
#include "graphcheck/model.h"
#include "graphcheck/mutation.h"
#include "graphcheck/probe.h"
#include "graphcheck/safetensors.h"
#include "support/release_memory.h"

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
    case Pass::stream_order: return "stream_order";
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

}  // namespace graphcheck

namespace graphcheck::engine {

Driver::Driver(const Scenario& scenario, const RunOptions& options, ProgressListener* progress)
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

namespace {

// Note [Nondeterministic forward] (replay_diff_probe.cpp): a forward that does not repeat leads
// the record, and every other finding says it is under it.
void lead_with_nondeterminism(std::vector<Finding>& findings) {
  auto cause = [](const Finding& f) {
    return std::any_of(f.evidence.begin(), f.evidence.end(),
                       [](const auto& kv) { return kv.first == "cause" && kv.second == "nondeterministic"; });
  };
  const auto rest = std::stable_partition(findings.begin(), findings.end(), cause);
  if (rest == findings.begin()) return;
  for (auto it = rest; it != findings.end(); ++it) {
    it->evidence.emplace_back("under", "forward is nondeterministic (the first finding): this difference is no evidence");
  }
}

}  // namespace

ScenarioRecord Driver::run() {
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
    // A rank that never reached its observe pass (a user error on setup, a failed validate pass)
    // still takes the trainer's refits, so that the other ranks' collectives complete.
    if (!m_drained) drain_transport(Pass::observe);
  }
  if (m_record.status == Status::passed && !m_record.findings.empty()) {
    m_record.status = Status::failed;
  }
  lead_with_nondeterminism(m_record.findings);
  if (m_record.status == Status::passed || m_record.status == Status::failed) {
    for (const auto& mutation : m_options.mutations) {
      m_record.verdicts.push_back(judge_mutation(m_record, mutation));
    }
  }
  m_record.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return std::move(m_record);
}

void Driver::add_finding(Finding finding, Pass pass, Phase phase) {
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

std::string Driver::checkpoint_for(std::uint64_t seed, PassRun& pass,
                                   const std::function<std::unique_ptr<LifecycleModel>()>& construct,
                                   std::unique_ptr<LifecycleModel>* keep) {
  auto cached = m_checkpoints.find(seed);
  if (cached != m_checkpoints.end()) return cached->second;
  const SpanScope span(*this, open_span(to_string(pass.pass()), "checkpoint synthesis", pass.cycle(), 0));
  std::string path = (m_work_dir / fmt::format("seed-{}.safetensors", seed)).string();
  std::vector<NamedTensor> tensors;
  {
    std::unique_ptr<LifecycleModel> own;
    std::unique_ptr<LifecycleModel>& fresh = keep ? *keep : own;
    if (!fresh) fresh = construct();
    tensors = call_model(pass.phase(), "synthesize_checkpoint()",
                         [&] { return fresh->synthesize_checkpoint(seed); });
  }
  // The fresh model's (Note [Freed memory stays resident]); a kept one is the caller's to free.
  if (!keep) support::release_free_memory();
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
  try {
    // Note [Replaced checkpoints go in the background] (support/file_reaper.h): an earlier run's.
    const support::FileReaper::Aside old = m_reaper.set_aside(path);
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
  tensors.clear();
  support::release_free_memory();  // the synthesized tensors'
  m_checkpoints[seed] = path;
  return path;
}

// Note [Model B's outputs across passes]: model B is a fresh model loaded from the checkpoints
// of the cycle, which are the same files in every pass of a run, so its outputs for the same
// inputs are the same in every pass. The observe pass builds B at every cycle; a later pass that
// needs only B's outputs (the poison pass, to tell NaN of the model's own arithmetic from poison
// read by a replay) takes the observe pass's instead of building B again: on dsv4 32x1024, whose
// replays hold NaN at every cycle, that was three model builds, 5 s of a 50 s run. Only outputs
// of equal inputs are taken (a forward that wrote into its static inputs falls back to building
// B), and never on a rollout rank, whose B comes through the tensor-parallel contract and whose
// refits come from the trainer. The observe pass's B is also the better truth here: a B built in
// the poison pass could read poison left in freed memory itself.
void Driver::keep_reference_outputs(int cycle, std::int64_t batch_size, const TensorList& inputs,
                                    const TensorList& outputs) {
  KeptReference kept;
  for (const auto& t : inputs) kept.inputs.push_back(t.defined() ? t.clone() : t);
  for (const auto& t : outputs) kept.outputs.push_back(t.defined() ? t.clone() : t);
  m_reference_outputs[{cycle, batch_size}] = std::move(kept);
}

const TensorList* Driver::kept_reference_outputs(int cycle, std::int64_t batch_size, const TensorList& inputs) const {
  auto it = m_reference_outputs.find({cycle, batch_size});
  if (it == m_reference_outputs.end() || it->second.inputs.size() != inputs.size()) return nullptr;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const torch::Tensor& a = it->second.inputs[i];
    const torch::Tensor& b = inputs[i];
    if (a.defined() != b.defined()) return nullptr;
    if (!a.defined()) continue;
    if (a.scalar_type() != b.scalar_type() || a.device() != b.device() || a.sizes() != b.sizes() || !a.equal(b)) {
      return nullptr;
    }
  }
  return &it->second.outputs;
}

void Driver::on_hook(const void* module, std::string_view hook) {
  if (m_current) m_current->hook(module, hook);
}

std::size_t Driver::open_span(std::string pass, std::string phase, int cycle, std::int64_t batch_size) {
  Span span;
  span.pass = std::move(pass);
  span.phase = std::move(phase);
  span.cycle = cycle;
  span.batch_size = batch_size;
  span.start = std::chrono::duration<double>(Clock::now() - m_start).count();
  m_record.spans.push_back(std::move(span));
  return m_record.spans.size() - 1;
}

void Driver::setup() {
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
  // The stream-order pass comes last: it seeds the global RNG before each of its loads.
  for (Pass p : {Pass::validate, Pass::observe, Pass::idempotence, Pass::census, Pass::poison,
                 Pass::coverage, Pass::growth, Pass::stream_order}) {
    if (needed.count(p)) m_passes.push_back(p);
  }
}

bool Driver::run_pass(Pass pass) {
  support::release_free_memory();  // the last pass's models (Note [Freed memory stays resident])
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
  // A rollout rank whose observe pass stopped before its last refit still takes the trainer's
  // remaining ones, so that the trainer's collectives complete.
  if (pass == Pass::observe) drain_transport(pass);
  try {
    run.fire_scenario_end();
  } catch (const std::exception& e) {
    m_record.status = Status::crashed;
    m_record.reason = fmt::format("probe failed at the end of the {} pass: {}", to_string(pass), what_of(e));
    go_on = false;
  }
  m_current = nullptr;
  close_span(span);
  // What each probe's callbacks cost in this pass (the probes' share of the pass's seconds).
  for (const auto& [probe, seconds] : run.probe_seconds()) {
    Measurement pm;
    pm.tag = fmt::format("gc/pass/{}/probe/{}/seconds", to_string(pass), probe->name());
    pm.value = seconds;
    pm.unit = "s";
    pm.phase = "scenario";
    pm.pass = to_string(pass);
    m_record.measurements.push_back(std::move(pm));
  }
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

// Note [Distributed scenarios]: whatever stopped this rank's observe pass, the rest of the refit
// under way and every later one are taken (a no-op when all were read).
void Driver::drain_transport(Pass pass) {
  if (!m_options.transport || m_drained) return;
  m_drained = true;
  try {
    m_options.transport->drain_from(m_received_upto + 1);
  } catch (const std::exception& e) {
    Finding f;
    f.probe = "driver";
    f.subject = "weight transfer";
    f.message = fmt::format("this rank stopped at refit cycle {} and could not take the rest of the trainer's "
                            "refits: {}",
                            m_received_upto, what_of(e));
    add_finding(std::move(f), pass, Phase::refit);
  }
}

bool Driver::stopped_as_expected(Pass pass, const PassRun& run, const std::string& message) {
  if (m_scenario.expect_error.empty() || message.find(m_scenario.expect_error) == std::string::npos) {
    return false;
  }
  if (pass == Pass::observe) {
    m_record.reason = fmt::format("stopped as expected in phase {} (cycle {}): {}",
                                  to_string(run.phase()), run.cycle(), message);
  }
  return true;
}

void Driver::expected_error_missing(const PassRun& run) {
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

}  // namespace graphcheck::engine

namespace graphcheck {

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
  // A distributed scenario as a whole goes to the front that owns process groups; each of its
  // rollout ranks comes back here with its RankContext (Note [Distributed scenarios]).
  if (scenario.distributed && !options.rank) {
    if (const DistributedRunner runner = engine::distributed_runner()) {
      try {
        return runner(scenario, options, progress);
      } catch (const std::exception& e) {
        ScenarioRecord record;
        record.name = scenario.name;
        record.file = scenario.file;
        record.fixture = scenario.fixture;
        record.status = Status::crashed;
        record.reason = fmt::format("harness failure launching the ranks of a distributed scenario: {}", e.what());
        return record;
      }
    }
    ScenarioRecord record;
    record.name = scenario.name;
    record.file = scenario.file;
    record.fixture = scenario.fixture;
    record.status = Status::error;
    record.reason = fmt::format(
        "{}: a distributed scenario (world_size {}) runs its ranks on torch.distributed process groups, which "
        "come from Python: run it with `python -m graphcheck run {}` (or under torchrun)",
        scenario.file, scenario.distributed->world_size, scenario.file);
    return record;
  }
  try {
    return engine::Driver(scenario, options, progress).run();
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
