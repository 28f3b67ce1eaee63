#include "graphcheck/engine/record.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace graphcheck {

const char* to_string(Status status) {
  switch (status) {
    case Status::passed: return "passed";
    case Status::failed: return "failed";
    case Status::error: return "error";
    case Status::crashed: return "crashed";
    case Status::skipped: return "skipped";
  }
  return "unknown";
}

std::set<std::string> ScenarioRecord::failed_probes() const {
  std::set<std::string> probes;
  for (const auto& f : findings) probes.insert(f.probe);
  return probes;
}

namespace {

// How bad a status is, for --repeat: the merged record is the worst run's.
int severity(Status s) {
  switch (s) {
    case Status::skipped: return 0;
    case Status::passed: return 1;
    case Status::failed: return 2;
    case Status::error: return 3;
    case Status::crashed: return 4;
  }
  return 0;
}

}  // namespace

ScenarioRecord merge_repeats(std::vector<ScenarioRecord> runs) {
  if (runs.empty()) return {};
  if (runs.size() == 1) return std::move(runs.front());
  const int n = static_cast<int>(runs.size());
  // Only runs that went through the lifecycle say whether a check held: a crashed, erroneous or
  // skipped run has no findings because it has no verdicts, not because its checks held.
  auto judged = [&](int i) {
    const Status st = runs[static_cast<std::size_t>(i)].status;
    return st == Status::passed || st == Status::failed;
  };
  // A check: a probe's finding on one subject at one place of the lifecycle.
  struct Check {
    const Finding* first = nullptr;
    std::vector<int> failed_in;  // 1-based run numbers
  };
  std::map<std::string, Check> checks;
  for (int i = 0; i < n; ++i) {
    if (!judged(i)) continue;
    for (const auto& f : runs[static_cast<std::size_t>(i)].findings) {
      const std::string key = fmt::format("{}\t{}\t{}\t{}\t{}\t{}", f.probe, f.pass, f.phase, f.cycle, f.batch_size, f.subject);
      Check& c = checks[key];
      if (!c.first) c.first = &f;
      if (c.failed_in.empty() || c.failed_in.back() != i + 1) c.failed_in.push_back(i + 1);
    }
  }
  std::vector<Finding> flaky;
  for (const auto& [key, c] : checks) {
    std::vector<int> held;
    for (int i = 1; i <= n; ++i) {
      if (judged(i - 1) && std::find(c.failed_in.begin(), c.failed_in.end(), i) == c.failed_in.end()) held.push_back(i);
    }
    if (held.empty()) continue;
    const Finding& f = *c.first;
    Finding x;
    x.probe = "repeat";
    x.pass = f.pass;
    x.phase = f.phase;
    x.cycle = f.cycle;
    x.batch_size = f.batch_size;
    x.subject = f.subject;
    x.message = fmt::format("flaky: the {} check on '{}' failed in run(s) {} and held in run(s) {} of {}; its "
                            "outcome is not deterministic (a race, memory read before it is written, or a "
                            "seed not applied)",
                            f.probe, f.subject, fmt::join(c.failed_in, ", "), fmt::join(held, ", "), n);
    x.evidence = {{"probe", f.probe}, {"first_message", f.message}};
    flaky.push_back(std::move(x));
  }
  std::vector<std::string> statuses;
  bool changed = false;
  std::size_t worst = 0;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    statuses.push_back(to_string(runs[i].status));
    changed = changed || runs[i].status != runs.front().status;
    if (severity(runs[i].status) > severity(runs[worst].status)) worst = i;
  }
  // The worst run's record (its crash, its reason), with what changed across the runs.
  ScenarioRecord merged = std::move(runs[worst]);
  merged.repeats = n;
  if (changed) {
    Finding x;
    x.probe = "repeat";
    x.phase = "scenario";
    x.subject = "status";
    x.message = fmt::format("flaky: the scenario's status changed across {} runs: {}", n, fmt::join(statuses, ", "));
    flaky.push_back(std::move(x));
  }
  for (auto& f : flaky) merged.findings.push_back(std::move(f));
  if (!flaky.empty() && merged.status == Status::passed) merged.status = Status::failed;
  return merged;
}

int RunRecord::count(Status status) const {
  return static_cast<int>(std::count_if(scenarios.begin(), scenarios.end(),
                                        [&](const auto& s) { return s.status == status; }));
}

int RunRecord::exit_code() const {
  if (count(Status::crashed)) return 3;
  if (count(Status::error)) return 2;
  if (count(Status::failed)) return 1;
  return 0;
}

}  // namespace graphcheck
