// replay_diff: the root oracle. After every replay, replay(A) vs eager(A) vs eager(B), where B is
// a fresh model loaded in one go with the weights A should hold (built by the driver). replay !=
// eager(A): the graph reads stale memory. eager(A) != eager(B): A's own state is wrong (a missed
// hook, a load into a stale tensor); the finding then names every live tensor of A that differs
// from B's (parameters, persistent and non-persistent buffers, extra_tensors()), the ones the
// graphs read first. The tolerance comes with the event (0 on an exact backend; else from the
// noise floor of repeated eager runs and the output dtype).
//
// Eager-only batch sizes (capture.eager_batch_sizes, "prefill") are compared with B as well, before
// the graphs of the same cycle; a replay that disagrees while prefill agrees is reported as seen
// by the captured (decode) graphs only.
//
// In the validate pass it checks each capture: the captured graph replayed on fresh inputs (other
// seeds, other signs and scales) must match eager on the same inputs, or control flow was frozen
// at capture (a branch on a value read on the host through data_ptr(), .cpu() or item()).

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/nn/module.h>
#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "counting_allocator.h"
#include "graphcheck/probe.h"
#include "output_diff.h"
#include "poison.h"
#include "tensor_format.h"
#include "tolerance.h"

namespace graphcheck {
namespace {

std::string shapes(const TensorList& list) {
  std::vector<std::string> out;
  for (const auto& t : list) out.push_back(shape_string(t.sizes()));
  return fmt::format("{}", fmt::join(out, ", "));
}

class ReplayDiffProbe final : public EmptyProbe {
 public:
  [[nodiscard]] std::string name() const override { return "replay_diff"; }

  // The validate pass: the driver replayed the capture on fresh inputs (ValidationEvent).
  void on_validation_replays(RunContext& ctx, const ValidationEvent& e) override {
    if (ctx.pass() != Pass::validate) return;
    validate_capture(ctx, e);
  }

  // Note [Nondeterministic forward]
  // Every difference this probe reports is evidence only if model A's forward repeats: two eager
  // runs on one input must agree exactly on an exact backend (within the output dtype's rounding
  // on another). When they do not, the differential's premise is gone and its other findings
  // (replay != eager, A != B, frozen control flow) are symptoms of the nondeterminism, so the
  // finding says so first, and the driver puts it at the head of the record with the others
  // marked as under it (evidence cause = "nondeterministic"). Reported once per scenario.
  void on_noise_measured(RunContext& ctx, const NoiseEvent& e) override {
    if (ctx.pass() != Pass::validate || m_nondeterminism_reported || !(e.max_abs > e.allowed)) return;
    m_nondeterminism_reported = true;
    const OutputDiff d = diff_outputs(e.second, e.first, e.allowed);
    const bool exact = e.allowed == 0;
    // Note [Where a forward stops repeating] (engine/op_log.h)
    const std::string where =
        e.first_divergence.empty()
            ? std::string()
            : fmt::format("; two more runs first part at {}, op {} of the forward, where every op before it "
                          "returned the same tensors",
                          e.first_divergence, e.first_divergence_op);
    std::vector<std::pair<std::string, std::string>> evidence = {
        {"cause", "nondeterministic"},
        {"batch_size", std::to_string(e.batch_size)},
        {"max_abs", fmt::format("{:.6g}", d.max_abs)},
        {"mismatched_elements", std::to_string(d.mismatches)},
        {"first_mismatch", fmt::format("output {} element {}", d.output, d.first_index)},
        {"allowed", fmt::format("{:.6g}", e.allowed)}};
    if (!e.first_divergence.empty()) {
      evidence.emplace_back("first_divergence", fmt::format("{}, op {}", e.first_divergence, e.first_divergence_op));
    }
    ctx.fail(name(), e, "eager(A) vs eager(A)",
             fmt::format("forward is nondeterministic: two eager runs of model A on the same input at batch "
                         "size {} differ by max abs {:.6g} in {} elements (first at output {} element {}){}{}: "
                         "usual causes are dropout or another training-mode layer left on (eval(), "
                         "training=False), random numbers drawn in forward, and kernels with atomics "
                         "(index_add, scatter_add, split-K GEMM); until forward repeats, the other "
                         "differences reported for this scenario are not evidence of stale memory",
                         e.batch_size, d.max_abs, d.mismatches, d.output, d.first_index,
                         exact ? " on an exact backend, where they must be equal"
                               : fmt::format(", beyond the output dtype's rounding ({:.6g})", e.allowed),
                         where),
             evidence);
  }

  void on_compare_end(RunContext& ctx, const CompareEvent& e) override {
    if (ctx.pass() != Pass::observe) return;
    const std::int64_t b = e.batch_size;
    const std::string when = ctx.after_cycle(e.cycle);
    const double tolerance = e.tolerance;
    if (!e.graph) {
      prefill_compare(ctx, e, when);
      return;
    }
    const OutputDiff replay_vs_a = diff_outputs(e.replay_outputs, e.eager_outputs, tolerance);
    const OutputDiff a_vs_b = diff_outputs(e.eager_outputs, e.reference_outputs, tolerance);

    ctx.measure(e, "gc/replay_diff/noise_floor", e.noise_floor, "abs");
    ctx.measure(e, "gc/replay_diff/tolerance", tolerance, "abs");
    ctx.measure(e, "gc/replay_diff/replay_vs_eager_a/max_abs", replay_vs_a.max_abs, "abs");
    ctx.measure(e, "gc/replay_diff/eager_a_vs_eager_b/max_abs", a_vs_b.max_abs, "abs");

    const auto verdict = [](const OutputDiff& d) { return d.mismatches > 0 ? "≠" : "="; };
    const std::string summary = fmt::format(
        "replay(A) {} eager(A) (max abs {:.6g}), eager(A) {} eager(B) (max abs {:.6g})",
        verdict(replay_vs_a), replay_vs_a.max_abs, verdict(a_vs_b), a_vs_b.max_abs);
    if (replay_vs_a.mismatches > 0) {
      const std::string shape_note =
          e.replay_outputs.size() == e.eager_outputs.size()
              ? std::string()
              : fmt::format(" (replay gives {} outputs, eager(A) {})", e.replay_outputs.size(),
                            e.eager_outputs.size());
      // Prefill (eager-only batch sizes) ran first in this cycle: if it agrees with B, only the
      // captured decode graphs see the bug.
      std::string decode_only;
      auto prefill = m_prefill.find(e.cycle);
      if (prefill != m_prefill.end() && prefill->second.bad.empty()) {
        decode_only = fmt::format("; eager prefill at batch size{} {} agrees with model B in this "
                                  "cycle, so only the captured (decode) graphs see it",
                                  prefill->second.good.size() == 1 ? "" : "s",
                                  fmt::join(prefill->second.good, ", "));
      }
      std::vector<std::pair<std::string, std::string>> ev = {
          {"max_abs", fmt::format("{:.6g}", replay_vs_a.max_abs)},
          {"max_rel", fmt::format("{:.6g}", replay_vs_a.max_rel)},
          {"mismatched_elements", std::to_string(replay_vs_a.mismatches)},
          {"first_mismatch", fmt::format("output {} element {}", replay_vs_a.output, replay_vs_a.first_index)},
          {"tolerance", fmt::format("{:.6g}", tolerance)},
          {"replay_shapes", shapes(e.replay_outputs)},
          {"eager_a_vs_eager_b", verdict(a_vs_b)}};
      if (prefill != m_prefill.end()) {
        ev.push_back({"prefill_vs_eager_b", prefill->second.bad.empty() ? "=" : "≠"});
      }
      if (e.recapture.differs()) {
        baked_on_refit(ctx, e, summary, when, std::move(ev));
      } else {
        ctx.fail(name(), e, "replay vs eager(A)",
                 fmt::format("{} at batch size {} {}{}: the captured graph reads stale memory (a "
                             "tensor it baked in was replaced instead of updated in place){}",
                             summary, b, when, shape_note, decode_only),
                 std::move(ev));
      }
    }
    if (a_vs_b.mismatches > 0) {
      const std::vector<std::string> differing = tensors_differing_from_b(ctx, e.cycle);
      ctx.fail(name(), e, "eager(A) vs eager(B)",
               fmt::format("{} at batch size {} {}: model A's own state is wrong (a hook did not "
                           "run, or weights were loaded into a stale tensor){}",
                           summary, b, when,
                           differing.empty()
                               ? std::string("; no live tensor of A differs from B's: the state "
                                             "that differs is not declared to graphcheck")
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
  // Prefill: an eager-only batch size (no graph). eager(A) vs eager(B) as for the graphs.
  void prefill_compare(RunContext& ctx, const CompareEvent& e, const std::string& when) {
    const OutputDiff a_vs_b = diff_outputs(e.eager_outputs, e.reference_outputs, e.tolerance);
    ctx.measure(e, "gc/replay_diff/prefill_eager_a_vs_eager_b/max_abs", a_vs_b.max_abs, "abs");
    Prefill& p = m_prefill[e.cycle];
    if (a_vs_b.mismatches == 0) {
      p.good.push_back(e.batch_size);
      return;
    }
    p.bad.push_back(e.batch_size);
    const std::vector<std::string> differing = tensors_differing_from_b(ctx, e.cycle);
    ctx.fail(name(), e, fmt::format("prefill (eager, batch size {}) vs eager(B)", e.batch_size),
             fmt::format("eager(A) ≠ eager(B) (max abs {:.6g}) at eager-only (prefill) batch size {} {}: "
                         "model A's own state is wrong, in the eager path too{}",
                         a_vs_b.max_abs, e.batch_size, when,
                         differing.empty() ? std::string()
                                           : fmt::format("; live tensors of A that differ from B's: {}",
                                                         fmt::join(differing, ", "))),
             {{"max_abs", fmt::format("{:.6g}", a_vs_b.max_abs)},
              {"mismatched_elements", std::to_string(a_vs_b.mismatches)},
              {"tolerance", fmt::format("{:.6g}", e.tolerance)},
              {"path", "prefill (eager only)"},
              {"tensors_differing_from_b", fmt::format("{}", fmt::join(differing, "; "))}});
  }

  // Note [Baked host values]
  // After a refit, replay != eager(A) has two causes a reader must tell apart: a tensor the graph
  // baked in was replaced (the address probe names it), or a host value derived from the weights
  // (a Python float, a flag, a shape: `scale = w.abs().max().item()` in PWAL) was passed to an op
  // as an argument and the graph holds the capture's value. The driver records the forward afresh
  // (GraphBackend::recapture_diff); the ops whose host arguments differ from the capture's are
  // the second cause, and an op sequence that parts is a branch decided on the host from the
  // weights. The emulated backend compares its recordings; the cuda backend cannot (a CUDA graph's
  // kernel arguments are untyped bytes), and its findings say so by staying with the first cause.
  void baked_on_refit(RunContext& ctx, const CompareEvent& e, const std::string& summary, const std::string& when,
                      std::vector<std::pair<std::string, std::string>> ev) {
    const RecaptureDiff& r = e.recapture;
    if (r.control_flow_differs) {
      // Note [A read chosen at capture] (engine/pass_work.cpp): the divergence is a read, and both
      // tensors are this cause's.
      const bool read = !r.chosen_tensors.empty();
      ev.insert(ev.begin(), {"cause", "frozen at capture"});
      ev.push_back({"divergence", r.divergence});
      if (!r.divergence_source.empty()) ev.push_back({"source", r.divergence_source});
      if (read) ev.push_back({"tensors", fmt::format("{}", fmt::join(r.chosen_tensors, "; "))});
      const std::string where = r.divergence_source.empty() ? "" : fmt::format(", at {}", r.divergence_source);
      ctx.fail(name(), e, "replay vs eager(A)",
               read ? fmt::format("{} at batch size {} {}: a tensor read frozen at capture: a capture made now reads "
                                  "another tensor ({}{}): the forward picks which tensor to read on the host (a "
                                  "Python flag derived from the weights, an attribute pointed at another "
                                  "buffer), and the graph keeps reading the one the capture read; read one "
                                  "tensor and update it in place (copy_), or recapture after every refit",
                                  summary, e.batch_size, when, r.divergence, where)
                    : fmt::format("{} at batch size {} {}: control flow frozen at capture: a capture made now "
                                  "takes another path ({}{}), so the forward branches on a host value derived "
                                  "from the weights, and the graph keeps the branch the capture took; decide on "
                                  "the device (torch::where) or recapture after every refit",
                                  summary, e.batch_size, when, r.divergence, where),
               std::move(ev));
      return;
    }
    std::vector<std::string> values;
    for (const BakedValue& v : r.values) {
      values.push_back(fmt::format("{} argument {}: {} at capture, {} now{}", v.op, v.argument, v.at_capture, v.now,
                                   v.source.empty() ? "" : fmt::format(" ({})", v.source)));
    }
    const BakedValue& first = r.values.front();
    ev.insert(ev.begin(), {"cause", "host value baked"});
    ev.push_back({"op", first.op});
    ev.push_back({"value_at_capture", first.at_capture});
    ev.push_back({"value_now", first.now});
    if (!first.source.empty()) ev.push_back({"source", first.source});
    ev.push_back({"baked_values", fmt::format("{}", fmt::join(values, "; "))});
    ctx.fail(name(), e, "replay vs eager(A)",
             fmt::format("{} at batch size {} {}: a host value was baked into the graph at capture: {}{}; "
                         "the weights changed it and the graph still passes the capture's value (no tensor "
                         "was replaced): keep the value in a device tensor updated in place (a 0-dim "
                         "buffer), not a host scalar",
                         summary, e.batch_size, when, values.front(),
                         values.size() > 1 ? fmt::format(" (and {} more)", values.size() - 1) : ""),
             std::move(ev));
  }

  // Note [Frozen branches]
  // A branch frozen at capture shows two ways on fresh inputs, and the driver looks both ways
  // (passes::validation_inputs: other seeds, both signs, scales from 0 and 1e-4 to 1e5):
  //  - the replay differs from eager on an input that takes the other branch, which needs no
  //    knowledge of how the value reached the host (item(), .cpu(), a raw data_ptr() read that
  //    calls no aten op);
  //  - a fresh recording of the forward on the wide-range inputs (and on any input whose replay
  //    differs) parts from the capture's op sequence, or passes other host values to its ops
  //    (GraphBackend::recapture_diff, the emulated backend only), which names the op, and on a
  //    Python model its source line, even where the two branches' outputs happen to agree.
  // Neither sees a branch whose threshold no input reaches (beyond 1e5 times the model's inputs),
  // or one on data the inputs do not reach (a weight: that is the refit's check above).
  void validate_capture(RunContext& ctx, const ValidationEvent& e) {
    const std::int64_t b = e.batch_size;
    int checked = 0;
    for (const ValidationReplay& v : e.replays) {
      const double tolerance = v.tolerance;
      const OutputDiff d = diff_outputs(v.replay_outputs, v.eager_outputs, tolerance);
      ++checked;
      if (v.recapture.differs()) {
        frozen_branch(ctx, e, v, d);
        break;
      }
      if (d.mismatches == 0) continue;
      ctx.fail(name(), e, fmt::format("capture at batch size {}", b),
               fmt::format("the graph captured at batch size {} replays differently from eager on a "
                           "fresh input (make_inputs seed {}, floating inputs scaled by {}): max abs "
                           "{:.6g} in {} elements: control flow or a value was frozen at capture "
                           "(a branch on a value read on the host through data_ptr(), .cpu() or "
                           "item()); keep the decision on the device (torch::where)",
                           b, v.seed, v.scale, d.max_abs, d.mismatches),
               {{"cause", "frozen at capture"},
                {"batch_size", std::to_string(b)},
                {"input_seed", std::to_string(v.seed)},
                {"input_scale", fmt::format("{}", v.scale)},
                {"max_abs", fmt::format("{:.6g}", d.max_abs)},
                {"mismatched_elements", std::to_string(d.mismatches)},
                {"first_mismatch", fmt::format("output {} element {}", d.output, d.first_index)},
                {"tolerance", fmt::format("{:.6g}", tolerance)}});
      break;  // one input that shows it is enough
    }
    ctx.measure(e, "gc/replay_diff/validation_inputs", checked, "inputs");
  }

  void frozen_branch(RunContext& ctx, const ValidationEvent& e, const ValidationReplay& v, const OutputDiff& d) {
    const RecaptureDiff& r = v.recapture;
    std::string what = r.divergence;
    std::string source = r.divergence_source;
    if (!r.control_flow_differs) {
      const BakedValue& first = r.values.front();
      what = fmt::format("{} argument {} is {} in the capture and {} on this input", first.op, first.argument,
                         first.at_capture, first.now);
      source = first.source;
    }
    std::vector<std::pair<std::string, std::string>> evidence = {
        {"cause", "frozen at capture"},
        {"batch_size", std::to_string(e.batch_size)},
        {"input_seed", std::to_string(v.seed)},
        {"input_scale", fmt::format("{}", v.scale)},
        {"divergence", what}};
    if (!source.empty()) evidence.emplace_back("source", source);
    const bool read = r.control_flow_differs && !r.chosen_tensors.empty();  // Note [A read chosen at capture]
    if (read) evidence.emplace_back("tensors", fmt::format("{}", fmt::join(r.chosen_tensors, "; ")));
    evidence.emplace_back("max_abs", fmt::format("{:.6g}", d.max_abs));
    evidence.emplace_back("mismatched_elements", std::to_string(d.mismatches));
    ctx.fail(name(), e, fmt::format("capture at batch size {}", e.batch_size),
             fmt::format("{} frozen at capture: a fresh recording of the forward at batch size {} on another "
                         "input (make_inputs seed {}, floating inputs scaled by {}) {}: {}{}; the forward "
                         "decides on the host from its data (item(), .cpu(), .numpy(), a raw data_ptr() read), and the "
                         "graph keeps what the capture decided{}; {}",
                         read                     ? "a tensor read"
                         : r.control_flow_differs ? "control flow"
                                                  : "a host value computed from the inputs",
                         e.batch_size, v.seed, v.scale,
                         read                     ? "reads another tensor"
                         : r.control_flow_differs ? "takes another path"
                                                  : "passes another host value",
                         what,
                         source.empty() ? "" : fmt::format(", at {}", source),
                         d.mismatches > 0 ? fmt::format(" (replay and eager differ there by max abs {:.6g})", d.max_abs)
                                          : std::string(" (its outputs happen to agree on this input)"),
                         read ? "pick on the device (torch::where over both tensors, or index a stacked tensor "
                                "with a device index)"
                              : "keep the decision on the device (torch::where)"),
             std::move(evidence));
  }

  // Localises eager(A) != eager(B): every live tensor of A whose bytes differ from model B's
  // tensor of the same name, the ones the captured graphs read first, then by kind (parameters,
  // persistent buffers, non-persistent buffers, extra tensors). Computed once per failing cycle,
  // outside the memory counts; at most kMaxListed named. Never loses the finding: a tensor that
  // cannot be compared is skipped, a failure is reported in the text.
  std::vector<std::string> tensors_differing_from_b(RunContext& ctx, int cycle) {
    auto cached = m_differing.find(cycle);
    if (cached != m_differing.end()) return cached->second;
    UncountedScope uncounted;
    std::vector<std::string> out;
    try {
      std::set<std::string> read;
      for (const GraphView& g : ctx.graphs()) {
        for (const auto& r : g.reads) read.insert(r.name);
      }
      const std::map<std::string, std::string> kinds = ctx.tensor_kinds();
      // A rollout rank's shards of full checkpoint tensors (distributed scenarios), by live name.
      std::map<std::string, std::vector<std::string>> shards;
      for (const CheckpointEntry& entry : ctx.checkpoint_layout()) {
        if (entry.tp_rank >= 0 && entry.tp.sharded) shards[entry.live].push_back(entry.describe());
      }
      std::map<std::string, torch::Tensor> b_tensors;
      for (auto& t : ctx.reference_tensors()) b_tensors.emplace(t.name, t.tensor);
      struct Item {
        int rank;
        double max_abs;
        std::string text;
      };
      std::vector<Item> items;
      std::set<std::string> seen;
      const auto a_tensors = ctx.live_tensors();
      for (const auto& t : a_tensors) {
        if (!seen.insert(t.name).second) continue;
        const torch::Tensor& a = t.tensor;
        auto it = b_tensors.find(t.name);
        const auto kind_it = kinds.find(t.name);
        const std::string kind = kind_it == kinds.end() ? "extra tensor" : kind_it->second;
        std::string what;
        double max_abs = 0;
        if (it == b_tensors.end() || !it->second.defined() || !a.defined()) {
          if (it == b_tensors.end() && a.defined()) what = fmt::format("{} ({}, only in A)", t.name, kind);
        } else if (a.sizes() != it->second.sizes() || a.scalar_type() != it->second.scalar_type()) {
          what = fmt::format("{} ({}: {} {} vs B's {} {})", t.name, kind, c10::toString(a.scalar_type()),
                             shape_string(a.sizes()), c10::toString(it->second.scalar_type()),
                             shape_string(it->second.sizes()));
          max_abs = INFINITY;
        } else if (a.numel() > 0 && a.layout() == c10::kStrided && !a.is_meta()) {
          const torch::Tensor r = it->second.to(a.device());
          const torch::Tensor differ_mask = element_bytes(a).ne(element_bytes(r)).any(1);
          const std::int64_t differ = differ_mask.sum().item<std::int64_t>();
          if (differ > 0) {
            const std::int64_t first = differ_mask.nonzero()[0][0].item<std::int64_t>();
            std::string magnitude;
            if (c10::isFloatingType(a.scalar_type()) || c10::isIntegralType(a.scalar_type(), false)) {
              max_abs = (a.to(torch::kFloat64) - r.to(torch::kFloat64)).abs().nan_to_num(INFINITY).max().item<double>();
              magnitude = fmt::format(", max abs {:.6g}", max_abs);
            }
            const auto held = shards.find(t.name);
            what = fmt::format("{} ({}{}: {} of {} elements, first at {}{})", t.name, kind,
                               held == shards.end() ? std::string()
                                                    : fmt::format(", holding {}", fmt::join(held->second, ", ")),
                               differ, a.numel(), first, magnitude);
          }
        }
        if (what.empty()) continue;
        const int rank = (read.count(t.name) ? 0 : 4) + (kind == "parameter" ? 0 : kind == "persistent buffer" ? 1
                                                                           : kind == "non-persistent buffer" ? 2 : 3);
        items.push_back({rank, max_abs, std::move(what)});
      }
      std::stable_sort(items.begin(), items.end(), [](const Item& x, const Item& y) {
        if (x.rank != y.rank) return x.rank < y.rank;
        return x.max_abs > y.max_abs;
      });
      for (std::size_t i = 0; i < items.size() && i < kMaxListed; ++i) out.push_back(items[i].text);
      if (items.size() > kMaxListed) out.push_back(fmt::format("and {} more", items.size() - kMaxListed));
    } catch (const c10::Error& e) {
      out.push_back(fmt::format("(could not compare A's tensors with B's: {})", e.what_without_backtrace()));
    } catch (const std::exception& e) {
      out.push_back(fmt::format("(could not compare A's tensors with B's: {})", e.what()));
    }
    m_differing[cycle] = out;
    return out;
  }

  static constexpr std::size_t kMaxListed = 8;
  struct Prefill {
    std::vector<std::int64_t> good, bad;  // eager-only batch sizes that agree / disagree with B
  };
  std::map<int, Prefill> m_prefill;  // by cycle
  bool m_nondeterminism_reported = false;
  std::map<int, std::vector<std::string>> m_differing;
};

}  // namespace

GRAPHCHECK_REGISTER_PROBE_IN("replay_diff",
                             "replay(A) vs eager(A) vs eager(B) after every capture and refit; "
                             "captures validated on fresh inputs",
                             ReplayDiffProbe, ::graphcheck::Pass::observe,
                             ::graphcheck::Pass::validate);

}  // namespace graphcheck
