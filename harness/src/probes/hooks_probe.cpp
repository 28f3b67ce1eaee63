// hooks: the hook ledger. Models announce hook calls (GRAPHCHECK_HOOK) and declare the hooks
// they promise (LifecycleModel::expected_hooks()). Fails when a declared hook did not run for a
// load (checkpoint, dummy, each refit) on a module it covers, ran out of the declared order, ran
// inside forward or replay, or when a second process_weights_after_loading() changes any
// tensor's content (xxHash fingerprint) or address (not idempotent). The ledger runs in the
// observe pass; the idempotence check needs a second PWAL, which the driver runs in a pass of its
// own (on its own model instance, after the loader's PWAL of every load) and hands over as
// snapshots before and after (IdempotenceEvent).

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/nn/module.h>
#include <torch/types.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "glob.h"
#include "graphcheck/probe.h"
#include "tensor_format.h"

namespace graphcheck {
namespace {

struct Call {
  std::string module;
  std::string hook;
};

// One load: the initial load (until the first forward) or one refit cycle.
struct Window {
  std::string kind;  // checkpoint | dummy | refit
  int cycle = 0;
  std::vector<Call> calls;
  // A refit of some prefixes only: the live tensors its loads stream to (Note [Hooks on a partial
  // refit]); unset for a refit of everything.
  std::optional<std::set<std::string>> streamed_live;
};

bool inside_forward(Phase phase) {
  return phase == Phase::warmup || phase == Phase::capture || phase == Phase::replay ||
         phase == Phase::compare;
}

// The model itself has two paths: "(model)", the LifecycleModel (a C++ model's hooks announced
// on `this`), and "(root)", its root module (a Python model's `graphcheck.hook(self, ...)`). A
// hook that ran on either ran on the model.
bool is_model_path(const std::string& path) { return path == "(model)" || path == "(root)"; }
bool same_module(const std::string& a, const std::string& b) {
  return a == b || (is_model_path(a) && is_model_path(b));
}

// Note [Hooks on a partial refit]: a refit that streams only some prefixes (an RL sync of the
// layers a step changed) brings nothing new to a module none of whose tensors it streams to, and
// a PWAL that re-derives only what changed (a dirty flag per module) rightly skips it. Such a
// module is not required to run its hooks on that refit. What the refit streams to is read as
// live tensors, through the checkpoint layout (a fused qkv_proj is touched by a refit of q_proj);
// the model itself is always touched.
bool touched_by(const std::string& module, const std::optional<std::set<std::string>>& streamed_live) {
  if (!streamed_live || is_model_path(module)) return true;
  const std::string inside = module + ".";
  const auto it = streamed_live->lower_bound(inside);
  return it != streamed_live->end() && it->compare(0, inside.size(), inside) == 0;
}

std::string load_name(const Window& w) {
  if (w.kind == "refit") return fmt::format("refit cycle {}", w.cycle);
  return fmt::format("{} load", w.kind);
}

class HooksProbe final : public EmptyProbe {
 public:
  [[nodiscard]] std::string name() const override { return "hooks"; }

  void on_load_begin(RunContext& ctx, const LoadEvent& e) override {
    if (ctx.pass() != Pass::observe) return;
    if (!e.refit) {
      m_window = Window{to_string(e.format), e.cycle, {}, std::nullopt};
      return;
    }
    const CycleStep* step = ctx.cycle_step(e.cycle);
    if (!m_window || !step || step->prefixes.empty()) return;
    // The live tensors this load streams to (Note [Hooks on a partial refit]).
    std::map<std::string, std::string> live_of;
    for (const CheckpointEntry& entry : ctx.checkpoint_layout()) live_of.emplace(entry.checkpoint, entry.live);
    if (!m_window->streamed_live) m_window->streamed_live.emplace();
    for (const std::string& name : e.expected) {
      const auto it = live_of.find(name);
      m_window->streamed_live->insert(it == live_of.end() ? name : it->second);
    }
  }
  void on_refit_begin(RunContext& ctx, const PhaseEvent& e) override {
    if (ctx.pass() != Pass::observe) return;
    m_window = Window{"refit", e.cycle, {}, std::nullopt};
  }
  void on_refit_end(RunContext& ctx, const PhaseEvent&) override { close_window(ctx); }
  void on_warmup_begin(RunContext& ctx, const PhaseEvent&) override { close_window(ctx); }

  void on_hook(RunContext& ctx, const HookEvent& e) override {
    if (ctx.pass() != Pass::observe) return;
    if (inside_forward(e.phase)) {
      auto& count = m_in_forward[{e.module_path, e.hook, to_string(e.phase)}];
      if (count++ == 0) {
        Finding f;
        f.probe = "hooks";
        f.phase = to_string(e.phase);
        f.cycle = e.cycle;
        f.subject = fmt::format("{} on {}", e.hook, e.module_path);
        f.message = fmt::format(
            "hook '{}' of module '{}' ran inside forward (phase {}): a finalize in forward puts "
            "heavy work (allocate new, free old) into the first forward or the captured graph; "
            "run it in process_weights_after_loading() only",
            e.hook, e.module_path, to_string(e.phase));
        f.evidence = {{"hook", e.hook}, {"module", e.module_path}, {"phase", to_string(e.phase)}};
        ctx.add_finding(std::move(f));
      }
      return;
    }
    if (m_window) m_window->calls.push_back({e.module_path, e.hook});
  }

  // Idempotence (the idempotence pass): the driver ran a second PWAL right after the loader's;
  // it must change nothing.
  void on_idempotence_checked(RunContext& ctx, const IdempotenceEvent& e) override {
    if (ctx.pass() != Pass::idempotence) return;
    const auto& after = e.after;
    for (const auto& [name, b] : e.before) {
      auto it = after.find(name);
      std::string what;
      std::vector<std::pair<std::string, std::string>> evidence = {{"tensor", name}};
      if (it == after.end()) {
        what = "it disappeared";
      } else if (it->second.address != b.address || it->second.sizes != b.sizes) {
        what = fmt::format("it moved from {} {} to {} {}", address_string(b.address),
                           shape_string(b.sizes), address_string(it->second.address),
                           shape_string(it->second.sizes));
        evidence.push_back({"old_address", address_string(b.address)});
        evidence.push_back({"new_address", address_string(it->second.address)});
      } else if (it->second.fingerprint != b.fingerprint) {
        what = fmt::format("its content changed (xxh3 {:016x} -> {:016x})", b.fingerprint,
                           it->second.fingerprint);
        evidence.push_back({"fingerprint_before", fmt::format("{:016x}", b.fingerprint)});
        evidence.push_back({"fingerprint_after", fmt::format("{:016x}", it->second.fingerprint)});
      } else {
        continue;
      }
      Finding f;
      f.probe = "hooks";
      f.cycle = e.cycle;
      f.subject = name;
      f.message = fmt::format(
          "tensor '{}' is not stable under a second process_weights_after_loading() (cycle {}): "
          "{}; PWAL must be idempotent, since both the loader and load_weights() may call it",
          name, e.cycle, what);
      f.evidence = std::move(evidence);
      ctx.add_finding(std::move(f));
    }
  }

  void on_scenario_end(RunContext&) override { m_window.reset(); }

 private:
  void close_window(RunContext& ctx) {
    if (!m_window || ctx.pass() != Pass::observe) return;
    const Window w = std::move(*m_window);
    m_window.reset();
    const std::vector<std::string> modules = ctx.module_paths();
    const std::vector<ExpectedHook> expected = ctx.expected_hooks();

    std::map<std::string, std::pair<int, int>> span;  // hook -> first, last call index
    for (int i = 0; i < static_cast<int>(w.calls.size()); ++i) {
      auto [it, inserted] = span.emplace(w.calls[i].hook, std::make_pair(i, i));
      if (!inserted) it->second.second = i;
    }
    Measurement m;
    m.tag = "gc/hooks/calls";
    m.value = static_cast<double>(w.calls.size());
    m.unit = "calls";
    m.phase = w.kind == "refit" ? "refit" : "load";
    m.cycle = w.cycle;
    ctx.add_measurement(std::move(m));

    for (const ExpectedHook& ex : expected) {
      if (std::find(ex.on.begin(), ex.on.end(), w.kind) == ex.on.end()) continue;
      std::vector<std::string> matched;
      for (const auto& path : modules) {
        // The model's own paths are named, never matched by a wildcard: "*" and "**" mean its
        // modules ("**" matched the model twice over, once per path, beside every module).
        if (is_model_path(path) ? ex.module == path : path_matches(ex.module, path)) matched.push_back(path);
      }
      if (matched.empty()) {
        add(ctx, w, ex.hook,
            fmt::format("declared hook '{}' names modules '{}', which matches no module of the "
                        "model: fix expected_hooks() (module paths look like '{}')",
                        ex.hook, ex.module, modules.size() > 2 ? modules[2] : std::string("layers.0")),
            {{"hook", ex.hook}, {"pattern", ex.module}});
        continue;
      }
      for (const auto& module : matched) {
        const bool ran = std::any_of(w.calls.begin(), w.calls.end(), [&](const Call& c) {
          return same_module(c.module, module) && c.hook == ex.hook;
        });
        if (ran) continue;
        if (!touched_by(module, w.streamed_live)) continue;  // Note [Hooks on a partial refit]
        add(ctx, w, fmt::format("{} on {}", ex.hook, module),
            fmt::format("hook '{}' did not run for module '{}' on the {}: the loader calls "
                        "process_weights_after_loading() for every load format and every refit; "
                        "call the hook from there (not only from load_weights() or forward())",
                        ex.hook, module, load_name(w)),
            {{"hook", ex.hook},
             {"module", module},
             {"load", load_name(w)},
             {"calls_in_this_load", std::to_string(w.calls.size())}});
      }
      auto h = span.find(ex.hook);
      for (const auto& before : ex.after) {
        auto b = span.find(before);
        if (h == span.end() || b == span.end()) continue;
        if (h->second.first > b->second.first && b->second.second < h->second.second) continue;
        add(ctx, w, ex.hook,
            fmt::format("hook '{}' ran before '{}' finished on the {} (calls: {}): the declared "
                        "order is '{}' after '{}'",
                        ex.hook, before, load_name(w), sequence(w), ex.hook, before),
            {{"hook", ex.hook}, {"must_follow", before}, {"load", load_name(w)},
             {"calls", sequence(w)}});
      }
    }
  }

  static std::string sequence(const Window& w) {
    std::vector<std::string> parts;
    for (const auto& c : w.calls) parts.push_back(c.hook + "@" + c.module);
    return fmt::format("{}", fmt::join(parts, ", "));
  }

  static void add(RunContext& ctx, const Window& w, std::string subject, std::string message,
                  std::vector<std::pair<std::string, std::string>> evidence) {
    Finding f;
    f.probe = "hooks";
    f.phase = w.kind == "refit" ? "refit" : "load";
    f.cycle = w.cycle;
    f.subject = std::move(subject);
    f.message = std::move(message);
    f.evidence = std::move(evidence);
    ctx.add_finding(std::move(f));
  }

  std::optional<Window> m_window;
  std::map<std::tuple<std::string, std::string, std::string>, int> m_in_forward;
};

}  // namespace

GRAPHCHECK_REGISTER_PROBE_IN("hooks",
                             "declared hooks run for every load format and refit, in order, never "
                             "in forward; PWAL is idempotent",
                             HooksProbe, ::graphcheck::Pass::observe,
                             ::graphcheck::Pass::idempotence);

}  // namespace graphcheck
