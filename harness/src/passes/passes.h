#pragma once
// The disturbing work of the passes (DESIGN §2.2: probes observe, passes act). The driver calls
// these at the point of the lifecycle each pass disturbs and hands the result to the pass's
// probes as an event (probe.h, "evidence of the disturbing passes"); the probes judge it and
// write the findings. Model code is reached only through the callbacks the driver passes in, so
// that its failures stay the driver's (call_model).

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "graphcheck/model.h"
#include "graphcheck/probe.h"
#include "graphcheck/engine/scenario.h"
#include "perturb_bits.h"

namespace graphcheck::passes {

// Idempotence: address, shape and content of each live tensor.
[[nodiscard]] std::map<std::string, TensorState> snapshot(const std::vector<NamedTensor>& tensors);

// Census: poisons every element `load` is expected to write (a checkpoint load: the regions of
// the names it streams; a dummy load: every region of the layout). Fills `poisoned` and `bytes`.
void fill_census(const LoadEvent& load, std::vector<CheckpointEntry> layout, CensusFillEvent& out);

// Poison pass. before_refit: every region of the layout the refit streams (`prefixes`, empty:
// all). staged: the regions matching poison.staged that the refit streams. orphans: each named
// float or uint8 read-set storage the backend holds and no live tensor references.
void poison_before_refit(std::vector<CheckpointEntry> layout, const std::vector<std::string>& prefixes,
                         PoisonFillEvent& out);
void poison_staged(std::vector<CheckpointEntry> layout, const std::vector<std::string>& patterns,
                   const std::vector<std::string>& prefixes, PoisonFillEvent& out);
void poison_orphans(const std::vector<GraphView>& graphs, std::vector<NamedTensor> live, PoisonFillEvent& out);
// Whether a floating replay output holds NaN (the poison pass then runs model B on its inputs).
[[nodiscard]] bool holds_nan(const TensorList& outputs);

// Coverage: perturbs candidates of `live` in place around `replay_and_eager` (which replays the
// graph and runs eager(A) on the compare's inputs) and restores them; fills the event's lists and
// counts.
using ReplayAndEager = std::function<std::pair<TensorList, TensorList>()>;
void measure_coverage(const GraphView& graph, std::vector<NamedTensor> live, const CompareEvent& compare,
                      const ReplayAndEager& replay_and_eager, CoverageEvent& out);
// The same for several graphs at once, each with its compare, its run and its event (Note [One
// perturbation for a cycle's graphs], coverage.cpp): what measure_coverage finds for each alone.
struct CoverageGraph {
  const GraphView* graph = nullptr;
  const CompareEvent* compare = nullptr;
  ReplayAndEager replay_and_eager;
  CoverageEvent* out = nullptr;
};
void measure_coverage(const std::vector<CoverageGraph>& graphs, std::vector<NamedTensor> live);

namespace detail {
// The coverage perturbation of a tensor that is one dense region (Note [A perturbation undone
// exactly]), forward or back, in libtorch's ops a piece of at most `piece_bytes` at a time: what
// measure_coverage does on a device. For tests: the patterns are perturb_bits.h's loops'.
void perturb_by_ops(const torch::Tensor& t, perturb::Format format, bool forward, std::int64_t piece_bytes);
}  // namespace detail

// Validation compares with outputs_agree (output_diff.h).
// The fresh inputs the validate pass replays each capture on: (seed, scale) pairs.
[[nodiscard]] std::vector<std::pair<std::uint64_t, double>> validation_inputs(std::uint64_t scenario_seed,
                                                                             std::int64_t batch_size);

// Growth: dummy loads of models with the growth key at each value. `construct` builds a model
// with a config, `load_dummy` runs its load_dummy_weights() with the run's seed.
void measure_growth(const Scenario& scenario,
                    const std::function<std::unique_ptr<LifecycleModel>(const ModelConfig&)>& construct,
                    const std::function<void(LifecycleModel&)>& load_dummy, GrowthEvent& out);

}  // namespace graphcheck::passes
