// coverage: every live tensor that eager(A) depends on must influence the replay the same way
// (DESIGN §2.4). In a pass of its own, after the capture and after each refit (at each compare),
// live tensors are perturbed in place, the graph replayed and A run eagerly on the same inputs,
// and the tensors restored. A tensor eager depends on and replay does not means the graph reads a
// copy or a stale tensor; one the replay depends on and eager does not means the graph reads
// memory eager no longer uses.
//
// Cost: when replay = eager before any perturbation, all tensors are perturbed at once and groups
// are bisected only where replay and eager then disagree: one replay + one eager forward for a
// clean graph, O(k log n) for k uncovered tensors among n. When replay already differs from eager
// (a stale read the differential reports), each tensor is tried alone, at most kMaxSingles of
// them, those the graph reads first. The counts are recorded as gc/coverage/* measurements.

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/nn/module.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "graphcheck/probe.h"
#include "tensor_format.h"

namespace graphcheck {
namespace {

constexpr std::size_t kMaxSingles = 256;
constexpr std::size_t kMaxListed = 8;

bool perturbable(const torch::Tensor& t) {
  return t.defined() && t.has_storage() && t.numel() > 0 &&
         (c10::isFloatingType(t.scalar_type()) || t.scalar_type() == torch::kUInt8);
}

// Moves every element: x * 1.125 + 1/64 for floats; bytes xor 1 (never becoming 0xFF, NaN in
// UE8M0) for uint8.
void perturb(torch::Tensor& t) {
  torch::NoGradGuard no_grad;
  if (t.scalar_type() == torch::kUInt8) {
    torch::Tensor flipped = t.bitwise_xor(1);
    t.copy_(torch::where(flipped == 255, torch::full_like(flipped, 253), flipped));
  } else {
    t.copy_(t.to(torch::kFloat32) * 1.125 + 0.015625);
  }
}

bool same(const TensorList& a, const TensorList& b, double tolerance) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].sizes() != b[i].sizes()) return false;
    const torch::Tensor x = a[i].to(torch::kFloat64), y = b[i].to(torch::kFloat64);
    const torch::Tensor both_nan = x.isnan().logical_and(y.isnan());
    const torch::Tensor close = (x - y).abs().le(tolerance).logical_or(both_nan).logical_or(x.eq(y));
    if (!close.all().item<bool>()) return false;
  }
  return true;
}

class CoverageProbe final : public EmptyProbe {
 public:
  [[nodiscard]] std::string name() const override { return "coverage"; }

  void on_compare_end(RunContext& ctx, const CompareEvent& e) override {
    PassControl* control = ctx.control();
    if (ctx.pass() != Pass::coverage || !control) return;
    std::size_t index = 0;
    while (index < ctx.graphs().size() && &ctx.graphs()[index] != e.graph) ++index;
    if (index == ctx.graphs().size()) return;

    // Candidates: the live tensors (each storage region once), the ones the graph reads first.
    std::set<std::string> read;
    for (const auto& r : e.graph->reads) read.insert(r.name);
    std::vector<NamedTensor> candidates;
    std::set<std::pair<const void*, std::size_t>> seen;
    for (int pass = 0; pass < 2; ++pass) {
      for (auto& t : ctx.live_tensors()) {
        if ((read.count(t.name) > 0) != (pass == 0) || !perturbable(t.tensor)) continue;
        if (!seen.insert({t.tensor.data_ptr(), t.tensor.nbytes()}).second) continue;
        candidates.push_back(std::move(t));
      }
    }
    m_replays = 0;
    m_control = control;
    m_index = index;
    m_tolerance = e.tolerance;
    m_inputs = e.inputs;
    m_base_replay = e.replay_outputs;
    m_base_eager = e.eager_outputs;

    std::vector<std::string> uncovered, replay_only, partial;
    auto classify = [&](const NamedTensor& t) {
      const auto [replayed, eager] = perturbed_outputs({&t});
      const bool replay_moved = !same(replayed, m_base_replay, m_tolerance);
      const bool eager_moved = !same(eager, m_base_eager, m_tolerance);
      if (eager_moved && !replay_moved) uncovered.push_back(t.name);
      else if (replay_moved && !eager_moved) replay_only.push_back(t.name);
      else if (replay_moved && eager_moved && m_baseline_agrees && !same(replayed, eager, m_tolerance)) partial.push_back(t.name);
    };
    m_baseline_agrees = same(m_base_replay, m_base_eager, m_tolerance);
    std::string method;
    if (m_baseline_agrees) {
      method = "group bisection";
      std::vector<const NamedTensor*> all;
      for (const auto& t : candidates) all.push_back(&t);
      bisect(all, classify);
    } else {
      method = "one tensor at a time (replay already differs from eager)";
      for (std::size_t i = 0; i < candidates.size() && i < kMaxSingles; ++i) classify(candidates[i]);
    }
    ctx.measure(e, "gc/coverage/tensors", static_cast<double>(candidates.size()), "tensors");
    ctx.measure(e, "gc/coverage/replays", static_cast<double>(m_replays), "replays");

    const std::string when = e.cycle == 0 ? std::string("after the capture")
                                          : ctx.after_cycle(e.cycle);
    auto listed = [](const std::vector<std::string>& names) {
      std::vector<std::string> out(names.begin(), names.begin() + std::min(names.size(), kMaxListed));
      if (names.size() > kMaxListed) out.push_back(fmt::format("and {} more", names.size() - kMaxListed));
      return fmt::format("{}", fmt::join(out, ", "));
    };
    for (const auto& t : uncovered) {
      ctx.fail(name(), e, t,
               fmt::format("eager(A) depends on '{}' but the graph replayed at batch size {} does "
                           "not ({}): perturbing the live tensor in place changes eager and leaves "
                           "the replay unchanged, so the graph reads a copy or a stale tensor; "
                           "update the tensor in place with copy_() instead of replacing it",
                           t, e.batch_size, when),
               {{"tensor", t}, {"eager_changed", "yes"}, {"replay_changed", "no"}, {"method", method}});
    }
    for (const auto& t : replay_only) {
      ctx.fail(name(), e, t,
               fmt::format("the graph replayed at batch size {} depends on '{}' but eager(A) no "
                           "longer does ({}): the graph reads memory the model has stopped using",
                           e.batch_size, t, when),
               {{"tensor", t}, {"eager_changed", "no"}, {"replay_changed", "yes"}, {"method", method}});
    }
    if (!partial.empty()) {
      ctx.fail(name(), e, listed(partial),
               fmt::format("perturbing {} changes both the replay at batch size {} and eager(A), "
                           "but differently ({}): the graph reads part of the tensor stale",
                           listed(partial), e.batch_size, when),
               {{"tensors", listed(partial)}, {"method", method}});
    }
  }

 private:
  // Perturbs the tensors, replays and runs eager on the compare's inputs, restores them.
  std::pair<TensorList, TensorList> perturbed_outputs(const std::vector<const NamedTensor*>& group) {
    std::vector<torch::Tensor> saved;
    for (const NamedTensor* t : group) saved.push_back(t->tensor.clone());
    for (const NamedTensor* t : group) {
      torch::Tensor live = t->tensor;
      perturb(live);
    }
    TensorList replayed, eager;
    try {
      ++m_replays;
      replayed = m_control->replay(m_index, m_inputs);
      eager = m_control->eager(m_inputs);
    } catch (...) {
      restore(group, saved);
      throw;
    }
    restore(group, saved);
    return {replayed, eager};
  }

  static void restore(const std::vector<const NamedTensor*>& group, const std::vector<torch::Tensor>& saved) {
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < group.size(); ++i) {
      torch::Tensor live = group[i]->tensor;
      live.copy_(saved[i]);
    }
  }

  // A group is covered when replay = eager with all of it perturbed; else split it.
  template <class Classify>
  void bisect(const std::vector<const NamedTensor*>& group, Classify& classify) {
    if (group.empty()) return;
    if (group.size() == 1) {
      classify(*group.front());
      return;
    }
    const auto [replayed, eager] = perturbed_outputs(group);
    if (same(replayed, eager, m_tolerance)) return;
    const std::size_t half = group.size() / 2;
    bisect(std::vector<const NamedTensor*>(group.begin(), group.begin() + half), classify);
    bisect(std::vector<const NamedTensor*>(group.begin() + half, group.end()), classify);
  }

  PassControl* m_control = nullptr;
  std::size_t m_index = 0;
  double m_tolerance = 0;
  bool m_baseline_agrees = true;
  std::int64_t m_replays = 0;
  TensorList m_inputs, m_base_replay, m_base_eager;
};

}  // namespace

GRAPHCHECK_REGISTER_PROBE_IN("coverage",
                             "every live tensor eager depends on influences the replay (perturb "
                             "in place, replay, restore; own pass)",
                             CoverageProbe, ::graphcheck::Pass::coverage);

}  // namespace graphcheck
