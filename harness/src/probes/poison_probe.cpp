// poison: makes missed loads and stale reads loud, and counts what survives (DESIGN §1.4).
//  - Staged tensors (`poison.staged` patterns): at the first load of every refit, right after the
//    model's stage_for_refit(), every checkpoint tensor that matches and that the refit streams
//    is filled with poison. After each load, every staged tensor that load streamed must hold no
//    poison any more: poison that survives means the load landed somewhere else (a loader bound
//    to a stale tensor).
//  - `poison.poison_before_refit: true`: every parameter and persistent buffer a refit streams is
//    poisoned before the refit; after its PWAL the live tensor of each name must hold none (live
//    tensors may hold a kernel layout that only PWAL writes, so the check waits for it).
//  - After every refit, each named float or uint8 read-set storage that no live tensor references
//    (orphaned) is poisoned, so that a graph still reading it replays NaN instead of plausible
//    stale numbers.
//  - Every replay output is scanned for NaN where model B's forward is finite.
//  - After the wake of a sleep cycle (and the reload a level-2 wake is followed by), every tensor
//    a captured graph reads must no longer hold the sleep's discard poison: nothing kept,
//    restored or recomputed it (a buffer the engine does not save, an undeclared tensor).
// Patterns and survivor counting: poison.h. The fills are the driver's, in the poison pass
// (passes/fills.cpp, PoisonFillEvent; DESIGN §2.2): nothing poisoned reaches another check's
// verdict. The probe counts survivors and judges; its own work is kept out of the memory probe's
// counts (UncountedScope).

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/nn/module.h>
#include <torch/types.h>

#include <map>
#include <set>

#include "counting_allocator.h"
#include "address_index.h"
#include "glob.h"
#include "graphcheck/checkpoint.h"
#include "graphcheck/probe.h"
#include "poison.h"
#include "tensor_format.h"

namespace graphcheck {
namespace {

std::string hex_byte(std::uint8_t b) { return fmt::format("0x{:02X}", b); }

struct Orphan {
  std::string what;  // "'layers.0.weight_scale_inv' (uint8 [2, 2] at 0x...)"
};

class PoisonProbe final : public EmptyProbe {
 public:
  [[nodiscard]] std::string name() const override { return "poison"; }

  void on_refit_begin(RunContext&, const PhaseEvent&) override {
    m_staged.clear();
    m_before.clear();
    m_orphans.clear();
    m_staged_survivors = false;
    m_streamed.clear();
    m_unstreamed.clear();
  }

  // What the driver poisoned (passes/fills.cpp): before a refit, a refit's staging tensors right
  // after stage_for_refit(), orphaned read-set storages after a refit.
  void on_poison_filled(RunContext& ctx, const PoisonFillEvent& e) override {
    switch (e.kind) {
      case PoisonFillEvent::Kind::before_refit:
        m_before = e.names;
        ctx.measure(e, "gc/poison/poisoned_before_refit/tensors", static_cast<double>(e.tensors), "tensors");
        ctx.measure(e, "gc/poison/poisoned_before_refit/bytes", static_cast<double>(e.bytes), "bytes");
        break;
      case PoisonFillEvent::Kind::staged: staged(ctx, e); break;
      case PoisonFillEvent::Kind::orphans:
        for (const auto& what : e.orphans) m_orphans.push_back({what});
        ctx.measure(e, "gc/poison/orphaned_storages_poisoned", static_cast<double>(m_orphans.size()), "storages");
        ctx.measure(e, "gc/poison/orphaned_bytes_poisoned", static_cast<double>(e.bytes), "bytes");
        break;
    }
  }

  void staged(RunContext& ctx, const PoisonFillEvent& e) {
    const Scenario& s = ctx.scenario();
    m_staged = e.staged;
    ctx.measure(e, "gc/poison/staged/tensors", static_cast<double>(m_staged.size()), "tensors");
    ctx.measure(e, "gc/poison/staged/bytes", static_cast<double>(e.bytes), "bytes");
    for (const auto& pattern : e.unused_patterns) {
      ctx.fail(name(), e, pattern,
               fmt::format("poison.staged pattern '{}' matches no tensor of the checkpoint layout "
                           "after stage_for_refit() in refit cycle {}, so nothing was poisoned: "
                           "fix the pattern in {} (tensors look like '{}')",
                           pattern, e.cycle, s.file, example_name(ctx)));
    }
  }

  void on_load_end(RunContext& ctx, const LoadEvent& e) override {
    if (!e.refit || m_staged.empty()) return;
    UncountedScope uncounted;
    const std::string load = e.bucket.empty() ? fmt::format("the load of refit cycle {}", e.cycle)
                                              : fmt::format("bucket '{}' of refit cycle {}", e.bucket, e.cycle);
    for (const auto& item : e.streamed) {
      m_streamed.insert(item.name);
      auto it = m_staged.find(item.name);
      if (it == m_staged.end()) continue;
      const torch::Tensor& staged = it->second;
      const Survivors s = count_survivors(staged, item.tensor);
      if (s.count == 0) continue;
      m_staged_survivors = true;
      ctx.fail(name(), e, item.name,
               fmt::format("staged tensor '{}' still holds the poison in {} of {} elements (first "
                           "at element {}) after {}, which streamed it: the load landed in "
                           "another tensor (a weight_loader bound to a stale tensor?) or skipped "
                           "part of it",
                           item.name, s.count, s.elements, s.first, load),
               evidence(item.name, staged, s, e.bucket));
    }
  }

  // Staging tensors the refit never streamed may legitimately be discarded by PWAL (a partial
  // refit); the ones still holding poison are remembered, to explain NaN in a later replay.
  void on_pwal_begin(RunContext& ctx, const PhaseEvent& e) override {
    if (e.cycle == 0 || m_staged.empty()) return;
    UncountedScope uncounted;
    for (const auto& [name, tensor] : m_staged) {
      if (m_streamed.count(name)) continue;
      if (count_survivors(tensor, torch::Tensor()).count > 0) m_unstreamed.push_back(name);
    }
    ctx.measure(e, "gc/poison/staged/not_streamed_still_poisoned", static_cast<double>(m_unstreamed.size()), "tensors");
    m_staged.clear();  // the staging buffers are the model's to free after PWAL
  }

  void on_refit_end(RunContext& ctx, const PhaseEvent& e) override {
    m_staged.clear();  // also when no PWAL ran: never keep the model's staging buffers alive
    UncountedScope uncounted;
    check_before_refit(ctx, e);
  }

  void on_wake_end(RunContext&, const SleepEvent& e) override {
    m_woke_cycle = e.cycle;
    m_woke_level = e.level;
    m_woke_reported.clear();
  }

  // After the replay: scratch a graph writes before it reads is rewritten by then, while state
  // nothing kept, restored or recomputed still holds the poison.
  void check_woken(RunContext& ctx, const ReplayEvent& e) {
    if (e.cycle != m_woke_cycle || !e.graph) return;
    UncountedScope uncounted;
    std::map<std::string, torch::Tensor> live, reference;
    for (auto& t : ctx.live_tensors()) live.emplace(t.name, t.tensor);
    bool have_reference = false;
    std::map<std::string, std::string> kinds;
    for (const ResolvedRead& r : e.graph->reads) {
      // What the graph reads: the range it baked in, over the storage it holds (a backend that
      // holds none: the live tensor of that name).
      torch::Tensor t;
      bool stale = false;  // the graph reads a storage the live tensor of its name no longer has
      std::string subject = r.name.empty() ? fmt::format("undeclared tensor at {}", address_string(r.read.address)) : r.name;
      auto it = r.name.empty() ? live.end() : live.find(r.name);
      if (r.read.held && r.read.dtype != c10::ScalarType::Undefined) {
        const auto* base = static_cast<const char*>(r.read.held.data());
        const auto offset = static_cast<const char*>(r.read.address) - base;
        const auto item = static_cast<std::ptrdiff_t>(c10::elementSize(r.read.dtype));
        if (offset < 0 || offset % item != 0) continue;
        t = torch::empty({0}, torch::TensorOptions().dtype(r.read.dtype).device(r.read.held.device()));
        t.set_(r.read.held, offset / item, r.read.sizes, r.read.strides);
        stale = it != live.end() && (!it->second.has_storage() ||
                                     it->second.storage().unsafeGetStorageImpl() != r.read.held.unsafeGetStorageImpl());
      } else if (it != live.end()) {
        t = it->second;
      }
      if (!t.defined() || t.numel() == 0 || !poisonable(t.scalar_type())) continue;
      if (!m_woke_reported.insert(subject).second) continue;
      torch::Tensor expected;
      if (it != live.end() && !stale && t.sizes() == it->second.sizes()) {
        if (!have_reference) {
          for (auto& rt : ctx.reference_tensors()) reference.emplace(rt.name, rt.tensor);
          kinds = ctx.tensor_kinds();
          have_reference = true;
        }
        auto ref = reference.find(r.name);
        if (ref != reference.end()) expected = ref->second;
      }
      const Survivors s = count_survivors(t, expected);
      if (s.count == 0) continue;
      const auto kind = kinds.find(r.name);
      const std::string what = r.name.empty() ? subject
                                              : fmt::format("'{}' ({})", r.name, kind == kinds.end() ? "tensor" : kind->second);
      const bool buffer = kind != kinds.end() && kind->second.find("buffer") != std::string::npos;
      const std::string why =
          stale ? "the graph still reads a storage that the live tensor of this name no longer "
                  "has (the model replaced the tensor instead of updating it in place), and no "
                  "engine keeps or restores a storage nothing live references"
          : r.name.empty()
              ? "it is not a declared tensor (parameter, buffer or extra_tensors() entry), so the "
                "engine neither kept nor restored it: declare it, and keep it in a registered buffer"
          : m_woke_level == 1
              ? "the engine kept every declared tensor's storage at level 1, yet this one holds "
                "the poison: it shares a storage the engine could not tell apart"
          : buffer
              ? "it is a registered buffer, which the engine must save before a level-2 sleep and "
                "copy back at the wake (vLLM #16564), and PWAL does not recompute it: the engine's "
                "buffer save is missing"
              : "a level-2 sleep discards everything; the reload restores the checkpoint tensors and "
                "the engine the registered buffers: a tensor computed at construction must be a "
                "registered buffer, or PWAL must recompute it in place";
      ctx.fail(name(), e, subject,
               fmt::format("{}, which the graph for batch size {} reads, still holds the sleep's discard "
                           "poison in {} of {} elements (first at element {}) {}: {}",
                           what, e.batch_size, s.count, s.elements, s.first, ctx.after_cycle(e.cycle), why),
               {{"tensor", subject},
                {"stale_storage", stale ? "yes" : "no"},
                {"sleep_level", std::to_string(m_woke_level)},
                {"surviving_elements", std::to_string(s.count)},
                {"elements", std::to_string(s.elements)},
                {"first_element", std::to_string(s.first)},
                {"dtype", c10::toString(t.scalar_type())},
                {"shape", shape_string(t.sizes())},
                {"poison", hex_byte(poison_byte(t.scalar_type()))},
                {"counted", s.basis}});
    }
  }

  void on_replay_end(RunContext& ctx, const ReplayEvent& e) override { check_woken(ctx, e); }

  // A replay output holds NaN: the driver ran model B on the same inputs.
  void on_replay_nan(RunContext& ctx, const ReplayNanEvent& e) override {
    UncountedScope uncounted;
    const TensorList& reference = e.reference_outputs;
    std::int64_t count = 0, first = -1, elements = 0, output = -1;
    for (std::size_t i = 0; i < e.replay_outputs.size(); ++i) {
      const torch::Tensor& out = e.replay_outputs[i];
      if (!out.defined() || !c10::isFloatingType(out.scalar_type()) || out.numel() == 0) continue;
      torch::Tensor nan = out.isnan().flatten();
      if (!nan.any().item<bool>()) continue;
      // NaN that model B computes as well is the model's own arithmetic, not poison.
      if (i < reference.size() && reference[i].sizes() == out.sizes()) {
        nan = nan.logical_and(reference[i].isnan().flatten().logical_not());
      }
      const std::int64_t c = nan.sum().item<std::int64_t>();
      if (c == 0) continue;
      if (output < 0) {
        output = static_cast<std::int64_t>(i);
        first = nan.nonzero()[0][0].item<std::int64_t>();
        elements = out.numel();
      }
      count += c;
    }
    if (count == 0) return;
    const std::string when = ctx.after_cycle(e.cycle);
    std::string cause;
    if (!m_orphans.empty()) {
      std::vector<std::string> what;
      for (const auto& o : m_orphans) what.push_back(o.what);
      cause = fmt::format(
          ": the graph still reads storage that no live tensor references any more, which "
          "graphcheck poisoned after the refit ({}): the model registered another tensor in its "
          "place (a rebind, or a staging tensor never folded back) instead of updating it in "
          "place with copy_()",
          fmt::join(what, ", "));
    } else if (!m_unstreamed.empty()) {
      cause = fmt::format(
          ": staging tensors of the names this refit streams were never delivered and still held "
          "the poison before PWAL ({}), and the model folded them into its live weights: the "
          "refit stream lacks them (a checkpoint or bucket that misses a tensor)",
          fmt::join(m_unstreamed, ", "));
    } else if (m_staged_survivors) {
      cause = ": poison left in a staging tensor by a load that went elsewhere reached the "
              "live weights (see the surviving-poison findings)";
    } else {
      cause = ": a poisoned byte that was never overwritten, or a NaN the model computes, "
              "reached the output";
    }
    ctx.fail(name(), e, fmt::format("replay output (batch size {})", e.batch_size),
             fmt::format("the replay at batch size {} {} produced {} NaN in its outputs where "
                         "model B's forward is finite (first in output {} of {} elements, at "
                         "element {}){}",
                         e.batch_size, when, count, output, elements, first, cause),
             {{"nan_elements", std::to_string(count)},
              {"output", std::to_string(output)},
              {"elements", std::to_string(elements)},
              {"first_nan_element", std::to_string(first)},
              {"orphaned_storages_poisoned", std::to_string(m_orphans.size())}});
  }

 private:
  // Integer and bool storages may hold indices or masks: 0xFF there would turn a stale replay
  // into out-of-bounds reads instead of NaN. uint8 holds quantized payloads and UE8M0 scales.
  static bool poisonable(c10::ScalarType dtype) {
    return c10::isFloatingType(dtype) || dtype == torch::kUInt8;
  }

  static std::string example_name(RunContext& ctx) {
    auto layout = ctx.checkpoint_layout();
    return layout.empty() ? "" : layout.front().checkpoint;
  }

  static std::vector<std::pair<std::string, std::string>> evidence(const std::string& tensor,
                                                                   const torch::Tensor& t,
                                                                   const Survivors& s,
                                                                   const std::string& bucket) {
    std::vector<std::pair<std::string, std::string>> ev = {
        {"tensor", tensor},
        {"surviving_elements", std::to_string(s.count)},
        {"elements", std::to_string(s.elements)},
        {"first_element", std::to_string(s.first)},
        {"first_byte_offset", std::to_string(s.first * static_cast<std::int64_t>(t.element_size()))},
        {"dtype", c10::toString(t.scalar_type())},
        {"shape", shape_string(t.sizes())},
        {"address", address_string(t.data_ptr())},
        {"poison", hex_byte(poison_byte(t.scalar_type()))},
        {"counted", s.basis}};
    if (!bucket.empty()) ev.push_back({"bucket", bucket});
    return ev;
  }

  void check_before_refit(RunContext& ctx, const PhaseEvent& e) {
    if (m_before.empty()) return;
    std::map<std::string, CheckpointEntry> layout;
    for (auto& entry : ctx.checkpoint_layout()) layout.emplace(entry.checkpoint, std::move(entry));
    std::map<std::string, torch::Tensor> expected_live;
    bool need_reference = false;
    for (const auto& n : m_before) {
      auto it = layout.find(n);
      if (it != layout.end() && it->second.region.defined() && !poison_is_nan(it->second.region.scalar_type())) {
        need_reference = true;
      }
    }
    if (need_reference) {
      for (auto& t : ctx.reference_tensors()) expected_live.emplace(t.name, t.tensor);
    }
    for (const auto& n : m_before) {
      auto it = layout.find(n);
      if (it == layout.end() || !it->second.region.defined()) continue;  // the address probe's business
      const CheckpointEntry& entry = it->second;
      torch::Tensor expected;
      auto ref = expected_live.find(entry.live);
      if (ref != expected_live.end() && ref->second.defined()) {
        expected = entry.region_of(ref->second);
      }
      const Survivors s = count_survivors(entry.region, expected);
      if (s.count == 0) continue;
      ctx.fail(name(), e, n,
               fmt::format("tensor {} still holds the poison written before refit cycle {} in "
                           "{} of {} elements (first at element {}) after the refit's PWAL, "
                           "although the refit streamed it: its load went elsewhere, or poison "
                           "from a tensor the refit missed spread into it in post-processing",
                           entry.describe(), e.cycle, s.count, s.elements, s.first),
               evidence(n, entry.region, s, ""));
    }
    m_before.clear();
  }

  std::map<std::string, torch::Tensor> m_staged;  // this refit's staging tensors, by name
  bool m_staged_survivors = false;
  std::vector<std::string> m_before;  // names poisoned before this refit
  std::vector<Orphan> m_orphans;      // poisoned after the last refit
  std::set<std::string> m_streamed;   // names this refit streamed
  std::vector<std::string> m_unstreamed;  // staged, never streamed, still poisoned before PWAL
  int m_woke_cycle = -1;                  // the last sleep cycle, from its wake on
  int m_woke_level = 0;
  std::set<std::string> m_woke_reported;  // tensors reported after that wake
};

}  // namespace

GRAPHCHECK_REGISTER_PROBE_IN("poison",
                             "poisoned staging bytes are all overwritten by the refit, orphaned "
                             "graph inputs are poisoned after each refit, replay outputs hold no "
                             "NaN",
                             PoisonProbe, ::graphcheck::Pass::poison);

}  // namespace graphcheck
