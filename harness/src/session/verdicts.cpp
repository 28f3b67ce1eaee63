// The session's verdicts: what a mutated run proves, net of its clean run, and the kill matrix.
// The one place this policy lives (the driver asks judge_mutation for a run's own verdicts; the
// reporters only render the rows).

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "graphcheck/engine/session.h"
#include "graphcheck/mutation.h"
#include "graphcheck/probe.h"

namespace graphcheck {

MutationVerdict judge_mutation(const ScenarioRecord& record, const std::string& mutation,
                               const std::set<std::string>& clean_failed) {
  MutationVerdict v;
  v.mutation = mutation;
  auto declared = record.expected_catches.find(mutation);
  v.declared = declared != record.expected_catches.end();
  if (v.declared) v.expected = declared->second;
  for (const Finding& f : record.findings) {
    if (clean_failed.count(f.probe) || v.caught.count(f.probe)) continue;
    const ProbeRegistry::Entry* entry = ProbeRegistry::get().find(f.probe);
    bool own = entry == nullptr;  // "driver": the lifecycle itself failed
    if (entry) {
      for (Pass p : entry->passes) own = own || f.pass == to_string(p);
    }
    if (own) v.caught[f.probe] = f.pass;
  }
  for (const auto& p : v.expected) {
    if (!v.caught.count(p)) v.missed.push_back(p);
  }
  return v;
}

}  // namespace graphcheck

namespace graphcheck::session {

KillMatrixRow kill_matrix_row(const KillMatrix& matrix, const ScenarioRecord& r, const std::string& mutation) {
  KillMatrixRow row;
  row.scenario = r.name;
  row.mutation = mutation;
  const bool broken = r.status == Status::error || r.status == Status::crashed;
  if (mutation.empty()) {
    for (const auto& probe : matrix.probes) {
      auto f = std::find_if(r.findings.begin(), r.findings.end(), [&](const Finding& x) { return x.probe == probe; });
      row.cells[probe] = f == r.findings.end() ? "." : "failed:" + f->pass;
    }
    row.verdict = broken                        ? fmt::format("{}: {}", to_string(r.status), r.reason)
                  : r.status == Status::passed ? "ok"
                                               : "FAIL: the clean run fails";
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
    const bool got = caught != verdict.caught.end();
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

KillMatrixBuilder::KillMatrixBuilder(const Plan& plan)
    : m_plan(plan), m_records(plan.items.size()), m_clean_failed(plan.items.size()) {
  m_matrix.probes = ProbeRegistry::get().names();
  m_matrix.probes.push_back("driver");
}

std::vector<KillMatrixRow> KillMatrixBuilder::add(std::size_t item, ScenarioRecord record,
                                                  std::vector<ScenarioRecord>& scenarios) {
  m_records.at(item) = std::move(record);
  return judge(false, scenarios);
}

std::vector<KillMatrixRow> KillMatrixBuilder::finish_stopped(std::vector<ScenarioRecord>& scenarios) {
  return judge(true, scenarios);
}

// In plan order up to the first unfinished run; `all`: past it too (a stopped run), each row
// whose run and clean run finished.
std::vector<KillMatrixRow> KillMatrixBuilder::judge(bool all, std::vector<ScenarioRecord>& scenarios) {
  std::vector<KillMatrixRow> added;
  for (; m_next < m_plan.items.size(); ++m_next) {
    const PlanItem& item = m_plan.items[m_next];
    if (!m_records[m_next] || (!item.mutation.empty() && !m_records[item.clean])) {
      if (all) continue;
      break;
    }
    ScenarioRecord& r = *m_records[m_next];
    KillMatrixRow row;
    if (item.mutation.empty()) {
      m_clean_failed[m_next] = r.failed_probes();
      row = kill_matrix_row(m_matrix, r, "");
    } else if (!item.skip.empty()) {
      row.scenario = r.name;
      row.mutation = item.mutation;
      row.verdict = "FAIL: " + item.skip;
    } else {
      // The driver's verdict again, now net of what the clean run already failed.
      r.verdicts = {judge_mutation(r, item.mutation, m_clean_failed[item.clean])};
      row = kill_matrix_row(m_matrix, r, item.mutation);
    }
    if (!row.ok()) {
      m_matrix.problems.push_back(
          fmt::format("{} {}: {}", row.scenario, item.mutation.empty() ? "(clean)" : item.mutation, row.verdict));
    }
    if (item.skip.empty()) scenarios.push_back(r);
    m_matrix.rows.push_back(row);
    added.push_back(std::move(row));
  }
  return added;
}

std::vector<std::string> KillMatrixBuilder::require_all_declared() {
  std::vector<std::string> problems;
  for (const auto& m : mutation::all()) {
    if (m_plan.declared.count(m.name)) continue;
    problems.push_back(fmt::format("mutation {} is declared by no scenario: no probe is shown to catch it", m.name));
    m_matrix.problems.push_back(problems.back());
  }
  return problems;
}

}  // namespace graphcheck::session
