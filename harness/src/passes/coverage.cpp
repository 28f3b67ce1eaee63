// The coverage pass's perturbation (the coverage probe judges what it measures). Live tensors
// are perturbed in place around a replay and an eager run on the compare's inputs, then restored.
//
// Cost: when replay = eager before any perturbation, all tensors are perturbed at once and groups
// are bisected only where replay and eager then disagree: one replay + one eager forward for a
// clean graph, O(k log n) for k uncovered tensors among n. When replay already differs from eager
// (a stale read the differential reports), each tensor is tried alone, at most kMaxSingles of
// them, those the graph reads first.

#include <torch/types.h>

#include <set>

#include "output_diff.h"
#include "passes/passes.h"

namespace graphcheck::passes {
namespace {

constexpr std::size_t kMaxSingles = 256;

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
  } else if (t.scalar_type() == torch::kFloat32 || t.scalar_type() == torch::kFloat64) {
    t.mul_(1.125).add_(0.015625);  // the same roundings as below, without temporaries
  } else {
    torch::Tensor wide = t.to(torch::kFloat32);
    wide.mul_(1.125).add_(0.015625);
    t.copy_(wide);
  }
}


void restore(const std::vector<const NamedTensor*>& group, const std::vector<torch::Tensor>& saved) {
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < group.size(); ++i) {
    torch::Tensor live = group[i]->tensor;
    live.copy_(saved[i]);
  }
}

class Perturbation {
 public:
  Perturbation(const CompareEvent& compare, const ReplayAndEager& run, CoverageEvent& out)
      : m_compare(compare), m_run(run), m_out(out),
        m_baseline_agrees(outputs_agree(compare.replay_outputs, compare.eager_outputs, compare.tolerance)) {}

  [[nodiscard]] bool baseline_agrees() const { return m_baseline_agrees; }

  void classify(const NamedTensor& t) {
    const auto [replayed, eager] = perturbed_outputs({&t});
    const double tol = m_compare.tolerance;
    const bool replay_moved = !outputs_agree(replayed, m_compare.replay_outputs, tol);
    const bool eager_moved = !outputs_agree(eager, m_compare.eager_outputs, tol);
    if (eager_moved && !replay_moved) m_out.uncovered.push_back(t.name);
    else if (replay_moved && !eager_moved) m_out.replay_only.push_back(t.name);
    else if (replay_moved && eager_moved && m_baseline_agrees && !outputs_agree(replayed, eager, tol)) m_out.partial.push_back(t.name);
  }

  // A group is covered when replay = eager with all of it perturbed; else split it.
  void bisect(const std::vector<const NamedTensor*>& group) {
    if (group.empty()) return;
    if (group.size() == 1) {
      classify(*group.front());
      return;
    }
    const auto [replayed, eager] = perturbed_outputs(group);
    if (outputs_agree(replayed, eager, m_compare.tolerance)) return;
    const std::size_t half = group.size() / 2;
    bisect(std::vector<const NamedTensor*>(group.begin(), group.begin() + half));
    bisect(std::vector<const NamedTensor*>(group.begin() + half, group.end()));
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
    std::pair<TensorList, TensorList> outputs;
    try {
      ++m_out.replays;
      outputs = m_run();
    } catch (...) {
      restore(group, saved);
      throw;
    }
    restore(group, saved);
    return outputs;
  }

  const CompareEvent& m_compare;
  const ReplayAndEager& m_run;
  CoverageEvent& m_out;
  bool m_baseline_agrees;
};

}  // namespace

void measure_coverage(const GraphView& graph, std::vector<NamedTensor> live, const CompareEvent& compare,
                      const ReplayAndEager& replay_and_eager, CoverageEvent& out) {
  // Candidates: the live tensors (each storage region once), the ones the graph reads first.
  std::set<std::string> read;
  for (const auto& r : graph.reads) read.insert(r.name);
  std::vector<NamedTensor> candidates;
  std::set<std::pair<const void*, std::size_t>> seen;
  for (int round = 0; round < 2; ++round) {
    for (auto& t : live) {
      if (!t.tensor.defined()) continue;  // moved into candidates in the first round
      if ((read.count(t.name) > 0) != (round == 0) || !perturbable(t.tensor)) continue;
      if (!seen.insert({t.tensor.data_ptr(), t.tensor.nbytes()}).second) continue;
      candidates.push_back(std::move(t));
    }
  }
  out.graph = &graph;
  out.replays = 0;
  out.tensors = static_cast<std::int64_t>(candidates.size());
  Perturbation p(compare, replay_and_eager, out);
  if (p.baseline_agrees()) {
    out.method = "group bisection";
    std::vector<const NamedTensor*> all;
    for (const auto& t : candidates) all.push_back(&t);
    p.bisect(all);
  } else {
    out.method = "one tensor at a time (replay already differs from eager)";
    for (std::size_t i = 0; i < candidates.size() && i < kMaxSingles; ++i) p.classify(candidates[i]);
  }
}

}  // namespace graphcheck::passes
