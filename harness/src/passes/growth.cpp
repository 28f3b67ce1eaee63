// The growth pass's dummy-load reruns and the validate pass's fresh inputs.

#include <fmt/format.h>
#include <torch/types.h>

#include <chrono>
#include <cmath>
#include <set>

#include "output_diff.h"
#include "passes/passes.h"
#include "write_count.h"

namespace graphcheck::passes {

void measure_growth(const Scenario& scenario,
                    const std::function<std::unique_ptr<LifecycleModel>(const ModelConfig&)>& construct,
                    const std::function<void(LifecycleModel&)>& load_dummy, GrowthEvent& out) {
  const Scenario::Growth& g = *scenario.dummy_growth;
  out.key = g.key;
  for (std::int64_t value : g.values) {
    ModelConfig config = scenario.config;
    config.set(g.key, value, fmt::format("{}: dummy_growth", scenario.file));
    std::unique_ptr<LifecycleModel> model = construct(config);
    // One tensor per storage: names over one storage (tied weights) share their writes.
    std::vector<NamedTensor> tensors;
    {
      std::set<const void*> storages;
      for (auto& t : checkpoint_tensors(*model)) {
        const void* key = t.tensor.has_storage() ? t.tensor.storage().unsafeGetStorageImpl() : nullptr;
        if (!key || storages.insert(key).second) tensors.push_back(std::move(t));
      }
    }
    std::vector<WriteState> before;
    for (const auto& t : tensors) before.push_back(write_state(t.tensor));
    const auto start = std::chrono::steady_clock::now();
    load_dummy(*model);
    GrowthPoint point;
    point.value = value;
    point.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    for (std::size_t i = 0; i < tensors.size(); ++i) point.writes += writes_between(before[i], write_state(tensors[i].tensor));
    point.tensors = static_cast<std::int64_t>(tensors.size());
    out.points.push_back(point);
  }
}


std::vector<std::pair<std::uint64_t, double>> validation_inputs(std::uint64_t scenario_seed,
                                                                std::int64_t batch_size) {
  const std::uint64_t base = scenario_seed * 7777u + static_cast<std::uint64_t>(batch_size) * 131u;
  // Signs, moderate scales, then the wide range a branch threshold may lie in: zeros, very small
  // and very large magnitudes (Note [Frozen branches], replay_diff_probe.cpp).
  return {{base + 1, 1.0},    {base + 1, -1.0},  {base + 2, 4.0},    {base + 3, -0.25},
          {base + 4, 0.0},    {base + 5, 1e-4},  {base + 6, -1e3},   {base + 7, 1e5}};
}

}  // namespace graphcheck::passes
