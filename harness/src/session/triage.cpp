// Triage (DESIGN §2.10, session.h): findings are symptoms, and the report leads with causes.
//
// Note [Triage]
// One bug shows in many probes, cycles, batch sizes and passes: a PWAL that rebinds a buffer is
// an address finding per refit, a stale replay per batch size, a coverage gap, NaN outputs once
// the orphaned storage is poisoned, memory growth and a second-PWAL instability. The reader
// wants one line naming what to fix. So findings group by what they name:
//  - strong names (evidence "tensor" and "tensors", a hook and its module, an undeclared range, a
//    cause tag such as "host value baked", the driver's own failure) join findings into one cause;
//  - weak names (the tensors that differ from model B) attach a finding to a cause that names one
//    of them strongly, or to a hook's cause whose module holds it; otherwise they form a cause;
//  - a hook that did not run (on a rank, in a load) takes in the value findings of the tensors
//    its module holds in that cycle, on its ranks, and leads them (Note [Missed hooks explain their
//    module's state]);
//  - a finding that names nothing (a stale replay, a NaN output, memory growth) joins the leading
//    cause of its cycle, else the leading cause.
// The primary finding of a cause is the most specific probe's (the driver's failure, then the
// cause tags of replay_diff, stream_order, census, address, hooks, ...), earliest first; its
// phrase is what the summary says. Probes only write findings; this reads them, so a new probe's
// findings group by their evidence "tensor" without a change here.

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "graphcheck/engine/session.h"

namespace graphcheck::session {

namespace {

std::string evidence_of(const Finding& f, const std::string& key) {
  for (const auto& [k, v] : f.evidence) {
    if (k == key) return v;
  }
  return {};
}
bool has_evidence(const Finding& f, const std::string& key) {
  return std::any_of(f.evidence.begin(), f.evidence.end(), [&](const auto& kv) { return kv.first == key; });
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = text.find("; ", start);
    std::string item = text.substr(start, end == std::string::npos ? std::string::npos : end - start);
    // "layers.1.qkv (parameter: 256 of 1024 elements ...)": the name only.
    if (const auto paren = item.find(" ("); paren != std::string::npos) item.resize(paren);
    if (!item.empty()) out.push_back(item);
    if (end == std::string::npos) break;
    start = end + 2;
  }
  return out;
}

bool is_cause_tag(const std::string& tag) {
  return tag == "nondeterministic" || tag == "host value baked" || tag == "frozen at capture";
}

struct Names {
  std::vector<std::string> strong;   // "tensor:x", "hook:x", "tag:x", "subject:x"
  std::vector<std::string> tensors;  // the strong tensor names, for the subject
  std::vector<std::string> shown;    // what the subject shows: checkpoint names where given
  std::vector<std::string> weak;     // tensors that differ from model B
  std::string module;                // a hook finding's module
};

// "layers.*.hc_attn_fn_broadcast": a name with its numeric components (layers, experts) as *, so
// that the same tensor of every layer is one cause (the layers share their code).
std::string role_of(const std::string& name) {
  std::string out;
  std::size_t start = 0;
  while (start <= name.size()) {
    const std::size_t end = std::min(name.find('.', start), name.size());
    const std::string part = name.substr(start, end - start);
    const bool number = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    out += number ? "*" : part;
    if (end == name.size()) break;
    out += '.';
    start = end + 1;
  }
  return out;
}

Names names_of(const Finding& f) {
  Names n;
  const auto add_tensor = [&](const std::string& t) {
    if (t.empty()) return;
    n.strong.push_back("tensor:" + role_of(t));
    n.tensors.push_back(t);
  };
  add_tensor(evidence_of(f, "tensor"));
  for (const auto& t : split_list(evidence_of(f, "tensors"))) add_tensor(t);
  // The checkpoint's name where the finding gives one (a shard of a fused tensor, a transposed
  // one): what the engineer looks for in the loader.
  const std::string checkpoint = evidence_of(f, "checkpoint_name");
  n.shown = checkpoint.empty() ? n.tensors : std::vector<std::string>{checkpoint};
  if (const std::string hook = evidence_of(f, "hook"); !hook.empty()) {
    n.strong.push_back("hook:" + hook);
    n.module = evidence_of(f, "module");
    // Hooks that did not run in the same load: one PWAL that was not called.
    if (has_evidence(f, "calls_in_this_load")) {
      n.strong.push_back(fmt::format("missed in:{}:{}", evidence_of(f, "load"), f.cycle));
    }
  }
  if (const std::string tag = evidence_of(f, "cause"); is_cause_tag(tag)) n.strong.push_back("tag:" + tag);
  // Every read of memory no declared tensor covers: one cause (declare what the forward reads).
  if (f.subject.rfind("undeclared tensor at ", 0) == 0) {
    n.strong.push_back("undeclared");
    n.shown.push_back(f.subject.substr(std::string("undeclared tensor at ").size()));
  }
  // The driver's own failures, a probe that threw, a flaky check: about what their subject says.
  if (n.strong.empty() && (f.probe == "driver" || f.probe == "harness" || f.probe == "repeat")) {
    n.strong.push_back("subject:" + f.subject);
  }
  for (const auto& t : split_list(evidence_of(f, "tensors_differing_from_b"))) n.weak.push_back(t);
  return n;
}

// Lower is more specific: what the primary finding of a cause is. Where the census finds bytes
// no load wrote in a tensor whose value also depends on the load's order, the unwritten part is
// the cause (two shards written to the same rows, one shard's rows left unwritten: whichever
// arrives last wins), and the census names the checkpoint tensor whose rows they are.
int specificity(const Finding& f) {
  const std::string tag = evidence_of(f, "cause");
  if (f.probe == "driver" && f.subject == "model code") return 0;  // model code threw
  if (f.probe == "driver") return 8;  // the driver's checks of what the model reported
  if (tag == "nondeterministic") return 1;
  if (tag == "host value baked" || tag == "frozen at capture") return 2;
  if (f.probe == "transfer" || f.probe == "ranks") return 3;
  if (f.probe == "census") return 4;
  if (f.probe == "stream_order") return 5;
  if (f.probe == "address") return 6;
  if (f.probe == "hooks") return 7;
  if (f.probe == "init_count") return 8;
  if (f.probe == "poison" && has_evidence(f, "tensor")) return 9;
  if (f.probe == "replay_diff" && has_evidence(f, "tensors_differing_from_b")) return 10;
  if (f.probe == "coverage") return 11;
  if (f.probe == "harness" || f.probe == "repeat") return 12;
  if (f.probe == "replay_diff") return 14;
  if (f.probe == "poison") return 15;
  if (f.probe == "memory") return 16;
  return 13;  // a probe of a plugin
}

// "layers.{0,1}.hc_attn_fn_broadcast": names that differ in their first numeric component only,
// folded; at most `shown` patterns, then how many more.
std::string fold_names(const std::vector<std::string>& names, std::size_t shown = 3) {
  std::map<std::string, std::vector<std::string>> groups;  // pattern with {} -> the numbers
  std::vector<std::string> order;
  for (const auto& name : names) {
    std::string key = name;
    std::string number;
    std::size_t start = 0;
    while (start <= name.size()) {
      const std::size_t end = std::min(name.find('.', start), name.size());
      const std::string part = name.substr(start, end - start);
      if (!part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        key = name.substr(0, start) + "{}" + name.substr(end);
        number = part;
        break;
      }
      start = end + 1;
    }
    if (number.empty()) key = name;
    auto [it, fresh] = groups.try_emplace(key);
    if (fresh) order.push_back(key);
    if (!number.empty() && std::find(it->second.begin(), it->second.end(), number) == it->second.end()) {
      it->second.push_back(number);
    }
  }
  std::vector<std::string> patterns;
  for (const auto& key : order) {
    auto numbers = groups[key];
    if (numbers.size() <= 1) {
      patterns.push_back(numbers.empty() ? key : fmt::format(fmt::runtime(key), numbers.front()));
      continue;
    }
    std::sort(numbers.begin(), numbers.end(), [](const std::string& a, const std::string& b) {
      return a.size() != b.size() ? a.size() < b.size() : a < b;
    });
    patterns.push_back(fmt::format(fmt::runtime(key), fmt::format("{{{}}}", fmt::join(numbers, ","))));
  }
  if (patterns.size() <= shown) return fmt::format("{}", fmt::join(patterns, ", "));
  return fmt::format("{} and {} more", fmt::join(patterns.begin(), patterns.begin() + static_cast<std::ptrdiff_t>(shown), ", "),
                     patterns.size() - shown);
}

// "(the initial load)", "(cycles 1, 2, 3)".
std::string cycles_text(std::vector<int> cycles) {
  std::sort(cycles.begin(), cycles.end());
  cycles.erase(std::unique(cycles.begin(), cycles.end()), cycles.end());
  if (cycles == std::vector<int>{0}) return "(the initial load)";
  return fmt::format("({} {})", cycles.size() == 1 ? "cycle" : "cycles", fmt::join(cycles, ", "));
}

// What the primary finding says is wrong with the cause's subject.
std::string phrase(const Finding& p, const std::vector<const Finding*>& all) {
  const std::string tag = evidence_of(p, "cause");
  const auto any = [&](auto pred) { return std::any_of(all.begin(), all.end(), [&](const Finding* f) { return pred(*f); }); };
  if (p.probe == "driver" && p.subject == "model code") {
    std::string what = p.message.substr(0, p.message.find('\n'));
    if (what.size() > 160) what = what.substr(0, 157) + "...";
    return fmt::format("model code failed in phase {}: {}", p.phase, what);
  }
  if (tag == "nondeterministic") return "the forward is nondeterministic: two eager runs on one input differ";
  if (tag == "host value baked") {
    return fmt::format("a host value passed to {} is baked into the captured graph ({} at capture, {} after the refit)",
                       evidence_of(p, "op"), evidence_of(p, "value_at_capture"), evidence_of(p, "value_now"));
  }
  if (tag == "frozen at capture") {
    const std::string divergence = evidence_of(p, "divergence");
    // Note [A read chosen at capture] (engine/pass_work.cpp): the tensors are the subject.
    if (has_evidence(p, "tensors") && !divergence.empty()) {
      return fmt::format("a tensor read is frozen at capture ({})", divergence);
    }
    return fmt::format("control flow is frozen at capture ({})",
                       divergence.empty() ? fmt::format("a replay on another input, floating inputs scaled by {}, differs "
                                                        "from eager", evidence_of(p, "input_scale"))
                                          : divergence);
  }
  if (p.probe == "stream_order" && tag == "load_weights() calls") {
    return "depends on how the load's stream is cut into load_weights() calls";
  }
  if (p.probe == "stream_order") return "depends on the order the load streams its tensors in";
  if (p.probe == "transfer") {
    if (has_evidence(p, "unknown_names")) {
      return "arrives in the kernel format (is_checkpoint_format false) under checkpoint-format names";
    }
    if (has_evidence(p, "unread")) return "is sent but never read: load_weights() returns before the stream ends";
    if (has_evidence(p, "shape_mismatches")) {
      return "arrives in the kernel format (is_checkpoint_format false) in a shape the live tensor does not have";
    }
    if (!evidence_of(p, "buckets").empty()) {
      return "arrives on the ranks with other bytes than the trainer sent: the two ends lay the packed buckets "
             "out differently";
    }
    if (has_evidence(p, "missing")) return "is announced by the trainer and never arrives, or arrives unannounced";
    return "arrives on the ranks with other bytes than the trainer sent";
  }
  if (p.probe == "ranks") {
    if (has_evidence(p, "fingerprints")) return "is declared replicated but holds different bytes on different ranks";
    return fmt::format("runs on some ranks and not on others (rank {} ran fewer)", evidence_of(p, "ranks"));
  }
  if (p.probe == "census") return fmt::format("is never written by the load (first: {})", evidence_of(p, "load"));
  if (p.probe == "driver" && has_evidence(p, "checkpoint_name")) return "is streamed but load_weights() does not report it loaded";
  if (p.probe == "driver" && p.subject.rfind("rank ", 0) == 0) return fmt::format("{} failed outside its lifecycle: {}", p.subject, evidence_of(p, "error"));
  if (p.probe == "address") {
    if (p.subject.rfind("undeclared tensor at ", 0) == 0) {
      return "is read by a captured graph but lies in no declared tensor: declare it (extra_tensors())";
    }
    const bool by_pwal = any([](const Finding& f) { return f.probe == "hooks" && has_evidence(f, "new_address"); });
    return by_pwal ? "is replaced by PWAL instead of updated in place" : "is replaced instead of updated in place";
  }
  if (p.probe == "hooks") {
    if (has_evidence(p, "new_address")) return "is replaced by every PWAL (a second PWAL moves it)";
    if (has_evidence(p, "fingerprint_before")) return "changes under a second PWAL: PWAL is not idempotent";
    if (has_evidence(p, "must_follow")) return "runs out of the declared order";
    if (evidence_of(p, "phase") == "warmup" || evidence_of(p, "phase") == "replay" || evidence_of(p, "phase") == "capture") {
      return "runs inside forward";
    }
    if (has_evidence(p, "calls_in_this_load")) {
      std::vector<std::string> loads, hooks;
      for (const Finding* f : all) {
        if (f->probe != "hooks" || !has_evidence(*f, "calls_in_this_load")) continue;
        const std::string load = evidence_of(*f, "load"), hook = evidence_of(*f, "hook");
        if (std::find(loads.begin(), loads.end(), load) == loads.end()) loads.push_back(load);
        if (std::find(hooks.begin(), hooks.end(), hook) == hooks.end()) hooks.push_back(hook);
      }
      return fmt::format("{} not run on the {}: PWAL was not called there, or does not call {}",
                         hooks.size() == 1 ? "does" : "do", fmt::join(loads, ", "), hooks.size() == 1 ? "it" : "them");
    }
  }
  if (p.probe == "init_count") return "is not initialised exactly once, as declared, by the dummy load";
  if (p.probe == "poison" && has_evidence(p, "sleep_level")) {
    return fmt::format("is read by a graph and still holds the sleep's discard poison after the wake (sleep level {})",
                       evidence_of(p, "sleep_level"));
  }
  if (p.probe == "poison" && has_evidence(p, "tensor")) return "still holds poison after the load that should overwrite it";
  if (p.probe == "replay_diff" && has_evidence(p, "tensors_differing_from_b")) {
    return "differs from a fresh load of the same weights (model B)";
  }
  if (p.probe == "coverage") return "does not influence the replay as it influences eager";
  if (p.probe == "replay_diff") return "the captured graphs replay differently from eager (stale memory)";
  if (p.probe == "poison") return "a replay turns NaN once stale storages are poisoned";
  if (p.probe == "memory") return fmt::format("memory is not at steady state ({})", p.subject);
  std::string first = p.message.substr(0, p.message.find(": "));
  if (first.size() > 160) first = first.substr(0, 157) + "...";
  return first;
}

}  // namespace

std::vector<Cause> triage(const ScenarioRecord& record, const std::string& repro) {
  const std::vector<Finding>& findings = record.findings;
  const std::size_t n = findings.size();
  if (n == 0) return {};
  std::vector<Names> names(n);
  for (std::size_t i = 0; i < n; ++i) names[i] = names_of(findings[i]);
  // Note [Nondeterministic forward]: under a forward that does not repeat, the differential's
  // findings are no evidence of anything else; they are that cause's.
  const bool nondeterministic = std::any_of(findings.begin(), findings.end(), [](const Finding& f) {
    return evidence_of(f, "cause") == "nondeterministic";
  });
  for (std::size_t i = 0; nondeterministic && i < n; ++i) {
    if (findings[i].probe == "replay_diff" && has_evidence(findings[i], "under")) {
      names[i].strong = {"tag:nondeterministic"};
      names[i].weak.clear();
    }
  }

  // Union-find over strong names.
  std::vector<std::size_t> parent(n);
  std::iota(parent.begin(), parent.end(), 0);
  const auto find = [&](std::size_t i) {
    while (parent[i] != i) i = parent[i] = parent[parent[i]];
    return i;
  };
  const auto unite = [&](std::size_t a, std::size_t b) { parent[find(a)] = find(b); };
  std::map<std::string, std::size_t> first_with;
  for (std::size_t i = 0; i < n; ++i) {
    for (const auto& key : names[i].strong) {
      auto [it, fresh] = first_with.try_emplace(key, i);
      if (!fresh) unite(i, it->second);
    }
  }
  const auto is_strong = [&](std::size_t i) { return !names[i].strong.empty(); };
  const auto better = [&](std::size_t a, std::size_t b) {  // a is a better primary than b
    const int sa = specificity(findings[a]), sb = specificity(findings[b]);
    if (sa != sb) return sa < sb;
    if (findings[a].cycle != findings[b].cycle) return findings[a].cycle < findings[b].cycle;
    return a < b;
  };
  // The best finding of each strong group so far.
  const auto group_best = [&]() {
    std::map<std::size_t, std::size_t> best;
    for (std::size_t i = 0; i < n; ++i) {
      if (!is_strong(i)) continue;
      auto [it, fresh] = best.try_emplace(find(i), i);
      if (!fresh && better(i, it->second)) it->second = i;
    }
    return best;
  };

  // Note [Missed hooks explain their module's state]: a hook that did not run in a load (a rank
  // that skipped PWAL, a PWAL that was not called) leaves the tensors it derives stale. Their
  // value findings (a replicated tensor the ranks hold differently, outputs that differ from model
  // B, a coverage gap, a poisoned replay) are its symptoms in that cycle (the next load's PWAL
  // derives them again) and on its ranks: their groups join the hook's, which leads. Findings
  // that name another mechanism (an address, the census, the stream order) stay causes of their
  // own.
  const auto missed = [&](const Finding& f) {
    return (f.probe == "hooks" && has_evidence(f, "calls_in_this_load")) ||
           (f.probe == "ranks" && has_evidence(f, "hook") && has_evidence(f, "differences"));
  };
  std::set<std::size_t> explaining;  // the missed-hook findings that took in another group
  {
    const auto symptom = [&](const Finding& f) {
      return f.probe == "replay_diff" || f.probe == "coverage" || f.probe == "poison" || f.probe == "memory" ||
             (f.probe == "ranks" && has_evidence(f, "fingerprints"));
    };
    // The modules each missed hook was not run on ("layers.0"; a cross-rank difference lists
    // "hook@module" pairs), with its rank and cycle.
    struct Miss {
      std::size_t finding;
      std::vector<std::string> modules;
      std::set<std::string> ranks;  // empty: the rank is not known
    };
    std::vector<Miss> misses;
    for (std::size_t i = 0; i < n; ++i) {
      if (!missed(findings[i])) continue;
      Miss m{i, {}, {}};
      if (const std::string module = evidence_of(findings[i], "module"); !module.empty()) m.modules.push_back(module);
      for (const auto& item : split_list(evidence_of(findings[i], "differences"))) {
        if (const auto at = item.find('@'); at != std::string::npos) m.modules.push_back(item.substr(at + 1));
      }
      // The hooks probe's "rank"; the cross-rank finding's "ranks", a list ("1, 3").
      std::string ranks = evidence_of(findings[i], "rank") + "," + evidence_of(findings[i], "ranks");
      for (std::size_t at = 0; at <= ranks.size();) {
        const std::size_t comma = std::min(ranks.find(',', at), ranks.size());
        std::string r = ranks.substr(at, comma - at);
        r.erase(0, r.find_first_not_of(' '));
        r.erase(r.find_last_not_of(' ') + 1);
        if (!r.empty()) m.ranks.insert(r);
        at = comma + 1;
      }
      misses.push_back(std::move(m));
    }
    // A miss explains a finding of its own cycle (the next load's PWAL derives the state again),
    // on its ranks, whose tensors its modules hold.
    const auto explains = [&](const Miss& m, std::size_t i) {
      if (findings[m.finding].cycle != findings[i].cycle) return false;
      const std::string rank = evidence_of(findings[i], "rank");
      if (!m.ranks.empty() && !rank.empty() && m.ranks.count(rank) == 0) return false;
      return std::all_of(names[i].tensors.begin(), names[i].tensors.end(), [&](const std::string& t) {
        return std::any_of(m.modules.begin(), m.modules.end(), [&](const std::string& module) {
          return t.size() > module.size() && t.compare(0, module.size() + 1, module + ".") == 0;
        });
      });
    };
    std::map<std::size_t, std::vector<std::size_t>> groups;
    for (std::size_t i = 0; i < n; ++i) {
      if (is_strong(i)) groups[find(i)].push_back(i);
    }
    for (const auto& [root, members] : groups) {
      if (std::any_of(members.begin(), members.end(), [&](std::size_t i) { return missed(findings[i]); })) continue;
      if (!std::all_of(members.begin(), members.end(), [&](std::size_t i) {
            return symptom(findings[i]) && !names[i].tensors.empty();
          })) {
        continue;
      }
      // Every finding of the group explained by a miss; the group joins the earliest of them.
      std::optional<std::size_t> by;
      bool all = true;
      for (std::size_t i : members) {
        const auto m = std::find_if(misses.begin(), misses.end(), [&](const Miss& miss) { return explains(miss, i); });
        if (m == misses.end()) {
          all = false;
          break;
        }
        if (!by || findings[m->finding].cycle < findings[*by].cycle) by = m->finding;
      }
      if (!all) by.reset();
      if (!by) continue;
      unite(root, *by);
      explaining.insert(*by);
    }
  }

  // Note [A frozen branch explains what the replay ignores]: a capture that froze a branch the
  // forward decided on the host replays a path that need not read a tensor eager reads now. So
  // coverage's "eager depends on x, the replay does not", in a cycle whose replay is frozen at
  // capture, is that branch's symptom, not a stale copy of x: a group made of such coverage
  // findings only, each of a graph (cycle and batch size) frozen at capture, joins that frozen
  // cause, which leads.
  {
    // (cycle, batch size) -> its first frozen-at-capture finding: the graph of that batch size
    std::map<std::pair<int, std::int64_t>, std::size_t> frozen_in;
    for (std::size_t i = 0; i < n; ++i) {
      if (evidence_of(findings[i], "cause") == "frozen at capture") {
        frozen_in.try_emplace({findings[i].cycle, findings[i].batch_size}, i);
      }
    }
    std::map<std::size_t, std::vector<std::size_t>> groups;
    for (std::size_t i = 0; i < n && !frozen_in.empty(); ++i) {
      if (is_strong(i)) groups[find(i)].push_back(i);
    }
    for (const auto& [root, members] : groups) {
      const bool ignored_under_frozen = std::all_of(members.begin(), members.end(), [&](std::size_t i) {
        return findings[i].probe == "coverage" && evidence_of(findings[i], "replay_changed") == "no" &&
               frozen_in.count({findings[i].cycle, findings[i].batch_size});
      });
      if (ignored_under_frozen) {
        unite(root, frozen_in.at({findings[members.front()].cycle, findings[members.front()].batch_size}));
      }
    }
  }

  // Weak-only findings: to a strong group that names one of their tensors, or whose hook's module
  // holds one; else together by their tensors.
  {
    const auto best = group_best();
    std::map<std::string, std::size_t> weak_first;
    for (std::size_t i = 0; i < n; ++i) {
      if (is_strong(i) || names[i].weak.empty()) continue;
      std::optional<std::size_t> target;
      for (const auto& t : names[i].weak) {
        std::vector<std::size_t> candidates;
        if (auto it = first_with.find("tensor:" + role_of(t)); it != first_with.end()) candidates.push_back(it->second);
        for (std::size_t j = 0; j < n; ++j) {
          const std::string& module = names[j].module;
          if (!module.empty() && t.size() > module.size() && t.compare(0, module.size() + 1, module + ".") == 0) {
            candidates.push_back(j);
          }
        }
        for (std::size_t c : candidates) {
          const std::size_t head = best.at(find(c));
          if (!target || better(head, *target)) target = head;
        }
      }
      if (target) {
        unite(i, *target);
        names[i].strong.push_back("weak");  // grouped now
        continue;
      }
      for (const auto& t : names[i].weak) {
        auto [it, fresh] = weak_first.try_emplace(role_of(t), i);
        if (!fresh) unite(i, it->second);
      }
      names[i].strong.push_back("weak");
      for (const auto& t : names[i].weak) {
        names[i].tensors.push_back(t);
        names[i].shown.push_back(t);
      }
    }
  }

  // Findings that name nothing: to the leading cause of their cycle, else the leading cause.
  {
    const auto best = group_best();
    std::map<std::size_t, std::set<int>> cycles_of;  // strong group -> the cycles it names
    for (std::size_t j = 0; j < n; ++j) {
      if (is_strong(j)) cycles_of[find(j)].insert(findings[j].cycle);
    }
    std::vector<std::size_t> orphans;
    for (std::size_t i = 0; i < n; ++i) {
      if (is_strong(i)) continue;
      std::optional<std::size_t> target;
      for (const auto& [root, head] : best) {
        const bool same_cycle = cycles_of[root].count(findings[i].cycle) > 0;
        if (same_cycle && (!target || better(head, *target))) target = head;
      }
      if (!target) {
        for (const auto& [root, head] : best) {
          if (!target || better(head, *target)) target = head;
        }
      }
      if (target) {
        unite(i, *target);
      } else {
        orphans.push_back(i);
      }
    }
    for (std::size_t i = 1; i < orphans.size(); ++i) unite(orphans[i], orphans[0]);
  }

  std::map<std::size_t, std::vector<std::size_t>> groups;
  for (std::size_t i = 0; i < n; ++i) groups[find(i)].push_back(i);
  std::vector<Cause> causes;
  for (auto& [root, members] : groups) {
    std::sort(members.begin(), members.end(), [&](std::size_t a, std::size_t b) { return better(a, b); });
    // Note [Missed hooks explain their module's state]: the hook leads the symptoms it took in.
    if (std::any_of(members.begin(), members.end(), [&](std::size_t i) { return explaining.count(i) > 0; })) {
      // The hooks probe's own finding where there is one: it names the load and the rank.
      auto hook = std::find_if(members.begin(), members.end(),
                               [&](std::size_t i) { return missed(findings[i]) && findings[i].probe == "hooks"; });
      if (hook == members.end()) {
        hook = std::find_if(members.begin(), members.end(), [&](std::size_t i) { return missed(findings[i]); });
      }
      std::rotate(members.begin(), hook, hook + 1);
    }
    const Finding& primary = findings[members.front()];
    Cause c;
    c.findings = members;
    c.repro = repro;
    c.first_cycle = primary.cycle;
    std::vector<std::string> shown;  // the primary probe's names, for the subject
    std::vector<std::string> hooks;
    std::vector<const Finding*> all;
    std::vector<int> primary_cycles;
    const std::string primary_tag = evidence_of(primary, "cause");
    for (std::size_t i : members) {
      const Finding& f = findings[i];
      all.push_back(&f);
      c.first_cycle = std::min(c.first_cycle, f.cycle);
      if (std::find(c.probes.begin(), c.probes.end(), f.probe) == c.probes.end()) c.probes.push_back(f.probe);
      if (f.probe != primary.probe || evidence_of(f, "cause") != primary_tag) continue;
      primary_cycles.push_back(f.cycle);
      for (const auto& t : names[i].shown) {
        if (std::find(shown.begin(), shown.end(), t) == shown.end()) shown.push_back(t);
      }
      if (const std::string hook = evidence_of(f, "hook");
          !hook.empty() && std::find(hooks.begin(), hooks.end(), hook) == hooks.end()) {
        hooks.push_back(hook);
      }
    }
    // The subject: what the primary's probe names (checkpoint names where it gives them, else
    // tensors, else its hooks), folded over the layers.
    std::string subject_text;
    if (primary.subject.rfind("undeclared tensor at ", 0) == 0) {
      c.subject = fmt::format("undeclared memory at {}", fold_names(shown));
      subject_text = c.subject;
    } else if (!shown.empty()) {
      c.subject = fold_names(shown);
      subject_text = fmt::format("`{}`", c.subject);
    } else if (!hooks.empty()) {
      c.subject = fmt::format("hook{} '{}'", hooks.size() == 1 ? "" : "s", fmt::join(hooks, "', '"));
      subject_text = c.subject;
    }
    const std::string what = phrase(primary, all);
    c.summary = subject_text.empty() ? what : fmt::format("{} {}", subject_text, what);
    // A distributed scenario's findings name their rank: the cause says where.
    std::set<int> ranks;
    for (std::size_t i : members) {
      const std::string r = evidence_of(findings[i], "rank");
      if (!r.empty() && std::all_of(r.begin(), r.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
        ranks.insert(std::stoi(r));
      }
    }
    if (!ranks.empty()) c.summary += fmt::format(" on rank{} {}", ranks.size() == 1 ? "" : "s", fmt::join(ranks, ", "));
    c.summary += fmt::format(" {}", cycles_text(primary_cycles));
    if (c.probes.size() > 1) {
      c.summary += fmt::format(" — {} agree", fmt::join(c.probes, ", "));
    } else {
      c.summary += fmt::format(" — {}", c.probes.front());
    }
    causes.push_back(std::move(c));
  }
  std::stable_sort(causes.begin(), causes.end(), [&](const Cause& a, const Cause& b) {
    return better(a.findings.front(), b.findings.front());
  });
  return causes;
}

std::string repro_command(const ScenarioRecord& record, const ExecOptions& options) {
  const bool python = record.fixture.rfind("python:", 0) == 0;
  std::string cmd = fmt::format("{} run {}", python ? "python -m graphcheck" : "graphcheck", record.file);
  for (const auto& m : record.mutations) cmd += fmt::format(" --mutation {}", m);
  if (options.seed) cmd += fmt::format(" --seed {}", *options.seed);
  if (options.backend != "auto") cmd += fmt::format(" --backend {}", options.backend);
  return cmd;
}

}  // namespace graphcheck::session
