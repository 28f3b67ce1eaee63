// init_count: counts the dummy loader's writes per tensor. Fails when a parameter or persistent
// buffer is initialised other than exactly once, a non-persistent buffer is touched at all, or a
// tensor that declares dummy_weight_value (or that the scenario's dummy_constants names) does not
// hold exactly that value after the load. With the scenario option dummy_growth, the driver's
// growth pass re-runs the dummy load at several config values (e.g. depth) and the probe reports
// writes and time against them (GrowthEvent).

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/nn/module.h>
#include <torch/types.h>

#include <algorithm>
#include <map>
#include <set>

#include "glob.h"
#include "graphcheck/probe.h"
#include "write_count.h"

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

  // The growth pass: the driver's dummy loads of grown models (passes/growth.cpp).
  void on_growth_measured(RunContext& ctx, const GrowthEvent& g) override {
    if (ctx.pass() == Pass::growth) growth(ctx, g);
  }

  void on_load_begin(RunContext& ctx, const LoadEvent& e) override {
    m_counting = ctx.pass() == Pass::observe && !e.refit && e.format == LoadFormat::dummy;
    m_before.clear();
    if (!m_counting) return;
    for (const auto& t : ctx.live_tensors()) {
      if (t.tensor.defined()) m_before.emplace(t.name, write_state(t.tensor));
    }
  }

  void on_load_end(RunContext& ctx, const LoadEvent& e) override {
    if (!m_counting) return;
    m_counting = false;
    check_counts(ctx, e);
    check_values(ctx, e);
  }

 private:
  void check_counts(RunContext& ctx, const LoadEvent& e) {
    // Writes per storage group: tensors over one storage share their version counter.
    std::map<const c10::StorageImpl*, std::vector<std::string>> groups;
    std::map<std::string, std::int64_t> writes;
    std::map<std::string, const c10::StorageImpl*> group_of;
    std::int64_t total = 0;
    const auto live = ctx.live_tensors();
    std::set<std::string> seen;
    for (const auto& t : live) {
      if (!t.tensor.defined() || !seen.insert(t.name).second) continue;
      auto it = m_before.find(t.name);
      if (it == m_before.end()) continue;
      writes[t.name] = writes_between(it->second, write_state(t.tensor));
      const c10::StorageImpl* storage = t.tensor.has_storage() ? t.tensor.storage().unsafeGetStorageImpl() : nullptr;
      group_of[t.name] = storage;
      if (storage) groups[storage].push_back(t.name);
    }
    const auto persistent = ctx.checkpoint_tensors();
    std::set<std::string> persistent_names;
    for (const auto& t : persistent) persistent_names.insert(t.name);
    std::set<std::string> extra_names;
    {
      std::set<std::string> params_and_persistent = persistent_names;
      for (const auto& t : live) {
        if (!params_and_persistent.count(t.name)) extra_names.insert(t.name);
      }
    }
    for (const auto& t : persistent) {
      const c10::StorageImpl* storage = group_of.count(t.name) ? group_of[t.name] : nullptr;
      const std::vector<std::string>& members = storage ? groups[storage] : std::vector<std::string>{};
      std::int64_t count = writes.count(t.name) ? writes[t.name] : 0;
      // Aliases: the group's writes are shared; each persistent member stands for one write.
      std::int64_t expected = 1;
      if (members.size() > 1) {
        expected = static_cast<std::int64_t>(std::count_if(members.begin(), members.end(), [&](const std::string& n) {
          return persistent_names.count(n) > 0;
        }));
      }
      total += count;
      if (count == expected) continue;
      add(ctx, e, t.name,
          fmt::format("tensor '{}' was written {} time{} by the dummy load (expected exactly {}{}){}",
                      t.name, count, count == 1 ? "" : "s", expected,
                      members.size() > 1 ? fmt::format(", shared with {}", fmt::join(members, ", ")) : "",
                      count == 0 ? ": the loader skipped it"
                                 : ": each tensor must be initialised once, with one in-place op "
                                   "(a module that initialises its recursive state, or a loader "
                                   "that fills a tensor and then again, does O(depth) or repeated "
                                   "work)"),
          {{"tensor", t.name}, {"writes", std::to_string(count)}, {"expected", std::to_string(expected)},
           {"counted_by", "version counter (in-place ops), content for writes past libtorch"}});
    }
    const auto kinds = ctx.tensor_kinds();
    for (const auto& name : extra_names) {
      // Non-persistent buffers (and extra tensors aliasing nothing persistent) must stay untouched.
      const auto kind = kinds.find(name);
      if (kind == kinds.end() || kind->second != to_string(TensorKind::non_persistent_buffer)) continue;
      const std::int64_t count = writes.count(name) ? writes[name] : 0;
      if (count == 0) continue;
      const c10::StorageImpl* storage = group_of.count(name) ? group_of[name] : nullptr;
      if (storage && groups[storage].size() > 1) continue;  // shares storage with a loaded tensor
      add(ctx, e, name,
          fmt::format("non-persistent buffer '{}' was written {} time{} by the dummy load: "
                      "non-persistent buffers (scratch, derived state) must never be touched by a "
                      "loader",
                      name, count, count == 1 ? "" : "s"),
          {{"tensor", name}, {"writes", std::to_string(count)}});
    }
    measure(ctx, e, "gc/init_count/writes", static_cast<double>(total), "writes");
    measure(ctx, e, "gc/init_count/tensors", static_cast<double>(persistent.size()), "tensors");
  }

  void check_values(RunContext& ctx, const LoadEvent& e) {
    const auto& expected = ctx.scenario().dummy_constants;
    std::set<std::string> matched_patterns;
    for (const auto& t : ctx.checkpoint_tensors()) {
      const TensorAttrs* attrs = ctx.tensor_attrs(t.tensor);
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

  // The growth pass: dummy loads (the model's own load_dummy_weights()) of models grown through a
  // config key, writes counted as in the observe pass.
  void growth(RunContext& ctx, const GrowthEvent& g) {
    LoadEvent e;
    e.phase = Phase::load;
    e.format = LoadFormat::dummy;
    std::vector<std::pair<std::string, std::string>> table;
    bool flat = true;
    for (const GrowthPoint& point : g.points) {
      const std::int64_t writes = point.writes;
      const std::int64_t tensors = point.tensors;
      const double ms = point.ms;
      flat = flat && writes == tensors;
      const std::string prefix = fmt::format("gc/init_count/growth/{}={}", g.key, point.value);
      measure(ctx, e, prefix + "/writes", static_cast<double>(writes), "writes");
      measure(ctx, e, prefix + "/tensors", static_cast<double>(tensors), "tensors");
      measure(ctx, e, prefix + "/ms", ms, "ms");
      table.push_back({fmt::format("{}={}", g.key, point.value),
                       fmt::format("{} writes for {} tensors ({:.2f} writes/tensor), {:.3f} ms",
                                   writes, tensors,
                                   static_cast<double>(writes) / std::max<std::int64_t>(1, tensors), ms)});
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
  std::map<std::string, WriteState> m_before;
};

}  // namespace

GRAPHCHECK_REGISTER_PROBE_IN("init_count",
                             "a dummy load writes every tensor exactly once (observed: version "
                             "counters and content), never touches non-persistent buffers and "
                             "honours dummy_weight_value",
                             InitCountProbe, ::graphcheck::Pass::observe, ::graphcheck::Pass::growth);

}  // namespace graphcheck
