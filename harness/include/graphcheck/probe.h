#pragma once
// Probes observe the lifecycle and write findings and measurements into the scenario's record.
// The driver calls begin events in probe order and end events in reverse order, so probes nest
// like RAII guards. Probes never talk to reporters. Each probe runs in the passes it registers
// for (a fresh instance per pass). Probes only observe, in every pass: what disturbs a run (a
// second PWAL, poison, perturbation, extra replays, growth reruns) is the work of a driver-owned
// pass, which hands the probe its evidence as an event (on_idempotence_checked, ...).

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "graphcheck/engine/backend.h"
#include "graphcheck/model.h"
#include "graphcheck/engine/record.h"
#include "graphcheck/engine/scenario.h"
#include "graphcheck/engine/transport.h"

namespace graphcheck {

enum class Phase { construct, load, pwal, warmup, capture, replay, compare, refit, sleep, wake };
[[nodiscard]] const char* to_string(Phase phase);

// Passes (DESIGN §2.2, engine v2). A scenario runs as an *observe* pass, in which probes only
// read, plus the disturbing passes its checks need, each on its own model instance and lifecycle,
// so that nothing one check does reaches another check's verdict:
//   validate     construct, load, PWAL, warm-up, capture; then replays on fresh inputs vs eager
//                and the noise floor (repeated eager runs); no refits
//   idempotence  loads and PWAL of every cycle, no forwards; a second PWAL after each
//   census       loads and PWAL of every cycle, no forwards; every element a load should write
//                is poisoned before it (the write census)
//   poison       the whole lifecycle with poisoned staging, streamed and orphaned storages
//   coverage     the whole lifecycle; live tensors perturbed in place around replays
//   growth       no lifecycle: dummy loads of models grown through a config key
//   stream_order no lifecycle: one load (and PWAL) repeated with the same weights streamed in
//                other orders, against the canonical order
enum class Pass { observe, validate, idempotence, census, poison, coverage, growth, stream_order };
[[nodiscard]] const char* to_string(Pass pass);

struct PhaseEvent {
  Phase phase = Phase::construct;
  int cycle = 0;                // 0: initial load; k >= 1: step k of the cycles (CycleStep)
  std::int64_t batch_size = 0;  // warmup, capture, replay, compare
};

// Sleep mode (vLLM's): at sleep the driver offloads what the level keeps (level 1: every live
// tensor; level 2: the registered buffers, as the engine saves them) to host memory and discards
// every storage of the model and of the graphs' reads (poison for float and byte dtypes, zeros
// for the others); at wake it copies the saved bytes back into the same storages. A level-2 wake
// is followed by a reload (refit events) in the same cycle.
struct SleepEvent : PhaseEvent {
  int level = 1;
};

// One step of the cycles as the driver runs it: each `cycles:` entry is one step, except a bucket
// sweep, which is one step per split position. Step k is cycle k of the events.
struct CycleStep {
  struct Bucket {
    std::string name;
    std::vector<std::string> only;  // name prefixes; empty with `names` empty: every tensor
    std::set<std::string> names;    // exact checkpoint names (a sweep's buckets)
  };
  int cycle = 0;
  CycleKind kind = CycleKind::refit;
  int sleep_level = 0;
  bool loads = true;        // streams weights (a refit, a reload, a level-2 wake)
  bool held_weights = false;  // streams the weights model A holds (a reload, a level-2 wake without seed)
  std::uint64_t seed = 0;   // the weights' seed when it streams new ones
  std::vector<std::string> prefixes;  // what it streams over all buckets (empty: every tensor)
  std::vector<Bucket> buckets;        // empty: one load of `prefixes`
  bool pwal_per_bucket = false;
  std::string label;  // "refit cycle 2", "refit cycle 3 (bucket sweep: split 2 of 5, after 'x')"
  std::string where;  // the scenario's cycle entry, file:line:column
};

struct LoadEvent : PhaseEvent {
  LoadFormat format = LoadFormat::checkpoint;
  bool refit = false;
  std::string source;               // "checkpoint 'path'"
  std::string bucket;               // a refit streamed in named buckets: this load's bucket
  // Checkpoint loads: the checkpoint names this load will stream (the whole checkpoint, or the
  // refit's / bucket's prefixes), known at begin. Dummy loads: empty (every tensor of
  // checkpoint_layout() is expected).
  std::vector<std::string> expected;
  std::set<std::string> loaded;     // end only: the names load_weights() reported
  // End only, checkpoint loads: every tensor the stream delivered (the harness's copies, in the
  // checkpoint layout, by checkpoint name), in stream order.
  std::vector<NamedTensor> streamed;
};

// A read of a captured graph, resolved against the live tensors at capture.
struct ResolvedRead {
  GraphRead read;
  std::string name;          // the live tensor it fell in ("": undeclared by the model)
  std::int64_t offset = 0;   // bytes from that tensor's first byte
  bool whole = false;        // the read covers exactly that tensor
};

// One captured graph, as probes see it.
struct GraphView {
  const CapturedGraph* graph = nullptr;
  std::int64_t batch_size = 0;
  std::vector<ResolvedRead> reads;
};

// A live tensor an address range falls in (RunContext::resolve()).
struct AddressHit {
  std::string name;
  torch::Tensor tensor;
  std::int64_t offset = 0;  // bytes from the tensor's first byte
  bool whole = false;       // the range is exactly the tensor
};

struct CaptureEvent : PhaseEvent {
  const GraphView* graph = nullptr;  // end only
};

struct ReplayEvent : PhaseEvent {
  const GraphView* graph = nullptr;
  TensorList replay_outputs;  // end only: the graph's static output buffers (not copies)
  // End only, poison pass, when a floating replay output holds NaN: model B's forward on the
  // graph's static inputs (else empty).
  TensorList reference_outputs;
};

// After a replay: the same inputs run eagerly through the captured model A, and through model B.
// For an eager-only batch size (capture.eager_batch_sizes, "prefill") there is no graph: graph is
// nullptr and replay_outputs is empty; these compares come before the graphs' in each cycle.
struct CompareEvent : PhaseEvent {
  const GraphView* graph = nullptr;
  TensorList inputs;
  TensorList replay_outputs;     // copies
  TensorList eager_outputs;      // end only: eager(A)
  TensorList reference_outputs;  // end only: eager(B), computed by the driver outside the windows
  // The differential's tolerance (0 on an exact backend) and the noise floor it came from
  // (repeated eager runs of A, measured in the validate pass; -1 when not measured).
  double tolerance = 0;
  double noise_floor = -1;
  // Observe pass, after a refit whose replay differs from eager(A): what a capture made now would
  // bake differently (host values, the op sequence); `supported` false when not measured.
  RecaptureDiff recapture;
};

struct HookEvent {
  std::string module_path;  // "" for the top-level module, else "layers.0"
  std::string hook;
  Phase phase = Phase::construct;  // the phase it ran in
  int cycle = 0;
};

// ---- evidence of the disturbing passes -------------------------------------------------------
// Probes observe; passes act (DESIGN §2.2). What disturbs a run (a second PWAL, poison fills, the
// coverage perturbation, capture-validation replays, growth reruns) is the driver's work, done in
// the pass of the check that needs it; the probe receives what was done and measured as one of the
// events below and judges it.

// A tensor's identity and content at one moment (IdempotenceEvent).
struct TensorState {
  const void* address = nullptr;  // data_ptr(); nullptr without storage
  std::vector<std::int64_t> sizes;
  std::uint64_t fingerprint = 0;  // xxh3 of the bytes
};

// Idempotence pass, after every PWAL of the loader: the driver ran PWAL a second time.
struct IdempotenceEvent : PhaseEvent {
  std::map<std::string, TensorState> before;  // model A's live tensors before the second PWAL
  std::map<std::string, TensorState> after;   // and after it
};

// Stream-order pass (no lifecycle): fresh models loaded with the same weights streamed in other
// orders (reversed, shuffled, by name, in buckets), each followed by its PWAL, against one loaded
// in the canonical order (the checkpoint's). The initial load when it reads a checkpoint, else the
// first refit after the dummy load.
struct StreamOrderDelta {
  std::string tensor;            // a live tensor of the model
  std::string detail;            // "3 of 16 elements, max abs 0.5", "Float [4] vs Float [8]"
  std::vector<std::string> streamed_near;  // streamed names of its module, in the canonical order
};
struct StreamOrderVariant {
  std::string order;              // "reversed", "shuffled (seed 7)", "by name", "in 4 buckets, last first"
  std::vector<std::string> names;  // the stream, in this order
  std::vector<StreamOrderDelta> differing;  // live tensors that differ from the canonical load's
  std::size_t calls = 1;                     // the load_weights() calls the stream was cut into
};
struct StreamOrderEvent : PhaseEvent {
  std::string load;                    // "the initial load", "refit cycle 1"
  std::string source;                  // what was streamed
  std::vector<std::string> canonical;  // the canonical order
  std::vector<StreamOrderVariant> variants;
};

// Observe pass of a rollout rank of a distributed scenario, right after on_load_end of each refit
// the rank received from the trainer: what the trainer says it sent (finish_weight_update's
// manifest) against what this rank received, by fingerprint.
struct TransferEvent : PhaseEvent {
  std::string source;                   // "refit cycle 1 from trainer rank 0 (packed, 3 buckets)"
  bool checkpoint_format = true;        // is_checkpoint_format as the trainer sent it
  std::vector<SentTensor> sent;         // the trainer's manifest, in its order
  std::map<std::string, std::uint64_t> received;  // what arrived here, by name
  std::vector<std::string> unknown_kernel_names;  // kernel format: names no live tensor has
  // Kernel format: "name (live [16, 32], sent [32, 32])" for a live tensor of another shape.
  std::vector<std::string> kernel_shape_mismatches;
  std::vector<std::string> unread;  // announced and sent, but load_weights() returned before them
};

// Census pass, right after on_load_begin of every load: the driver poisoned every element the
// load is expected to write (poison.h).
struct CensusFillEvent : PhaseEvent {
  const LoadEvent* load = nullptr;
  // What was poisoned: each entry's region detached (the memory, not the tensor object).
  std::vector<CheckpointEntry> poisoned;
  std::int64_t bytes = 0;
};

// Poison pass: what the driver poisoned, and when.
struct PoisonFillEvent : PhaseEvent {
  enum class Kind {
    before_refit,  // right after on_refit_begin (poison.poison_before_refit)
    staged,        // right after on_load_begin of a refit's first load (poison.staged)
    orphans,       // right after on_refit_end: read-set storages no live tensor references
  };
  Kind kind = Kind::before_refit;
  std::vector<std::string> names;  // before_refit: checkpoint names poisoned
  std::map<std::string, torch::Tensor> staged;  // staged: checkpoint name -> region poisoned
  std::vector<std::string> unused_patterns;     // staged: poison.staged patterns matching nothing
  std::vector<std::string> orphans;  // orphans: "'name', dtype [shape] at 0x..." per storage
  std::int64_t tensors = 0;
  std::int64_t bytes = 0;
};

// Poison pass, right after on_replay_end, when a floating replay output holds NaN: model B's
// forward on the graph's static inputs, to tell poison from NaN the model computes itself.
struct ReplayNanEvent : PhaseEvent {
  const GraphView* graph = nullptr;
  TensorList replay_outputs;     // the graph's static output buffers (not copies)
  TensorList reference_outputs;  // eager(B) on the same inputs
};

// Coverage pass, right after on_compare_end of every graph's compare: the driver perturbed live
// tensors in place around replays and eager runs (group bisection when replay = eager before any
// perturbation, else one tensor at a time) and restored them.
struct CoverageEvent : PhaseEvent {
  const GraphView* graph = nullptr;
  std::vector<std::string> uncovered;    // eager changed, replay did not
  std::vector<std::string> replay_only;  // replay changed, eager did not
  std::vector<std::string> partial;      // both changed, differently (baseline agreed)
  std::string method;                    // "group bisection", "one tensor at a time (...)"
  std::int64_t replays = 0;
  std::int64_t tensors = 0;  // candidates (each storage region once)
};

// Validate pass, right after on_capture_end of every graph: the graph replayed on fresh inputs
// and eager(A) on the same inputs. The driver stops after the first input whose replay differs
// from eager beyond the tolerance (one that shows it is enough).
struct ValidationReplay {
  std::uint64_t seed = 0;  // make_inputs seed
  double scale = 1;        // floating inputs scaled by
  TensorList replay_outputs;
  TensorList eager_outputs;
  double tolerance = 0;  // the differential's, per output dtype and magnitude, the largest
  // A fresh recording of the forward on these inputs against the capture's (Note [Recapture
  // signature] in the emulated backend); `supported` false when not made.
  RecaptureDiff recapture;
};
struct ValidationEvent : PhaseEvent {
  const GraphView* graph = nullptr;
  std::vector<ValidationReplay> replays;
};

// Validate pass, right after on_warmup_end of each captured batch size: two eager runs of model A
// on the same input, compared. They must repeat: their difference is the noise floor the
// differential's tolerance is built on. `allowed`: what the backend's arithmetic may make them
// differ by (0 on an exact backend; else the output dtype's rounding at the outputs' magnitude).
struct NoiseEvent : PhaseEvent {
  TensorList first, second;  // the two runs' outputs
  double max_abs = 0;        // the largest element difference (the noise floor)
  double allowed = 0;
  // Where a forward that did not repeat (max_abs > allowed) first parts between two more runs:
  // the top-level op ("aten::bernoulli_", with its Python line where it has one) whose outputs
  // or whose place in the forward differ, and its position (1-based) in the forward. Empty, 0:
  // the two runs parted nowhere (an occasional difference).
  std::string first_divergence;
  std::size_t first_divergence_op = 0;
};

// Growth pass, right after on_scenario_begin: dummy loads (the model's load_dummy_weights()) of
// models grown through a config key, writes counted per tensor (one per storage): in-place ops by
// the version counter, writes past libtorch by content.
struct GrowthPoint {
  std::int64_t value = 0;
  std::int64_t writes = 0;
  std::int64_t tensors = 0;
  double ms = 0;
};
struct GrowthEvent : PhaseEvent {
  std::string key;
  std::vector<GrowthPoint> points;
};

// What a probe sees of the running scenario. Implemented by the driver. In the observe pass it
// is read-only in every pass: probes read events, tensors and the graphs' reads and write findings
// and measurements; they never construct models or call model code, and they must not write to
// the tensors they are shown (what disturbs a run is a pass's work: see the events above).
class RunContext {
 public:
  virtual ~RunContext() = default;
  [[nodiscard]] virtual const Scenario& scenario() const = 0;
  [[nodiscard]] virtual const GraphBackend& backend() const = 0;
  [[nodiscard]] virtual MemoryMeter& memory_meter() = 0;
  [[nodiscard]] virtual Pass pass() const = 0;
  // The run's seed: --seed when given, else the scenario's `seed`.
  [[nodiscard]] virtual std::uint64_t seed() const = 0;
  // The noise floor of eager(A) at a batch size: max |difference| between repeated eager runs on
  // the same input, measured in the validate pass; -1 when not measured.
  [[nodiscard]] virtual double noise_floor(std::int64_t batch_size) const = 0;
  // Step `cycle` (>= 1) of the cycles as run so far; nullptr for 0 or a step not begun.
  [[nodiscard]] virtual const CycleStep* cycle_step(int cycle) const = 0;
  // "after the initial load", "after refit cycle 2", "after cycle 3 (sleep level 2, wake,
  // reload)": for messages.
  [[nodiscard]] std::string after_cycle(int cycle) const;
  // The graphs captured so far in this pass, in capture order.
  [[nodiscard]] virtual const std::vector<GraphView>& graphs() const = 0;
  // Model A's tensors now: live_tensors(), checkpoint_tensors(), checkpoint_layout().
  [[nodiscard]] virtual std::vector<NamedTensor> live_tensors() = 0;
  [[nodiscard]] virtual std::vector<NamedTensor> checkpoint_tensors() = 0;
  [[nodiscard]] virtual std::vector<CheckpointEntry> checkpoint_layout() = 0;
  [[nodiscard]] virtual const TensorAttrs* tensor_attrs(const torch::Tensor& tensor) const = 0;
  // What each live tensor of model A is, by name: "parameter", "persistent buffer",
  // "non-persistent buffer" or "extra tensor" (extra_tensors()).
  [[nodiscard]] virtual std::map<std::string, std::string> tensor_kinds() = 0;
  [[nodiscard]] virtual std::vector<ExpectedHook> expected_hooks() const = 0;
  // Every module path of model A: "(model)", "(root)", then module()'s submodules ("layers.0").
  [[nodiscard]] virtual std::vector<std::string> module_paths() = 0;
  // The live tensor of model A an address range falls in now (interior pointers included), or
  // none. `bytes` 0: just the address.
  [[nodiscard]] virtual std::optional<AddressHit> resolve(const void* address, std::size_t bytes) = 0;
  // Model B's live tensors, by name: what A's tensors should hold now. Built by the driver once
  // per cycle, outside every measurement window. Empty when the pass builds no B.
  [[nodiscard]] virtual std::vector<NamedTensor> reference_tensors() = 0;
  // Writing results. The driver stamps each finding with the pass.
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

// Every event, declared in firing order. Implement all of them, or derive from EmptyProbe. A probe
// that throws (anything but the driver's own model failures) becomes a finding of probe
// "harness" naming it and the event; the scenario goes on.
class Probe {
 public:
  virtual ~Probe() = default;
  [[nodiscard]] virtual std::string name() const = 0;

  // Before the model is constructed.
  virtual void on_scenario_begin(RunContext& ctx) = 0;
  // Around the model's construction (model B's construction fires no events).
  virtual void on_construct_begin(RunContext& ctx, const PhaseEvent& event) = 0;
  virtual void on_construct_end(RunContext& ctx, const PhaseEvent& event) = 0;
  // Around load_weights() (checkpoint) or load_dummy_weights(), for the initial load and each
  // refit (each bucket).
  virtual void on_load_begin(RunContext& ctx, const LoadEvent& event) = 0;
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
  // Around the eager forward of model A on the replayed inputs (right after each replay); at the
  // end also eager(B), computed outside the window.
  virtual void on_compare_begin(RunContext& ctx, const CompareEvent& event) = 0;
  virtual void on_compare_end(RunContext& ctx, const CompareEvent& event) = 0;
  // Around one refit cycle: the model's stage_for_refit(), one load per bucket (one when the
  // refit is not bucketed), then PWAL, all nested inside these two events.
  virtual void on_refit_begin(RunContext& ctx, const PhaseEvent& event) = 0;
  virtual void on_refit_end(RunContext& ctx, const PhaseEvent& event) = 0;
  // Around the sleep and the wake of a sleep cycle (a level-2 wake's reload follows as a refit).
  virtual void on_sleep_begin(RunContext& ctx, const SleepEvent& event) = 0;
  virtual void on_sleep_end(RunContext& ctx, const SleepEvent& event) = 0;
  virtual void on_wake_begin(RunContext& ctx, const SleepEvent& event) = 0;
  virtual void on_wake_end(RunContext& ctx, const SleepEvent& event) = 0;
  // Whenever model code announces a hook (GRAPHCHECK_HOOK), in any phase.
  virtual void on_hook(RunContext& ctx, const HookEvent& event) = 0;

  // The disturbing passes' evidence (one event each, in probe order), in the order they can fire.
  // No-op by default: only the probes of those passes need them.
  // Growth pass, right after on_scenario_begin (no lifecycle follows).
  virtual void on_growth_measured(RunContext&, const GrowthEvent&) {}
  // Census pass, right after on_load_begin, before the load.
  virtual void on_census_filled(RunContext&, const CensusFillEvent&) {}
  // Idempotence pass, right after on_pwal_end.
  virtual void on_idempotence_checked(RunContext&, const IdempotenceEvent&) {}
  // Validate pass, right after on_capture_end.
  virtual void on_validation_replays(RunContext&, const ValidationEvent&) {}
  // Poison pass, right after on_replay_end, when a replay output holds NaN.
  virtual void on_replay_nan(RunContext&, const ReplayNanEvent&) {}
  // Coverage pass, right after on_compare_end of a graph.
  virtual void on_coverage_measured(RunContext&, const CoverageEvent&) {}
  // Poison pass: right after on_refit_begin (before_refit), after on_load_begin of a refit's
  // first load (staged), after on_refit_end (orphans).
  virtual void on_poison_filled(RunContext&, const PoisonFillEvent&) {}
  // Validate pass, right after on_warmup_end of each captured batch size.
  virtual void on_noise_measured(RunContext&, const NoiseEvent&) {}
  // Stream-order pass, right after on_scenario_begin (no lifecycle follows).
  virtual void on_stream_orders_compared(RunContext&, const StreamOrderEvent&) {}
  // Observe pass of a rollout rank, right after on_load_end of a refit it received.
  virtual void on_transfer_checked(RunContext&, const TransferEvent&) {}

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
  void on_sleep_begin(RunContext&, const SleepEvent&) override {}
  void on_sleep_end(RunContext&, const SleepEvent&) override {}
  void on_wake_begin(RunContext&, const SleepEvent&) override {}
  void on_wake_end(RunContext&, const SleepEvent&) override {}
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
    std::vector<Pass> passes;  // where it runs; its verdicts count only from these
  };
  static ProbeRegistry& get();
  bool add(std::string name, std::string description, ProbeFactory factory,
           std::vector<Pass> passes = {Pass::observe});
  [[nodiscard]] const Entry* find(const std::string& name) const;
  [[nodiscard]] std::vector<std::string> names() const;

 private:
  std::map<std::string, std::unique_ptr<Entry>> m_entries;
};

}  // namespace graphcheck

#define GRAPHCHECK_PROBE_CONCAT_(a, b) a##b
#define GRAPHCHECK_PROBE_CONCAT(a, b) GRAPHCHECK_PROBE_CONCAT_(a, b)
// An observer: runs in the observe pass only.
#define GRAPHCHECK_REGISTER_PROBE(name, description, type)                            \
  static const bool GRAPHCHECK_PROBE_CONCAT(graphcheck_probe_registered_, __COUNTER__) = \
      ::graphcheck::ProbeRegistry::get().add(name, description,                       \
                                             [] { return std::make_unique<type>(); })
// A probe that (also) runs in passes of its own: GRAPHCHECK_REGISTER_PROBE_IN("hooks", "...",
// HooksProbe, ::graphcheck::Pass::observe, ::graphcheck::Pass::idempotence).
#define GRAPHCHECK_REGISTER_PROBE_IN(name, description, type, ...)                        \
  static const bool GRAPHCHECK_PROBE_CONCAT(graphcheck_probe_registered_, __COUNTER__) =     \
      ::graphcheck::ProbeRegistry::get().add(name, description,                           \
                                             [] { return std::make_unique<type>(); }, \
                                             {__VA_ARGS__})
