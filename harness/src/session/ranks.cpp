// merge_ranks (session.h): a distributed scenario's rank records as one record, with the
// cross-rank checks (Note [Distributed scenarios] in engine/distributed.cpp). Torch-free.

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "graphcheck/engine/session.h"

namespace graphcheck::session {

namespace {

int severity(Status s) {
  switch (s) {
    case Status::passed: return 0;
    case Status::skipped: return 1;
    case Status::failed: return 2;
    case Status::error: return 3;
    case Status::crashed: return 4;
  }
  return 0;
}

constexpr const char* kReplicated = "gc/dist/replicated/";
constexpr const char* kHooks = "gc/dist/hooks/";
constexpr const char* kCycleDone = "gc/dist/cycle_done";

std::string cycle_text(int cycle) { return cycle == 0 ? "the initial load" : fmt::format("refit cycle {}", cycle); }

}  // namespace

ScenarioRecord merge_ranks(const Scenario& scenario, std::vector<RankRun> ranks, const std::vector<std::string>& mutations) {
  std::sort(ranks.begin(), ranks.end(), [](const RankRun& a, const RankRun& b) { return a.rank < b.rank; });
  ScenarioRecord merged;
  // The lead: the first rollout rank (tensor-parallel order) that left a record.
  const RankRun* lead = nullptr;
  for (const RankRun& r : ranks) {
    if (r.record && r.tp_rank >= 0 && (!lead || r.tp_rank < lead->tp_rank)) lead = &r;
  }
  if (!lead) {
    // No rollout rank finished: what ran comes from the first record there is.
    for (const RankRun& r : ranks) {
      if (r.record && !lead) lead = &r;
    }
  }
  if (lead) {
    merged = *lead->record;
    merged.findings.clear();
    merged.verdicts.clear();
    merged.causes.clear();
  } else {
    merged.name = scenario.name;
    merged.file = scenario.file;
    merged.description = scenario.description;
    merged.fixture = scenario.fixture;
    merged.expected_catches = scenario.mutations;
    merged.warnings = scenario.warnings;
  }
  if (merged.mutations.empty()) merged.mutations = mutations;  // no rank left a record
  merged.status = Status::passed;
  merged.reason.clear();
  merged.crash.reset();
  std::vector<std::string> reasons;
  for (const RankRun& r : ranks) {
    const std::string who = r.tp_rank >= 0 ? fmt::format("rank {} (tensor-parallel rank {})", r.rank, r.tp_rank)
                                           : fmt::format("rank {} (trainer)", r.rank);
    if (r.crash) {
      if (severity(Status::crashed) > severity(merged.status)) merged.status = Status::crashed;
      if (!merged.crash) {
        merged.crash = r.crash;
      }
      reasons.push_back(fmt::format(
          "{} {}", who,
          r.crash->cause == "timeout"       ? fmt::format("hung past {:g} s and was killed", r.crash->timeout)
          : r.crash->cause == "interrupted" ? std::string("was stopped after another rank died (it waited for it)")
          : r.crash->cause == "signal"      ? fmt::format("died of {}", r.crash->signal)
                                            : fmt::format("exited with status {} and no record", r.crash->exit_code)));
      continue;
    }
    if (!r.error.empty()) {
      // Its own Python code failed outside the engine (the weight-sync ends, the trainer's
      // streaming, a collective with a rank that is gone).
      Finding f;
      f.probe = "driver";
      f.pass = "observe";
      f.phase = "refit";
      f.subject = fmt::format("rank {}", r.rank);
      f.message = fmt::format("rank {}: {} failed outside its lifecycle: {}", r.rank,
                              r.tp_rank >= 0 ? "this rollout rank" : "the trainer", r.error);
      f.evidence = {{"rank", std::to_string(r.rank)}, {"error", r.error}};
      merged.findings.push_back(std::move(f));
      if (!r.record) continue;
    }
    if (!r.record) continue;
    const ScenarioRecord& rec = *r.record;
    if (severity(rec.status) > severity(merged.status)) merged.status = rec.status;
    if (!rec.reason.empty()) reasons.push_back(fmt::format("{}: {}", who, rec.reason));
    for (Finding f : rec.findings) {
      f.message = fmt::format("rank {}: {}", r.rank, f.message);
      f.evidence.insert(f.evidence.begin(), {"rank", std::to_string(r.rank)});
      merged.findings.push_back(std::move(f));
    }
    merged.seconds = std::max(merged.seconds, rec.seconds);
  }

  // Cross-rank checks over the rollout ranks that finished.
  struct Seen {
    int rank;
    double value;
  };
  std::map<std::pair<std::string, int>, std::vector<Seen>> replicated;  // (tensor, cycle) -> per rank
  std::map<int, std::map<std::string, std::map<int, double>>> hooks;   // cycle -> hook@module -> rank -> calls
  std::vector<int> rollout;
  int completed = -1;  // the last cycle every rollout rank finished: hooks are compared up to it
  bool first_rank = true;
  for (const RankRun& r : ranks) {
    if (!r.record || r.tp_rank < 0) continue;
    rollout.push_back(r.rank);
    int done = -1;
    for (const Measurement& m : r.record->measurements) {
      if (m.pass == "observe" && m.tag == kCycleDone) done = std::max(done, m.cycle);
    }
    completed = first_rank ? done : std::min(completed, done);
    first_rank = false;
    for (const Measurement& m : r.record->measurements) {
      if (m.pass != "observe") continue;
      if (m.tag.rfind(kReplicated, 0) == 0) {
        replicated[{m.tag.substr(std::string(kReplicated).size()), m.cycle}].push_back({r.rank, m.value});
      } else if (m.tag.rfind(kHooks, 0) == 0) {
        hooks[m.cycle][m.tag.substr(std::string(kHooks).size())][r.rank] += m.value;
      }
    }
  }
  std::map<std::string, std::vector<int>> differing_cycles;  // tensor -> cycles where the ranks differ
  std::map<std::string, std::vector<Seen>> first_seen;
  for (const auto& [key, seen] : replicated) {
    const bool differs = std::any_of(seen.begin(), seen.end(), [&](const Seen& s) { return s.value != seen.front().value; });
    if (!differs) continue;
    differing_cycles[key.first].push_back(key.second);
    first_seen.emplace(key.first, seen);
  }
  for (const auto& [tensor, cycles] : differing_cycles) {
    const std::vector<Seen>& seen = first_seen.at(tensor);
    std::vector<std::string> values;
    std::map<double, std::vector<int>> groups;
    for (const Seen& s : seen) groups[s.value].push_back(s.rank);
    for (const auto& [value, group] : groups) {
      values.push_back(fmt::format("rank{} {} {:013x}", group.size() == 1 ? "" : "s", fmt::join(group, ", "),
                                   static_cast<std::uint64_t>(value)));
    }
    Finding f;
    f.probe = "ranks";
    f.pass = "observe";
    f.phase = "pwal";
    f.cycle = cycles.front();
    f.subject = tensor;
    f.message = fmt::format(
        "'{}' is declared replicated (every rank holds all of it), but the ranks hold different bytes after {}{}: "
        "{}; a replicated tensor derived from this rank's shard (a scale from the local weights' maximum) "
        "differs per rank: derive it from replicated tensors, or all-reduce it across the tensor-parallel group",
        tensor, cycle_text(cycles.front()),
        cycles.size() > 1 ? fmt::format(" (and in cycles {})", fmt::join(cycles.begin() + 1, cycles.end(), ", "))
                          : std::string(),
        fmt::join(values, "; "));
    f.evidence = {{"tensor", tensor}, {"cycles", fmt::format("{}", fmt::join(cycles, ", "))},
                  {"fingerprints", fmt::format("{}", fmt::join(values, "; "))}};
    merged.findings.push_back(std::move(f));
  }
  for (const auto& [cycle, by_hook] : hooks) {
    if (cycle > completed) continue;  // a rank stopped before it: its own findings say why
    std::vector<std::string> differences;
    std::string first_hook;
    std::set<int> short_ranks;
    for (const auto& [hook, per_rank] : by_hook) {
      std::map<int, double> counts;
      for (int rank : rollout) counts[rank] = per_rank.count(rank) ? per_rank.at(rank) : 0;
      const double most = std::max_element(counts.begin(), counts.end(), [](const auto& a, const auto& b) {
                            return a.second < b.second;
                          })->second;
      std::vector<std::string> parts;
      bool differs = false;
      for (const auto& [rank, n] : counts) {
        parts.push_back(fmt::format("rank {} {:g}", rank, n));
        if (n != most) {
          differs = true;
          short_ranks.insert(rank);
        }
      }
      if (!differs) continue;
      if (first_hook.empty()) first_hook = hook;
      differences.push_back(fmt::format("{} ({})", hook, fmt::join(parts, ", ")));
    }
    if (differences.empty()) continue;
    Finding f;
    f.probe = "ranks";
    f.pass = "observe";
    f.phase = cycle == 0 ? "load" : "refit";
    f.cycle = cycle;
    const auto at = first_hook.find('@');
    f.subject = first_hook.substr(0, at);
    f.message = fmt::format(
        "the ranks ran different hooks in {}: rank{} {} ran fewer: {}; every rank loads the same refit and must "
        "run the same post-processing (a rank that skipped PWAL?)",
        cycle_text(cycle), short_ranks.size() == 1 ? "" : "s", fmt::join(short_ranks, ", "),
        fmt::join(differences, "; "));
    f.evidence = {{"hook", f.subject},
                  {"module", at == std::string::npos ? std::string() : first_hook.substr(at + 1)},
                  {"ranks", fmt::format("{}", fmt::join(short_ranks, ", "))},
                  {"differences", fmt::format("{}", fmt::join(differences, "; "))}};
    merged.findings.push_back(std::move(f));
  }
  if (merged.status == Status::passed && !merged.findings.empty()) merged.status = Status::failed;
  merged.reason = fmt::format("{}", fmt::join(reasons, "; "));
  // As Driver::run judges a run: only one that ran to its end (a crash proves nothing).
  if (merged.status == Status::passed || merged.status == Status::failed) {
    for (const auto& m : merged.mutations) merged.verdicts.push_back(judge_mutation(merged, m));
  }
  return merged;
}

}  // namespace graphcheck::session
