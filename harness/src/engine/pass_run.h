#pragma once
// One pass of a scenario (PassRun): its own model A, graphs and model B, the probes of that pass
// and the fan-out of events to them; with what each pass runs of the lifecycle (PassSpec). Its
// code lives in engine/lifecycle.cpp, replay.cpp, sleep.cpp, models.cpp and pass_work.cpp.

#include <fmt/format.h>
#include <torch/types.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "address_index.h"
#include "engine/errors.h"
#include "engine/op_log.h"
#include "graphcheck/engine/backend.h"
#include "graphcheck/engine/driver.h"
#include "graphcheck/model.h"
#include "graphcheck/probe.h"
#include "probe_event_name.h"

namespace graphcheck::engine {

// What each pass runs of the lifecycle.
struct PassSpec {
  bool forwards = true;  // warm-up, capture (and with replays: replay + compare)
  bool replays = true;   // replay + compare after the initial load and every refit
  bool refits = true;
};

inline PassSpec spec_of(Pass pass) {
  switch (pass) {
    case Pass::observe:
    case Pass::poison:
    case Pass::coverage: return {true, true, true};
    case Pass::validate: return {true, false, false};
    case Pass::idempotence:
    case Pass::census: return {false, false, true};
    case Pass::growth:
    case Pass::stream_order: return {false, false, false};
  }
  return {};
}

class Driver;

// One pass of a scenario: its own model A, graphs and model B, and the probes of that pass.
class PassRun final : public RunContext {
 public:
  PassRun(Driver& driver, Pass pass, std::vector<Probe*> probes);

  void run();
  void fire_scenario_end() {
    if (m_started) fire(&Probe::on_scenario_end);
  }
  void hook(const void* module, std::string_view hook);
  // Seconds each probe's callbacks took in this pass, in probe order (gc/pass/<pass>/probe/<name>/seconds).
  [[nodiscard]] std::vector<std::pair<const Probe*, double>> probe_seconds() const {
    std::vector<std::pair<const Probe*, double>> out;
    for (const Probe* p : m_probes) {
      auto it = m_probe_seconds.find(p);
      out.emplace_back(p, it == m_probe_seconds.end() ? 0.0 : it->second);
    }
    return out;
  }
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
    std::vector<CheckpointEntry> layout =
        call_model(m_phase, "checkpoint_mapping()", [&] { return graphcheck::checkpoint_layout(*m_model); });
    annotate_shards(layout);
    return layout;
  }
  // On a rollout rank: each entry's part of the full checkpoint tensor (engine/distributed.cpp).
  void annotate_shards(std::vector<CheckpointEntry>& layout);
  [[nodiscard]] const TensorAttrs* tensor_attrs(const torch::Tensor& tensor) const override {
    return m_model ? m_model->catalog().attributes(tensor) : nullptr;
  }
  [[nodiscard]] std::map<std::string, std::string> tensor_kinds() override;
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
  [[nodiscard]] TensorList make_inputs(std::int64_t batch_size, std::uint64_t seed);
  // Copies: a model may return a preallocated output buffer that its next forward overwrites.
  // With `log`: the forward's top-level ops are logged into it (Note [Eager op log]).
  [[nodiscard]] TensorList eager(const TensorList& inputs, OpLogDigest* log = nullptr);
  void load_dummy(LifecycleModel& model, std::uint64_t seed);
  // Writes the inputs into the static buffers of graph `index`, replays, returns copies of the
  // outputs.
  [[nodiscard]] TensorList replay(std::size_t index, const TensorList& inputs);
  // Model B's forward (B: a fresh model loaded with the weights A should hold now).
  [[nodiscard]] TensorList reference_forward(const TensorList& inputs);
  void run_pwal(LifecycleModel& model);
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
    // A distributed refit as it arrives from the trainer (RefitTransport), read once.
    std::shared_ptr<RefitTransport::Incoming> incoming = nullptr;
    std::string label = {};  // `tensors`: what they are, for messages ("": the weights model A holds)
    bool kernel_format = false;  // a received refit that came in the kernel format
  };
  void lifecycle();
  void presynthesize();
  void release_record_pages();
  void run_cycles();
  CycleStep& new_step(const RefitSpec& spec);
  void run_step(const CycleStep& step);
  void sweep(const RefitSpec& spec);
  void refit_step(const CycleStep& step);
  void sleep_step(const CycleStep& step);
  LoadSource source_for(const CycleStep& step);
  void load(bool refit, const LoadSource& source, const CycleStep::Bucket& bucket, bool first_of_refit = false);
  void eager_compare(std::int64_t batch_size);
  // Two eager runs of A on `inputs`: the largest element difference. With `event`, the runs'
  // outputs and what the backend allows them to differ by go there too.
  double measure_noise(const TensorList& inputs, NoiseEvent* event = nullptr);
  void load_dummy();
  void check_loaded(const std::set<std::string>& streamed, const std::set<std::string>& loaded,
                    bool refit, const std::string& source);
  void pwal();
  void replay_all();
  void write_inputs(CapturedGraph& graph, const TensorList& inputs);
  LifecycleModel& reference_model();
  std::unique_ptr<LifecycleModel> build_loaded(const char* what);
  std::unique_ptr<LifecycleModel> construct_quiet(const char* what, const ModelConfig* config = nullptr);
  std::unique_ptr<LifecycleModel> construct(ModelConfig config, const char* what, bool unsharded = false);
  // The model that synthesizes checkpoints: unsharded (tp_rank 0 of 1) in a distributed scenario,
  // whose checkpoints are the full tensors the trainer sends.
  std::unique_ptr<LifecycleModel> construct_synthesis() {
    FlagScope quiet(m_quiet);
    return construct(scenario().config, "checkpoint synthesis", /*unsharded=*/true);
  }
  // ---- distributed scenarios (engine/distributed.cpp) ----
  // A rollout rank's model B: the truth (the full checkpoints of the initial load and of every
  // refit so far, as the trainer synthesizes them), each tensor's tensor-parallel shard copied
  // into its region, then PWAL; never the model's own loader.
  void load_by_contract(LifecycleModel& model, const char* what);
  // A refit that came in the kernel format: copied by live name, no load_weights(). Returns the
  // names that match no live tensor.
  struct KernelLoad {
    std::vector<std::string> unknown;     // names no live tensor has
    std::vector<std::string> mismatched;  // "name (live [16, 32], sent [32, 32])"
  };
  KernelLoad load_kernel_format(WeightStream& stream, LoadEvent& e);
  // After the initial load and every refit (observe pass): fingerprints of the tensors that must
  // be the same on every rank, for the cross-rank check made when the records are merged.
  void record_replicated();
  void check_transfer(const LoadEvent& e, const KernelLoad& kernel, const std::vector<std::string>& unread,
                      bool checkpoint_format);
  TensorList input_for(std::int64_t batch_size, int salt);
  void index_modules();
  std::string module_path(const void* module);
  // The disturbing passes' work (passes/passes.h), each followed by its evidence event.
  void census_fill(const LoadEvent& load);
  void poison_fill(PoisonFillEvent::Kind kind, const CycleStep& step);
  void idempotence_check();
  void validate_capture(std::size_t index, const CaptureEvent& capture);
  // The backend's recording of forward on `inputs` against graph `index` (RecaptureDiff).
  RecaptureDiff recapture(std::size_t index, const TensorList& inputs);
  void chosen_read(const GraphView& view, RecaptureDiff& d);  // Note [A read chosen at capture]
  // The validation inputs from this one on (the wide range: zeros, tiny, huge) are recorded afresh.
  static constexpr std::size_t kValidationRecaptureFrom = 4;
  void coverage(const std::vector<std::pair<std::size_t, CompareEvent>>& compares);
  void growth();
  void stream_order();
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
    ProbeTime timed(*this, p);
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

  // Adds the time of one delivery to its probe's (probe_seconds()). A probe's time includes what
  // its callback asked of the run (a replay, a model's forward), and the deliveries to other
  // probes that caused: a delivery inside another is not timed again, so the probes' times add up
  // to at most the pass's.
  class ProbeTime {
   public:
    ProbeTime(PassRun& run, const Probe* p) : m_run(run) {
      if (run.m_timed_probe != nullptr) return;
      m_seconds = &run.m_probe_seconds[p];  // a node of its own: the address stays
      run.m_timed_probe = p;
      m_start = Clock::now();
    }
    ~ProbeTime() {
      if (m_seconds == nullptr) return;
      *m_seconds += std::chrono::duration<double>(Clock::now() - m_start).count();
      m_run.m_timed_probe = nullptr;
    }
    ProbeTime(const ProbeTime&) = delete;
    ProbeTime& operator=(const ProbeTime&) = delete;

   private:
    PassRun& m_run;
    double* m_seconds = nullptr;
    Clock::time_point m_start;
  };

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
  // Validate pass: the op log of an eager forward on each capture's input, just before it
  // (Note [Eager op log]).
  std::map<std::int64_t, OpLogDigest> m_precapture_logs;
  std::vector<GraphView> m_views;
  // What model A should hold: the initial checkpoint (empty for a dummy load, which B repeats)
  // and every tensor streamed by the refits so far, by checkpoint name.
  std::map<std::string, torch::Tensor> m_initial_weights;
  std::map<std::string, torch::Tensor> m_refit_weights;
  // The checkpoint names in the order model A was first streamed them: model B streams in it too.
  std::vector<std::string> m_stream_order;
  std::set<std::string> m_stream_order_seen;
  std::unique_ptr<LifecycleModel> m_reference;
  int m_reference_cycle = -1;
  bool m_skip_refit_pwal = false;  // a kernel-format refit: the protocol runs no PWAL
  bool m_quiet = false;
  bool m_trailed = false;  // Note [Where a forward stops repeating]: once per pass
  std::map<const void*, std::string> m_module_paths;

  std::deque<CycleStep> m_steps;   // the cycles as run so far (stable addresses)
  std::vector<NamedTensor> m_held;  // a reload's weights: what model A holds, by checkpoint name
  Phase m_phase = Phase::construct;
  int m_cycle = 0;
  std::int64_t m_batch_size = 0;
  std::vector<Window> m_windows;
  double m_harness_seconds = 0;
  std::map<const Probe*, double> m_probe_seconds;  // ProbeTime
  const Probe* m_timed_probe = nullptr;            // the delivery being timed, if any
};

}  // namespace graphcheck::engine
