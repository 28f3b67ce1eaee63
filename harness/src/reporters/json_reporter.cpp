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
    scenarios.push_back(std::move(s));
  }
  doc["scenarios"] = std::move(scenarios);
  return doc.dump(2) + "\n";
}

void JsonReporter::on_run_done(const RunRecord& run) { write_file_atomically(m_path, json_report(run)); }

}  // namespace graphcheck
