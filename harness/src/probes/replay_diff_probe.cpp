// replay_diff: the root oracle. After every replay, replay(A) vs eager(A) vs eager(B), where B is
// a fresh model loaded in one go with the weights A should hold. replay != eager(A): the graph
// reads stale memory. eager(A) != eager(B): A's own state is wrong (a missed hook, a load into a
// stale tensor). The tolerance comes from the noise floor measured at the first replay (before
// any refit), never below the backend's own minimum (0 for the emulated backend).

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <cmath>
#include <map>
#include <set>

#include "counting_allocator.h"
#include "graphcheck/probe.h"
#include "poison.h"
#include "tensor_format.h"

namespace graphcheck {
namespace {

constexpr double kNoiseMultiple = 4.0;

struct Diff {
  double max_abs = 0;
  double max_rel = 0;  // max_abs / max |reference|
  std::int64_t mismatches = 0;
  std::int64_t first_index = -1;
};

// NaN on one side only counts as an infinite difference.
Diff diff(const torch::Tensor& a, const torch::Tensor& b, double tolerance) {
  Diff d;
  torch::Tensor x = a.to(torch::kFloat64).flatten();
  torch::Tensor y = b.to(torch::kFloat64).flatten();
  torch::Tensor delta = (x - y).abs();
  torch::Tensor nan_mismatch = x.isnan().logical_xor(y.isnan());
  delta = torch::where(nan_mismatch, torch::full_like(delta, INFINITY), delta.nan_to_num(0.0));
  if (delta.numel() == 0) return d;
  d.max_abs = delta.max().item<double>();
  const double scale = y.abs().nan_to_num(0.0).max().item<double>();
  d.max_rel = scale > 0 ? d.max_abs / scale : d.max_abs;
  torch::Tensor bad = delta > tolerance;
  d.mismatches = bad.sum().item<std::int64_t>();
  if (d.mismatches > 0) d.first_index = bad.nonzero()[0][0].item<std::int64_t>();
  return d;
}

class ReplayDiffProbe final : public EmptyProbe {
 public:
  [[nodiscard]] std::string name() const override { return "replay_diff"; }

  void on_compare_end(RunContext& ctx, const CompareEvent& e) override {
    const std::int64_t b = e.batch_size;
    const std::string when =
        e.cycle == 0 ? std::string("after the initial load") : fmt::format("after refit cycle {}", e.cycle);
    if (e.replay_output.sizes() != e.eager_output.sizes()) {
      report(ctx, e, "replay vs eager(A)",
             fmt::format("replay output has shape {} but eager(A) gives {} at batch size {} {}",
                         shape_string(e.replay_output.sizes()),
                         shape_string(e.eager_output.sizes()), b, when),
             {});
      return;
    }
    // Noise floor: replay vs eager before any refit. A backend that replays exactly (minimum
    // tolerance 0, the emulated one) gets tolerance 0, so a cycle-0 difference is a finding; a
    // non-finite floor is never used as a tolerance.
    if (e.cycle == 0 && !m_noise.count(b)) {
      const double floor = diff(e.replay_output, e.eager_output, 0).max_abs;
      m_noise[b] = std::isfinite(floor) ? floor : 0.0;
    }
    const double noise = m_noise.count(b) ? m_noise[b] : 0.0;
    const double minimum = ctx.backend().min_tolerance();
    const double tolerance = minimum > 0 ? std::max(minimum, kNoiseMultiple * noise) : 0.0;

    const torch::Tensor eager_b = ctx.reference_forward(e.input);
    const Diff replay_vs_a = diff(e.replay_output, e.eager_output, tolerance);
    const Diff a_vs_b = eager_b.sizes() == e.eager_output.sizes()
                            ? diff(e.eager_output, eager_b, tolerance)
                            : Diff{INFINITY, INFINITY, e.eager_output.numel(), 0};

    ctx.measure(e, "gc/replay_diff/noise_floor", noise, "abs");
    ctx.measure(e, "gc/replay_diff/tolerance", tolerance, "abs");
    ctx.measure(e, "gc/replay_diff/replay_vs_eager_a/max_abs", replay_vs_a.max_abs, "abs");
    ctx.measure(e, "gc/replay_diff/eager_a_vs_eager_b/max_abs", a_vs_b.max_abs, "abs");

    const auto verdict = [](const Diff& d) { return d.mismatches > 0 ? "≠" : "="; };
    const std::string summary = fmt::format("replay(A) {} eager(A) (max abs {:.6g}), eager(A) {} eager(B) (max abs {:.6g})",
                                            verdict(replay_vs_a), replay_vs_a.max_abs,
                                            verdict(a_vs_b), a_vs_b.max_abs);
    if (replay_vs_a.mismatches > 0) {
      report(ctx, e, "replay vs eager(A)",
             fmt::format("{} at batch size {} {}: the captured graph reads stale memory (a tensor "
                         "it baked in was replaced instead of updated in place)",
                         summary, b, when),
             {{"max_abs", fmt::format("{:.6g}", replay_vs_a.max_abs)},
              {"max_rel", fmt::format("{:.6g}", replay_vs_a.max_rel)},
              {"mismatched_elements", std::to_string(replay_vs_a.mismatches)},
              {"first_mismatch_index", std::to_string(replay_vs_a.first_index)},
              {"tolerance", fmt::format("{:.6g}", tolerance)},
              {"eager_a_vs_eager_b", verdict(a_vs_b)}});
    }
    if (a_vs_b.mismatches > 0) {
      const std::vector<std::string> differing = tensors_differing_from_b(ctx, e.cycle);
      report(ctx, e, "eager(A) vs eager(B)",
             fmt::format("{} at batch size {} {}: model A's own state is wrong (a hook did not "
                         "run, or weights were loaded into a stale tensor){}",
                         summary, b, when,
                         differing.empty() ? std::string()
                                           : fmt::format("; live tensors of A that differ from B's: {}",
                                                         fmt::join(differing, ", "))),
             {{"max_abs", fmt::format("{:.6g}", a_vs_b.max_abs)},
              {"max_rel", fmt::format("{:.6g}", a_vs_b.max_rel)},
              {"mismatched_elements", std::to_string(a_vs_b.mismatches)},
              {"tolerance", fmt::format("{:.6g}", tolerance)},
              {"replay_vs_eager_a", verdict(replay_vs_a)},
              {"tensors_differing_from_b", fmt::format("{}", fmt::join(differing, "; "))}});
    }
  }

 private:
  // Localises eager(A) != eager(B): the tensors of A whose bytes differ from model B's tensor of
  // the same name. Compared: parameters, persistent buffers and extra_tensors() (what loads and
  // PWAL write; non-persistent buffers may legitimately differ after A's forwards). Computed once
  // per failing cycle, outside the memory counts; at most kMaxListed named. Never loses the
  // finding: a tensor that cannot be compared is skipped, a failure is reported in the text.
  std::vector<std::string> tensors_differing_from_b(RunContext& ctx, int cycle) {
    auto cached = m_differing.find(cycle);
    if (cached != m_differing.end()) return cached->second;
    UncountedScope uncounted;
    std::vector<std::string> out;
    try {
      auto comparable = [](LifecycleModel& model) {
        std::map<std::string, torch::Tensor> tensors;
        for (auto& t : checkpoint_tensors(model)) tensors.emplace(t.name, t.tensor);
        for (auto& t : model.extra_tensors()) tensors.emplace(t.name, t.tensor);
        return tensors;
      };
      const std::map<std::string, torch::Tensor> a_tensors = comparable(ctx.model());
      std::map<std::string, torch::Tensor> b_tensors;
      {
        std::set<std::string> names;
        for (const auto& item : a_tensors) names.insert(item.first);
        for (auto& t : ctx.reference_tensors()) {
          if (names.count(t.name)) b_tensors.emplace(t.name, t.tensor);
        }
      }
      std::size_t total = 0;
      for (const auto& [name, a] : a_tensors) {
        auto it = b_tensors.find(name);
        std::string what;
        if (it == b_tensors.end() || !it->second.defined() || !a.defined()) {
          if (it == b_tensors.end()) what = fmt::format("{} (only in A)", name);
        } else if (a.sizes() != it->second.sizes() || a.scalar_type() != it->second.scalar_type()) {
          what = fmt::format("{} ({} {} vs B's {} {})", name, c10::toString(a.scalar_type()),
                             shape_string(a.sizes()), c10::toString(it->second.scalar_type()),
                             shape_string(it->second.sizes()));
        } else if (a.numel() > 0 && a.layout() == c10::kStrided && !a.is_meta()) {
          const torch::Tensor r = it->second.to(a.device());
          const std::int64_t differ = element_bytes(a).ne(element_bytes(r)).any(1).sum().item<std::int64_t>();
          if (differ > 0) what = fmt::format("{} ({} of {} elements)", name, differ, a.numel());
        }
        if (what.empty()) continue;
        if (out.size() < kMaxListed) out.push_back(std::move(what));
        ++total;
      }
      if (total > out.size()) out.push_back(fmt::format("and {} more", total - out.size()));
    } catch (const c10::Error& e) {
      out.push_back(fmt::format("(could not compare A's tensors with B's: {})", e.what_without_backtrace()));
    } catch (const std::exception& e) {
      out.push_back(fmt::format("(could not compare A's tensors with B's: {})", e.what()));
    }
    m_differing[cycle] = out;
    return out;
  }

  void report(RunContext& ctx, const CompareEvent& e, std::string subject, std::string message,
              std::vector<std::pair<std::string, std::string>> evidence) {
    ctx.fail(name(), e, std::move(subject), std::move(message), std::move(evidence));
  }

  static constexpr std::size_t kMaxListed = 8;
  std::map<std::int64_t, double> m_noise;
  std::map<int, std::vector<std::string>> m_differing;
};

}  // namespace

GRAPHCHECK_REGISTER_PROBE("replay_diff",
                          "replay(A) vs eager(A) vs eager(B) after every capture and refit",
                          ReplayDiffProbe);

}  // namespace graphcheck
