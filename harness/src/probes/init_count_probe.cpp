// init_count: counts the dummy loader's writes per tensor. Fails when a parameter or persistent
// buffer is initialised other than exactly once, a non-persistent buffer is touched at all, or a
// tensor that declares dummy_weight_value (or that the scenario's dummy_constants names) does not
// hold exactly that value after the load. With the scenario option dummy_growth, it re-runs the
// dummy load at several config values (e.g. depth) and reports writes and time against them.

#include <fmt/format.h>
#include <torch/torch.h>

#include <chrono>
#include <map>

#include "dummy_loader.h"
#include "glob.h"
#include "graphcheck/probe.h"

namespace graphcheck {
namespace {

// Elements of `t` that differ from `value`, and the first such offset.
std::pair<std::int64_t, std::int64_t> mismatches(const torch::Tensor& t, double value) {
  torch::Tensor flat = t.flatten();
  torch::Tensor as_double = c10::isIntegralType(t.scalar_type(), /*includeBool=*/true)
                                ? flat.to(torch::kInt64).to(torch::kFloat64)
                                : flat.to(torch::kFloat64);
  torch::Tensor bad = as_double != value;
  const std::int64_t count = bad.sum().item<std::int64_t>();
  const std::int64_t first = count ? bad.nonzero()[0][0].item<std::int64_t>() : -1;
  return {count, first};
}

class InitCountProbe final : public EmptyProbe {
 public:
  [[nodiscard]] std::string name() const override { return "init_count"; }

  void on_load_begin(RunContext&, const LoadEvent& e) override {
    m_counting = !e.refit && e.format == LoadFormat::dummy;
    m_counts.clear();
    m_writes = 0;
  }

  void on_init_write(RunContext&, const InitWriteEvent& e) override {
    if (!m_counting) return;
    ++m_counts[e.name];
    ++m_writes;
  }

  void on_load_end(RunContext& ctx, const LoadEvent& e) override {
    if (!m_counting) return;
    m_counting = false;
    check_counts(ctx, e);
    check_values(ctx, e);
    if (ctx.scenario().dummy_growth) growth(ctx, e);
  }

 private:
  void check_counts(RunContext& ctx, const LoadEvent& e) {
    LifecycleModel& model = ctx.model();
    const auto persistent = checkpoint_tensors(model);
    std::set<std::string> persistent_names;
    for (const auto& t : persistent) {
      persistent_names.insert(t.name);
      const int count = m_counts.count(t.name) ? m_counts.at(t.name) : 0;
      if (count == 1) continue;
      add(ctx, e, t.name,
          fmt::format("tensor '{}' was initialised {} times by the dummy load (expected exactly "
                      "once){}",
                      t.name, count,
                      count == 0 ? ": the loader skipped it"
                                 : ": each module must initialise only its own tensors, not its "
                                   "recursive state (one fill per ancestor is O(depth) work)"),
          {{"tensor", t.name}, {"count", std::to_string(count)}});
    }
    for (const auto& item : model.module().named_buffers(/*recurse=*/true)) {
      if (persistent_names.count(item.key())) continue;
      const int count = m_counts.count(item.key()) ? m_counts.at(item.key()) : 0;
      if (count == 0) continue;
      add(ctx, e, item.key(),
          fmt::format("non-persistent buffer '{}' was written {} time{} by the dummy load: "
                      "non-persistent buffers (scratch, aliases) must never be touched by a loader",
                      item.key(), count, count == 1 ? "" : "s"),
          {{"tensor", item.key()}, {"count", std::to_string(count)}});
    }
    measure(ctx, e, "gc/init_count/writes", static_cast<double>(m_writes), "writes");
    measure(ctx, e, "gc/init_count/tensors", static_cast<double>(persistent.size()), "tensors");
  }

  void check_values(RunContext& ctx, const LoadEvent& e) {
    LifecycleModel& model = ctx.model();
    const auto& expected = ctx.scenario().dummy_constants;
    std::set<std::string> matched_patterns;
    for (const auto& t : checkpoint_tensors(model)) {
      const TensorAttrs* attrs = model.tensor_attributes().find(t.tensor);
      std::optional<double> declared;
      if (attrs && attrs->dummy_weight_value) declared = attrs->dummy_weight_value;
      for (const auto& [pattern, value] : expected) {
        if (!path_matches(pattern, t.name)) continue;
        matched_patterns.insert(pattern);
        if (!declared || *declared != value) {
          add(ctx, e, t.name,
              fmt::format("the scenario expects '{}' to be dummy-filled with the constant {} but "
                          "the model declares {}: set dummy_weight_value on it (a random fill of "
                          "a GiB-scale table costs far more than a constant)",
                          t.name, value,
                          declared ? fmt::format("dummy_weight_value {}", *declared)
                                   : std::string("no dummy_weight_value")),
              {{"tensor", t.name}, {"expected_value", fmt::format("{}", value)}});
        }
      }
      if (!declared) continue;
      // The constant as this dtype stores it (0.1 is not exact in float32).
      const double stored =
          torch::full({}, *declared, t.tensor.options()).to(torch::kFloat64).item<double>();
      const auto [count, first] = mismatches(t.tensor, stored);
      if (count == 0) continue;
      add(ctx, e, t.name,
          fmt::format("tensor '{}' ({}) should hold the dummy constant {} after the dummy load but "
                      "{} of its {} elements differ (first at offset {}): the loader ignored "
                      "dummy_weight_value for this dtype",
                      t.name, c10::toString(t.tensor.scalar_type()), *declared, count,
                      t.tensor.numel(), first),
          {{"tensor", t.name},
           {"dtype", c10::toString(t.tensor.scalar_type())},
           {"expected_value", fmt::format("{}", *declared)},
           {"mismatched_elements", std::to_string(count)},
           {"first_offset", std::to_string(first)}});
    }
    for (const auto& [pattern, value] : expected) {
      if (matched_patterns.count(pattern)) continue;
      add(ctx, e, pattern,
          fmt::format("dummy_constants pattern '{}' matches no parameter or persistent buffer: "
                      "fix the scenario",
                      pattern),
          {{"pattern", pattern}});
    }
  }

  void growth(RunContext& ctx, const LoadEvent& e) {
    const Scenario::Growth& g = *ctx.scenario().dummy_growth;
    std::vector<std::pair<std::string, std::string>> table;
    bool flat = true;
    for (std::int64_t value : g.values) {
      ModelConfig config = ctx.scenario().config;
      config.set(g.key, value, fmt::format("{}: dummy_growth", ctx.scenario().file));
      std::unique_ptr<LifecycleModel> model = ctx.construct_model(config);
      const std::size_t tensors = checkpoint_tensors(*model).size();
      std::int64_t writes = 0;
      const auto start = std::chrono::steady_clock::now();
      dummy_load(*model, ctx.scenario().seed,
                 [&](const std::string&, const torch::Tensor&) { ++writes; });
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      flat = flat && writes == static_cast<std::int64_t>(tensors);
      const std::string prefix = fmt::format("gc/init_count/growth/{}={}", g.key, value);
      measure(ctx, e, prefix + "/writes", static_cast<double>(writes), "writes");
      measure(ctx, e, prefix + "/tensors", static_cast<double>(tensors), "tensors");
      measure(ctx, e, prefix + "/ms", ms, "ms");
      table.push_back({fmt::format("{}={}", g.key, value),
                       fmt::format("{} writes for {} tensors ({:.2f} writes/tensor), {:.3f} ms",
                                   writes, tensors, static_cast<double>(writes) / tensors, ms)});
    }
    if (!flat) {
      add(ctx, e, fmt::format("dummy load cost against {}", g.key),
          fmt::format("dummy-load writes grow faster than the tensor count as '{}' grows (see "
                      "evidence): every tensor must be written exactly once whatever the depth",
                      g.key),
          std::move(table));
    }
  }

  void measure(RunContext& ctx, const LoadEvent& e, std::string tag, double value,
               std::string unit) {
    ctx.measure(e, std::move(tag), value, std::move(unit));
  }

  void add(RunContext& ctx, const LoadEvent& e, std::string subject, std::string message,
           std::vector<std::pair<std::string, std::string>> evidence) {
    ctx.fail(name(), e, std::move(subject), std::move(message), std::move(evidence));
  }

  bool m_counting = false;
  std::int64_t m_writes = 0;
  std::map<std::string, int> m_counts;
};

}  // namespace

GRAPHCHECK_REGISTER_PROBE("init_count",
                          "a dummy load initialises every tensor exactly once, never touches "
                          "non-persistent buffers and honours dummy_weight_value",
                          InitCountProbe);

}  // namespace graphcheck
