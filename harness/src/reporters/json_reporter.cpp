#include <nlohmann/json.hpp>

#include "graphcheck/reporter.h"

namespace graphcheck {

std::string json_report(const RunRecord& run) {
  using nlohmann::ordered_json;
  ordered_json doc;
  doc["json_schema_version"] = kReportSchemaVersion;
  doc["tool"] = "graphcheck";
  doc["tool_version"] = run.tool_version;
  doc["started_at"] = run.started_at;
  doc["threads"] = run.threads;
  ordered_json environment = ordered_json::object();
  for (const auto& [k, v] : run.environment) environment[k] = v;
  doc["environment"] = std::move(environment);
  doc["seconds"] = run.seconds;
  doc["exit_code"] = run.exit_code();
  doc["summary"] = {{"total", run.scenarios.size()},
                    {"passed", run.count(Status::passed)},
                    {"failed", run.count(Status::failed)},
                    {"error", run.count(Status::error)},
                    {"crashed", run.count(Status::crashed)},
                    {"skipped", run.count(Status::skipped)}};
  ordered_json scenarios = ordered_json::array();
  for (const auto& r : run.scenarios) {
    ordered_json s;
    s["name"] = r.name;
    s["file"] = r.file;
    s["description"] = r.description;
    s["fixture"] = r.fixture;
    s["backend"] = r.backend;
    s["backend_reason"] = r.backend_reason;
    s["passes"] = r.passes;
    s["status"] = to_string(r.status);
    s["reason"] = r.reason;
    s["start"] = r.start;
    s["seconds"] = r.seconds;
    s["mutations"] = r.mutations;
    s["expected_catches"] = r.expected_catches;
    s["probes"] = r.probes;
    ordered_json findings = ordered_json::array();
    for (const auto& f : r.findings) {
      ordered_json evidence = ordered_json::object();
      for (const auto& [k, v] : f.evidence) evidence[k] = v;
      findings.push_back({{"probe", f.probe},
                          {"pass", f.pass},
                          {"phase", f.phase},
                          {"cycle", f.cycle},
                          {"batch_size", f.batch_size},
                          {"subject", f.subject},
                          {"message", f.message},
                          {"evidence", evidence}});
    }
    s["findings"] = std::move(findings);
    ordered_json measurements = ordered_json::array();
    for (const auto& m : r.measurements) {
      measurements.push_back({{"tag", m.tag},
                              {"value", m.value},
                              {"unit", m.unit},
                              {"phase", m.phase},
                              {"cycle", m.cycle},
                              {"batch_size", m.batch_size},
                              {"pass", m.pass}});
    }
    s["measurements"] = std::move(measurements);
    ordered_json verdicts = ordered_json::array();
    for (const auto& v : r.verdicts) {
      ordered_json caught = ordered_json::object();
      for (const auto& [probe, pass] : v.caught) caught[probe] = pass;
      verdicts.push_back({{"mutation", v.mutation},
                          {"declared", v.declared},
                          {"expected", v.expected},
                          {"caught", caught},
                          {"missed", v.missed},
                          {"ok", v.ok()}});
    }
    s["verdicts"] = std::move(verdicts);
    ordered_json spans = ordered_json::array();
    for (const auto& sp : r.spans) {
      spans.push_back({{"pass", sp.pass},
                       {"phase", sp.phase},
                       {"cycle", sp.cycle},
                       {"batch_size", sp.batch_size},
                       {"start", sp.start},
                       {"seconds", sp.seconds}});
    }
    s["spans"] = std::move(spans);
    scenarios.push_back(std::move(s));
  }
  doc["scenarios"] = std::move(scenarios);
  if (run.kill_matrix) {
    ordered_json rows = ordered_json::array();
    for (const auto& row : run.kill_matrix->rows) {
      ordered_json cells = ordered_json::object();
      for (const auto& p : run.kill_matrix->probes) {
        auto it = row.cells.find(p);
        cells[p] = it == row.cells.end() ? "." : it->second;
      }
      rows.push_back({{"scenario", row.scenario},
                      {"mutation", row.mutation},
                      {"cells", cells},
                      {"verdict", row.verdict},
                      {"ok", row.ok()}});
    }
    doc["kill_matrix"] = {{"probes", run.kill_matrix->probes},
                          {"rows", std::move(rows)},
                          {"problems", run.kill_matrix->problems}};
  } else {
    doc["kill_matrix"] = nullptr;
  }
  // Bytes that are not UTF-8 (a name from a file) become U+FFFD rather than an exception.
  return doc.dump(2, ' ', false, ordered_json::error_handler_t::replace) + "\n";
}

JsonReporter::JsonReporter(std::string path) : FileReporter(std::move(path), &json_report) {}

}  // namespace graphcheck
