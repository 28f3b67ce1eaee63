// The kill matrix as data (rows computed from the records' verdicts) and its text form.

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "graphcheck/reporter.h"

namespace graphcheck {

KillMatrixRow kill_matrix_row(const KillMatrix& matrix, const ScenarioRecord& r,
                              const std::string& mutation, const std::set<std::string>& clean_failed) {
  KillMatrixRow row;
  row.scenario = r.name;
  row.mutation = mutation;
  const bool broken = r.status == Status::error || r.status == Status::crashed;
  if (mutation.empty()) {
    for (const auto& probe : matrix.probes) {
      auto f = std::find_if(r.findings.begin(), r.findings.end(), [&](const Finding& x) { return x.probe == probe; });
      row.cells[probe] = f == r.findings.end() ? "." : "failed:" + f->pass;
    }
    row.verdict = broken ? fmt::format("{}: {}", to_string(r.status), r.reason)
                         : r.status == Status::passed ? "ok" : "FAIL: the clean run fails";
    return row;
  }
  auto v = std::find_if(r.verdicts.begin(), r.verdicts.end(),
                        [&](const MutationVerdict& x) { return x.mutation == mutation; });
  MutationVerdict verdict;
  if (v != r.verdicts.end()) verdict = *v;
  verdict.mutation = mutation;
  for (const auto& probe : matrix.probes) {
    const bool want = std::find(verdict.expected.begin(), verdict.expected.end(), probe) != verdict.expected.end();
    auto caught = verdict.caught.find(probe);
    const bool got = caught != verdict.caught.end() && !clean_failed.count(probe);
    row.cells[probe] = want ? (got ? "KILLED:" + caught->second : "MISSED") : (got ? "failed:" + caught->second : ".");
  }
  if (broken) {
    row.verdict = fmt::format("{}: {}", to_string(r.status), r.reason);
  } else if (!verdict.declared) {
    row.verdict = "FAIL: the scenario declares no probe for this mutation";
  } else if (!verdict.missed.empty()) {
    row.verdict = fmt::format("FAIL: not caught by {}", fmt::join(verdict.missed, ", "));
  } else {
    row.verdict = "ok";
  }
  return row;
}

std::string kill_matrix_header(const KillMatrix& matrix) {
  std::string line = fmt::format("{:<30} {:<34}", "scenario", "mutation");
  for (const auto& p : matrix.probes) line += fmt::format(" {:>11}", p);
  return line + "  verdict";
}

std::string kill_matrix_line(const KillMatrix& matrix, const KillMatrixRow& row) {
  std::string line = fmt::format("{:<30} {:<34}", row.scenario, row.mutation.empty() ? "(clean)" : row.mutation);
  for (const auto& p : matrix.probes) {
    auto it = row.cells.find(p);
    std::string cell = it == row.cells.end() ? "." : it->second;
    if (cell.rfind("KILLED:", 0) == 0) cell = cell.substr(7);                      // the pass
    else if (cell.rfind("failed:", 0) == 0) cell = "(" + cell.substr(7) + ")";    // undeclared
    line += fmt::format(" {:>11}", cell);
  }
  return line + "  " + row.verdict;
}

std::string verdict_line(const ScenarioRecord& r, const MutationVerdict& v) {
  std::vector<std::string> where;
  for (const auto& [probe, pass] : v.caught) where.push_back(fmt::format("{}: {} pass", probe, pass));
  const std::string passes = where.empty() ? "" : fmt::format(" [{}]", fmt::join(where, "; "));
  if (!v.declared) {
    return fmt::format("mutation {} on {}: not declared by the scenario; probes that caught it: {}",
                       v.mutation, r.name, where.empty() ? std::string("none") : fmt::format("{}", fmt::join(where, "; ")));
  }
  if (v.missed.empty()) {
    return fmt::format("mutation {} on {}: caught by {}{}", v.mutation, r.name, fmt::join(v.expected, ", "), passes);
  }
  return fmt::format("mutation {} on {}: NOT caught by declared probe(s) {}{}", v.mutation, r.name,
                     fmt::join(v.missed, ", "), passes);
}

}  // namespace graphcheck
