#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <limits>
#include <stdexcept>

#include "graphcheck/engine/reporter.h"

namespace graphcheck {

namespace {

using nlohmann::ordered_json;

ordered_json scenario_json(const ScenarioRecord& r) {
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
  s["warnings"] = r.warnings;
  s["start"] = r.start;
  s["seconds"] = r.seconds;
  s["repeats"] = r.repeats;
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
  ordered_json causes = ordered_json::array();
  for (const auto& c : r.causes) {
    causes.push_back({{"summary", c.summary},
                      {"subject", c.subject},
                      {"primary", c.findings.empty() ? 0 : c.findings.front()},
                      {"findings", c.findings},
                      {"probes", c.probes},
                      {"first_cycle", c.first_cycle},
                      {"repro", c.repro}});
  }
  s["causes"] = std::move(causes);
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
  if (r.crash) {
    const CrashInfo& c = *r.crash;
    s["crash"] = {{"cause", c.cause},           {"signal", c.signal},         {"exit_code", c.exit_code},
                  {"timeout", c.timeout},       {"last_pass", c.last_pass},   {"last_phase", c.last_phase},
                  {"last_cycle", c.last_cycle}, {"stderr_tail", c.stderr_tail}, {"log", c.log}};
  } else {
    s["crash"] = nullptr;
  }
  return s;
}

// Bytes that are not UTF-8 (a name from a file, a child's stderr) become U+FFFD rather than an
// exception.
std::string dump(const ordered_json& doc, int indent) {
  return doc.dump(indent, ' ', false, ordered_json::error_handler_t::replace);
}

template <class T>
T get(const ordered_json& j, const char* key, T fallback = {}) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  return it->get<T>();
}

Status status_from(const std::string& s) {
  for (Status st : {Status::passed, Status::failed, Status::error, Status::crashed, Status::skipped}) {
    if (s == to_string(st)) return st;
  }
  throw std::runtime_error("unknown status '" + s + "'");
}

}  // namespace

std::string scenario_record_json(const ScenarioRecord& record) { return dump(scenario_json(record), -1); }

ScenarioRecord scenario_record_from_json(const std::string& text) {
  ordered_json s;
  try {
    s = ordered_json::parse(text);
  } catch (const ordered_json::exception& e) {
    throw std::runtime_error(std::string("a scenario record that is not JSON: ") + e.what());
  }
  try {
    ScenarioRecord r;
    r.name = get<std::string>(s, "name");
    r.file = get<std::string>(s, "file");
    r.description = get<std::string>(s, "description");
    r.fixture = get<std::string>(s, "fixture");
    r.backend = get<std::string>(s, "backend");
    r.backend_reason = get<std::string>(s, "backend_reason");
    r.passes = get<std::vector<std::string>>(s, "passes");
    r.status = status_from(get<std::string>(s, "status"));
    r.reason = get<std::string>(s, "reason");
    r.warnings = get<std::vector<std::string>>(s, "warnings", {});
    r.start = get<double>(s, "start");
    r.seconds = get<double>(s, "seconds");
    r.repeats = get<int>(s, "repeats", 1);
    r.mutations = get<std::vector<std::string>>(s, "mutations");
    r.expected_catches = get<std::map<std::string, std::vector<std::string>>>(s, "expected_catches");
    r.probes = get<std::vector<std::string>>(s, "probes");
    for (const auto& f : s.at("findings")) {
      Finding x;
      x.probe = get<std::string>(f, "probe");
      x.pass = get<std::string>(f, "pass");
      x.phase = get<std::string>(f, "phase");
      x.cycle = get<int>(f, "cycle");
      x.batch_size = get<std::int64_t>(f, "batch_size");
      x.subject = get<std::string>(f, "subject");
      x.message = get<std::string>(f, "message");
      for (const auto& [k, v] : f.at("evidence").items()) x.evidence.emplace_back(k, v.get<std::string>());
      r.findings.push_back(std::move(x));
    }
    if (auto causes = s.find("causes"); causes != s.end() && causes->is_array()) {
      for (const auto& c : *causes) {
        Cause x;
        x.summary = get<std::string>(c, "summary");
        x.subject = get<std::string>(c, "subject");
        x.findings = get<std::vector<std::size_t>>(c, "findings");
        x.probes = get<std::vector<std::string>>(c, "probes");
        x.first_cycle = get<int>(c, "first_cycle");
        x.repro = get<std::string>(c, "repro");
        r.causes.push_back(std::move(x));
      }
    }
    for (const auto& m : s.at("measurements")) {
      Measurement x;
      x.tag = get<std::string>(m, "tag");
      x.value = get<double>(m, "value", std::numeric_limits<double>::quiet_NaN());
      x.unit = get<std::string>(m, "unit");
      x.phase = get<std::string>(m, "phase");
      x.cycle = get<int>(m, "cycle");
      x.batch_size = get<std::int64_t>(m, "batch_size");
      x.pass = get<std::string>(m, "pass");
      r.measurements.push_back(std::move(x));
    }
    for (const auto& v : s.at("verdicts")) {
      MutationVerdict x;
      x.mutation = get<std::string>(v, "mutation");
      x.declared = get<bool>(v, "declared");
      x.expected = get<std::vector<std::string>>(v, "expected");
      x.caught = get<std::map<std::string, std::string>>(v, "caught");
      x.missed = get<std::vector<std::string>>(v, "missed");
      r.verdicts.push_back(std::move(x));
    }
    for (const auto& sp : s.at("spans")) {
      r.spans.push_back({get<std::string>(sp, "pass"), get<std::string>(sp, "phase"), get<int>(sp, "cycle"),
                         get<std::int64_t>(sp, "batch_size"), get<double>(sp, "start"), get<double>(sp, "seconds")});
    }
    if (auto c = s.find("crash"); c != s.end() && !c->is_null()) {
      CrashInfo x;
      x.cause = get<std::string>(*c, "cause");
      x.signal = get<std::string>(*c, "signal");
      x.exit_code = get<int>(*c, "exit_code");
      x.timeout = get<double>(*c, "timeout");
      x.last_pass = get<std::string>(*c, "last_pass");
      x.last_phase = get<std::string>(*c, "last_phase");
      x.last_cycle = get<int>(*c, "last_cycle");
      x.stderr_tail = get<std::string>(*c, "stderr_tail");
      x.log = get<std::string>(*c, "log");
      r.crash = std::move(x);
    }
    return r;
  } catch (const ordered_json::exception& e) {
    throw std::runtime_error(std::string("a scenario record with a missing or mistyped field: ") + e.what());
  }
}

std::string json_report(const RunRecord& run) {
  ordered_json doc;
  doc["json_schema_version"] = kReportSchemaVersion;
  doc["tool"] = "graphcheck";
  doc["tool_version"] = run.tool_version;
  doc["started_at"] = run.started_at;
  doc["complete"] = run.complete;
  doc["incomplete_reason"] = run.incomplete_reason;
  doc["threads"] = run.threads;
  doc["isolated"] = run.isolated;
  doc["jobs"] = run.jobs;
  doc["shard"] = {{"index", run.shard_index}, {"total", run.total_shards}};
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
  for (const auto& r : run.scenarios) scenarios.push_back(scenario_json(r));
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
  return dump(doc, 2) + "\n";
}

RunRecord run_record_from_json(const std::string& text) {
  ordered_json doc;
  try {
    doc = ordered_json::parse(text);
  } catch (const ordered_json::exception& e) {
    throw std::runtime_error(std::string("not JSON: ") + e.what());
  }
  if (!doc.is_object() || doc.value("tool", std::string()) != "graphcheck" || !doc.contains("scenarios")) {
    throw std::runtime_error("not a graphcheck report (no \"tool\": \"graphcheck\" and \"scenarios\")");
  }
  const int version = doc.value("json_schema_version", 0);
  if (version != kReportSchemaVersion) {
    throw std::runtime_error(fmt::format("a report of JSON schema version {}, this graphcheck reads version {}: "
                                         "merge reports of one graphcheck version",
                                         version, kReportSchemaVersion));
  }
  try {
    RunRecord run;
    run.tool_version = get<std::string>(doc, "tool_version");
    run.started_at = get<std::string>(doc, "started_at");
    run.complete = get<bool>(doc, "complete", true);
    run.incomplete_reason = get<std::string>(doc, "incomplete_reason");
    run.threads = get<int>(doc, "threads");
    run.isolated = get<bool>(doc, "isolated");
    run.jobs = get<int>(doc, "jobs", 1);
    if (auto shard = doc.find("shard"); shard != doc.end() && shard->is_object()) {
      run.shard_index = get<int>(*shard, "index");
      run.total_shards = get<int>(*shard, "total", 1);
    }
    if (auto env = doc.find("environment"); env != doc.end() && env->is_object()) {
      for (const auto& [k, v] : env->items()) run.environment.emplace_back(k, v.get<std::string>());
    }
    run.seconds = get<double>(doc, "seconds");
    for (const auto& s : doc.at("scenarios")) run.scenarios.push_back(scenario_record_from_json(s.dump()));
    if (auto km = doc.find("kill_matrix"); km != doc.end() && km->is_object()) {
      KillMatrix m;
      m.probes = get<std::vector<std::string>>(*km, "probes");
      m.problems = get<std::vector<std::string>>(*km, "problems");
      for (const auto& row : km->at("rows")) {
        KillMatrixRow r;
        r.scenario = get<std::string>(row, "scenario");
        r.mutation = get<std::string>(row, "mutation");
        r.cells = get<std::map<std::string, std::string>>(row, "cells");
        r.verdict = get<std::string>(row, "verdict");
        m.rows.push_back(std::move(r));
      }
      run.kill_matrix = std::move(m);
    }
    return run;
  } catch (const ordered_json::exception& e) {
    throw std::runtime_error(std::string("a report with a missing or mistyped field: ") + e.what());
  }
}

JsonReporter::JsonReporter(std::string path) : FileReporter(std::move(path), &json_report) {}

}  // namespace graphcheck
