// coverage: every live tensor that eager(A) depends on must influence the replay the same way
// (DESIGN §2.4). In a pass of its own, after the capture and after each refit (at each compare),
// the driver perturbs live tensors in place, replays the graph and runs A eagerly on the same
// inputs, and restores the tensors (passes/coverage.cpp: group bisection, or one tensor at a time
// when replay already differs from eager); this probe judges what it measured (CoverageEvent). A
// tensor eager depends on and replay does not means the graph reads a copy or a stale tensor; one
// the replay depends on and eager does not means the graph reads memory eager no longer uses. The
// counts are recorded as gc/coverage/* measurements.

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "graphcheck/probe.h"

namespace graphcheck {
namespace {

constexpr std::size_t kMaxListed = 8;

class CoverageProbe final : public EmptyProbe {
 public:
  [[nodiscard]] std::string name() const override { return "coverage"; }

  void on_coverage_measured(RunContext& ctx, const CoverageEvent& e) override {
    if (ctx.pass() != Pass::coverage) return;
    const std::string& method = e.method;
    ctx.measure(e, "gc/coverage/tensors", static_cast<double>(e.tensors), "tensors");
    ctx.measure(e, "gc/coverage/replays", static_cast<double>(e.replays), "replays");

    const std::string when = e.cycle == 0 ? std::string("after the capture")
                                          : ctx.after_cycle(e.cycle);
    auto listed = [](const std::vector<std::string>& names) {
      std::vector<std::string> out(names.begin(), names.begin() + std::min(names.size(), kMaxListed));
      if (names.size() > kMaxListed) out.push_back(fmt::format("and {} more", names.size() - kMaxListed));
      return fmt::format("{}", fmt::join(out, ", "));
    };
    for (const auto& t : e.uncovered) {
      ctx.fail(name(), e, t,
               fmt::format("eager(A) depends on '{}' but the graph replayed at batch size {} does "
                           "not ({}): perturbing the live tensor in place changes eager and leaves "
                           "the replay unchanged, so the graph reads a copy or a stale tensor "
                           "(update the tensor in place with copy_() instead of replacing it), or "
                           "the capture froze a branch that does not read it",
                           t, e.batch_size, when),
               {{"tensor", t}, {"eager_changed", "yes"}, {"replay_changed", "no"}, {"method", method}});
    }
    for (const auto& t : e.replay_only) {
      ctx.fail(name(), e, t,
               fmt::format("the graph replayed at batch size {} depends on '{}' but eager(A) no "
                           "longer does ({}): the graph reads memory the model has stopped using",
                           e.batch_size, t, when),
               {{"tensor", t}, {"eager_changed", "no"}, {"replay_changed", "yes"}, {"method", method}});
    }
    if (!e.partial.empty()) {
      ctx.fail(name(), e, listed(e.partial),
               fmt::format("perturbing {} changes both the replay at batch size {} and eager(A), "
                           "but differently ({}): the graph reads part of the tensor stale",
                           listed(e.partial), e.batch_size, when),
               {{"tensors", listed(e.partial)}, {"method", method}});
    }
  }
};

}  // namespace

GRAPHCHECK_REGISTER_PROBE_IN("coverage",
                             "every live tensor eager depends on influences the replay (perturb "
                             "in place, replay, restore; own pass)",
                             CoverageProbe, ::graphcheck::Pass::coverage);

}  // namespace graphcheck
