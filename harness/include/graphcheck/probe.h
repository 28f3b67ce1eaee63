#pragma once
// Probes observe the lifecycle and write findings and measurements into the scenario's record.
// The driver calls begin events in probe order and end events in reverse order, so probes nest
// like RAII guards. Probes never talk to reporters.

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "graphcheck/backend.h"
#include "graphcheck/model.h"
#include "graphcheck/record.h"
#include "graphcheck/scenario.h"

namespace graphcheck {

enum class Phase { construct, load, pwal, warmup, capture, replay, compare, refit };
[[nodiscard]] const char* to_string(Phase phase);

struct PhaseEvent {
  Phase phase = Phase::construct;
  int cycle = 0;                // 0: initial load; k >= 1: refit cycle k
  std::int64_t batch_size = 0;  // warmup, capture, replay, compare
};

struct LoadEvent : PhaseEvent {
  LoadFormat format = LoadFormat::checkpoint;
  bool refit = false;
  std::string source;               // "checkpoint 'path'"
  std::string bucket;               // a refit streamed in named buckets: this load's bucket
  std::set<std::string> loaded;     // end only: names load_weights() reported
  // End only, checkpoint loads: every tensor the stream delivered (the harness's copies, in the
  // checkpoint layout), in stream order.
  std::vector<NamedTensor> streamed;
};

// One write of the dummy loader into one tensor.
struct InitWriteEvent {
  std::string name;  // dotted name of the tensor written
  torch::Tensor tensor;
};

struct CaptureEvent : PhaseEvent {
  const CapturedGraph* graph = nullptr;  // end only
};

struct ReplayEvent : PhaseEvent {
  const CapturedGraph* graph = nullptr;
  torch::Tensor replay_output;  // end only: the graph's static output buffer (not a copy)
};

// After a replay: the same input run eagerly through the captured model A.
struct CompareEvent : PhaseEvent {
  const CapturedGraph* graph = nullptr;
  torch::Tensor input;
  torch::Tensor replay_output;
  torch::Tensor eager_output;  // end only
};

struct HookEvent {
  std::string module_path;  // "" for the top-level module, else "layers.0"
  std::string hook;
  Phase phase = Phase::construct;  // the phase it ran in
  int cycle = 0;
};

// What a probe sees of the running scenario. Implemented by the driver.
class RunContext {
 public:
  virtual ~RunContext() = default;
  [[nodiscard]] virtual const Scenario& scenario() const = 0;
  [[nodiscard]] virtual LifecycleModel& model() = 0;
  [[nodiscard]] virtual const GraphBackend& backend() const = 0;
  [[nodiscard]] virtual std::vector<CapturedGraph*> graphs() = 0;
  // Model B's forward. B: constructed fresh and loaded in one go with the weights A should hold
  // now (the initial checkpoint, or the same dummy fill, overlaid with every refit so far), then
  // PWAL; built once per cycle. Model failures are reported like A's (not a crash) and B's hook
  // announcements are kept out of the ledger.
  [[nodiscard]] virtual torch::Tensor reference_forward(const torch::Tensor& input) = 0;
  // Model B's live tensors (live_tensors()), by name: what A's tensors should hold now.
  [[nodiscard]] virtual std::vector<NamedTensor> reference_tensors() = 0;
  // A fresh model loaded like B (not cached): for checks that must not disturb model A.
  [[nodiscard]] virtual std::unique_ptr<LifecycleModel> construct_loaded_model() = 0;
  // Runs process_weights_after_loading() on `model` (hooks unreported, failures as model
  // failures).
  virtual void run_pwal(LifecycleModel& model) = 0;
  // Another instance of the scenario's model with `config` (hooks unreported, requires_grad off).
  [[nodiscard]] virtual std::unique_ptr<LifecycleModel> construct_model(const ModelConfig& config) = 0;
  // Every module path of model A: "(model)", "(root)", then module()'s submodules ("layers.0").
  [[nodiscard]] virtual std::vector<std::string> module_paths() = 0;
  // Writing results.
  virtual void add_finding(Finding finding) = 0;
  virtual void add_measurement(Measurement measurement) = 0;

  // Shorthands stamped with the event's phase, cycle and batch size.
  void fail(std::string probe, const PhaseEvent& event, std::string subject, std::string message,
            std::vector<std::pair<std::string, std::string>> evidence = {}) {
    Finding f;
    f.probe = std::move(probe);
    f.phase = to_string(event.phase);
    f.cycle = event.cycle;
    f.batch_size = event.batch_size;
    f.subject = std::move(subject);
    f.message = std::move(message);
    f.evidence = std::move(evidence);
    add_finding(std::move(f));
  }
  void measure(const PhaseEvent& event, std::string tag, double value, std::string unit) {
    Measurement m;
    m.tag = std::move(tag);
    m.value = value;
    m.unit = std::move(unit);
    m.phase = to_string(event.phase);
    m.cycle = event.cycle;
    m.batch_size = event.batch_size;
    add_measurement(std::move(m));
  }
};

// Every event, declared in firing order. Implement all of them, or derive from EmptyProbe.
class Probe {
 public:
  virtual ~Probe() = default;
  [[nodiscard]] virtual std::string name() const = 0;

  // Before the model is constructed.
  virtual void on_scenario_begin(RunContext& ctx) = 0;
  // Around the model's construction (model B's construction fires no events).
  virtual void on_construct_begin(RunContext& ctx, const PhaseEvent& event) = 0;
  virtual void on_construct_end(RunContext& ctx, const PhaseEvent& event) = 0;
  // Around load_weights() (checkpoint) or the dummy fill, for the initial load and each refit.
  virtual void on_load_begin(RunContext& ctx, const LoadEvent& event) = 0;
  // During a dummy load, once for every tensor write the loader makes.
  virtual void on_init_write(RunContext& ctx, const InitWriteEvent& event) = 0;
  virtual void on_load_end(RunContext& ctx, const LoadEvent& event) = 0;
  // Around process_weights_after_loading(), after every load.
  virtual void on_pwal_begin(RunContext& ctx, const PhaseEvent& event) = 0;
  virtual void on_pwal_end(RunContext& ctx, const PhaseEvent& event) = 0;
  // Around the eager warm-up forward at one batch size, before any capture.
  virtual void on_warmup_begin(RunContext& ctx, const PhaseEvent& event) = 0;
  virtual void on_warmup_end(RunContext& ctx, const PhaseEvent& event) = 0;
  // Around the capture of one graph (one per batch size).
  virtual void on_capture_begin(RunContext& ctx, const CaptureEvent& event) = 0;
  virtual void on_capture_end(RunContext& ctx, const CaptureEvent& event) = 0;
  // Around one replay of one graph: after the initial capture and after every refit.
  virtual void on_replay_begin(RunContext& ctx, const ReplayEvent& event) = 0;
  virtual void on_replay_end(RunContext& ctx, const ReplayEvent& event) = 0;
  // Around the eager forward of model A on the replayed input (right after each replay).
  virtual void on_compare_begin(RunContext& ctx, const CompareEvent& event) = 0;
  virtual void on_compare_end(RunContext& ctx, const CompareEvent& event) = 0;
  // Around one refit cycle: the model's stage_for_refit(), one load per bucket (one when the
  // refit is not bucketed), then PWAL, all nested inside these two events.
  virtual void on_refit_begin(RunContext& ctx, const PhaseEvent& event) = 0;
  virtual void on_refit_end(RunContext& ctx, const PhaseEvent& event) = 0;
  // Whenever model code announces a hook (GRAPHCHECK_HOOK), in any phase.
  virtual void on_hook(RunContext& ctx, const HookEvent& event) = 0;
  // After everything, also when the scenario stopped early on an exception.
  virtual void on_scenario_end(RunContext& ctx) = 0;
};

// No-op defaults.
class EmptyProbe : public Probe {
 public:
  void on_scenario_begin(RunContext&) override {}
  void on_construct_begin(RunContext&, const PhaseEvent&) override {}
  void on_construct_end(RunContext&, const PhaseEvent&) override {}
  void on_load_begin(RunContext&, const LoadEvent&) override {}
  void on_init_write(RunContext&, const InitWriteEvent&) override {}
  void on_load_end(RunContext&, const LoadEvent&) override {}
  void on_pwal_begin(RunContext&, const PhaseEvent&) override {}
  void on_pwal_end(RunContext&, const PhaseEvent&) override {}
  void on_warmup_begin(RunContext&, const PhaseEvent&) override {}
  void on_warmup_end(RunContext&, const PhaseEvent&) override {}
  void on_capture_begin(RunContext&, const CaptureEvent&) override {}
  void on_capture_end(RunContext&, const CaptureEvent&) override {}
  void on_replay_begin(RunContext&, const ReplayEvent&) override {}
  void on_replay_end(RunContext&, const ReplayEvent&) override {}
  void on_compare_begin(RunContext&, const CompareEvent&) override {}
  void on_compare_end(RunContext&, const CompareEvent&) override {}
  void on_refit_begin(RunContext&, const PhaseEvent&) override {}
  void on_refit_end(RunContext&, const PhaseEvent&) override {}
  void on_hook(RunContext&, const HookEvent&) override {}
  void on_scenario_end(RunContext&) override {}
};

// ---- registry -------------------------------------------------------------------------------

using ProbeFactory = std::function<std::unique_ptr<Probe>()>;

class ProbeRegistry {
 public:
  struct Entry {
    std::string name;
    std::string description;
    ProbeFactory factory;
  };
  static ProbeRegistry& get();
  bool add(std::string name, std::string description, ProbeFactory factory);
  [[nodiscard]] const Entry* find(const std::string& name) const;
  [[nodiscard]] std::vector<std::string> names() const;

 private:
  std::map<std::string, std::unique_ptr<Entry>> m_entries;
};

}  // namespace graphcheck

#define GRAPHCHECK_PROBE_CONCAT_(a, b) a##b
#define GRAPHCHECK_PROBE_CONCAT(a, b) GRAPHCHECK_PROBE_CONCAT_(a, b)
#define GRAPHCHECK_REGISTER_PROBE(name, description, type)                            \
  static const bool GRAPHCHECK_PROBE_CONCAT(graphcheck_probe_registered_, __LINE__) = \
      ::graphcheck::ProbeRegistry::get().add(name, description,                       \
                                             [] { return std::make_unique<type>(); })
