#include "graphcheck/engine/compare.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "graphcheck/engine/record.h"
#include "reporters/report_views.h"

namespace graphcheck {
namespace {

using nlohmann::json;

// One scenario record of a report, as compare needs it.
struct Entry {
  std::string status;
  std::set<std::string> failed_probes;
  std::string detail;
  double seconds = 0;
  std::map<std::string, double> time;    // phase -> model seconds (observe pass), summed
  std::map<std::string, double> memory;  // phase -> peak bytes (observe pass), max
};

struct Report {
  std::string label;
  std::string incomplete;  // why the run is marked incomplete; empty when it is complete
  std::vector<std::string> order;
  std::map<std::string, Entry> entries;
};

std::string read_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (ec || !fs::exists(status)) throw ReportError(fmt::format("{}: no such file", path));
  if (!fs::is_regular_file(status)) {
    throw ReportError(fmt::format("{}: not a regular file (give the JSON report graphcheck wrote)", path));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ReportError(fmt::format("{}: cannot be read", path));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

template <class T>
T field(const json& object, const char* key, T fallback, const std::string& path, const std::string& where) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    throw ReportError(fmt::format("{}: {}: '{}' has the wrong type ({})", path, where, key, it->type_name()));
  }
}

Report parse(const std::string& text, const std::string& path) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    throw ReportError(fmt::format("{}: not JSON: {}", path, e.what()));
  }
  const auto tool = doc.is_object() ? doc.find("tool") : doc.end();
  if (!doc.is_object() || tool == doc.end() || !tool->is_string() || tool->get<std::string>() != "graphcheck") {
    throw ReportError(fmt::format("{}: not a graphcheck JSON report (no \"tool\": \"graphcheck\"); give the "
                                  "file `graphcheck run --json` or `graphcheck mutants --json` wrote",
                                  path));
  }
  const int version = field<int>(doc, "json_schema_version", 0, path, "the report");
  if (version < 2 || version > kReportSchemaVersion) {
    throw ReportError(fmt::format("{}: JSON schema version {} (this graphcheck reads versions 2 to {})", path, version,
                                  kReportSchemaVersion));
  }
  Report report;
  report.label = fmt::format("graphcheck {}, started {}", field<std::string>(doc, "tool_version", "?", path, "the report"),
                             field<std::string>(doc, "started_at", "?", path, "the report"));
  if (!field<bool>(doc, "complete", true, path, "the report")) {
    report.incomplete = field<std::string>(doc, "incomplete_reason", "", path, "the report");
    if (report.incomplete.empty()) report.incomplete = "the run had not ended when the report was written";
  }
  auto scenarios = doc.find("scenarios");
  if (scenarios == doc.end() || !scenarios->is_array()) {
    throw ReportError(fmt::format("{}: 'scenarios' is missing or not an array", path));
  }
  for (std::size_t i = 0; i < scenarios->size(); ++i) {
    const json& s = (*scenarios)[i];
    const std::string where = fmt::format("scenarios[{}]", i);
    if (!s.is_object()) throw ReportError(fmt::format("{}: {} is not an object", path, where));
    std::string name = field<std::string>(s, "name", "", path, where);
    const auto mutations = field<std::vector<std::string>>(s, "mutations", {}, path, where);
    if (!mutations.empty()) name += fmt::format(" [{}]", fmt::join(mutations, ", "));
    Entry e;
    e.status = field<std::string>(s, "status", "", path, where);
    e.seconds = field<double>(s, "seconds", 0, path, where);
    e.detail = field<std::string>(s, "reason", "", path, where);
    if (auto findings = s.find("findings"); findings != s.end() && findings->is_array()) {
      for (const auto& f : *findings) {
        if (!f.is_object()) continue;
        e.failed_probes.insert(field<std::string>(f, "probe", "?", path, where));
        if (e.detail.empty()) {
          e.detail = fmt::format("[{}] {}", field<std::string>(f, "probe", "?", path, where),
                                 field<std::string>(f, "message", "", path, where));
        }
      }
    }
    if (auto ms = s.find("measurements"); ms != s.end() && ms->is_array()) {
      for (const auto& m : *ms) {
        if (!m.is_object()) continue;
        const std::string pass = field<std::string>(m, "pass", "", path, where);
        if (!pass.empty() && pass != "observe") continue;
        const std::string tag = field<std::string>(m, "tag", "", path, where);
        const double value = field<double>(m, "value", NAN, path, where);
        if (!std::isfinite(value)) continue;
        if (tag.rfind("gc/timing/", 0) == 0) {
          e.time[tag.substr(10)] += value;
        } else if (tag.rfind("gc/memory/", 0) == 0 && tag.size() > 21 &&
                   tag.compare(tag.size() - 11, 11, "/peak_bytes") == 0) {
          const std::string phase = tag.substr(10, tag.size() - 21);
          e.memory[phase] = std::max(e.memory[phase], value);
        }
      }
    }
    // A name seen before (the same scenario twice in one run) stays apart: its second record is
    // "name #2" in both reports, whatever the order around it.
    if (report.entries.count(name)) {
      int k = 2;
      while (report.entries.count(fmt::format("{} #{}", name, k))) ++k;
      name = fmt::format("{} #{}", name, k);
    }
    report.order.push_back(name);
    report.entries.emplace(name, std::move(e));
  }
  return report;
}

bool passed(const std::string& status) { return status == "passed" || status == "skipped"; }
// Whether a record's figures mean anything: it ran its lifecycle (a skipped, erroneous or
// crashed run stopped early, and its times are not comparable).
bool measured(const std::string& status) { return status == "passed" || status == "failed"; }

std::vector<std::string> minus(const std::set<std::string>& a, const std::set<std::string>& b) {
  std::vector<std::string> out;
  std::set_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

void compare_metric(Comparison& c, const std::string& scenario, const std::string& metric,
                    const std::map<std::string, double>& base, const std::map<std::string, double>& now,
                    double floor) {
  for (const auto& [phase, b] : base) {
    auto it = now.find(phase);
    if (it == now.end() || !(b > 0)) continue;
    const double n = it->second;
    const double limit = b * (1 + c.options.max_regression_pct / 100);
    if (n > limit && n - b >= floor) {
      c.regressions.push_back({scenario, metric, phase, b, n});
    } else if (n < b / (1 + c.options.max_regression_pct / 100) && b - n >= floor) {
      c.improvements.push_back({scenario, metric, phase, b, n});
    }
  }
}

std::string cell(const std::string& s) { return report::markdown_cell(s); }

std::string figure(const MetricChange& m, double v) {
  return m.metric == "time" ? report::format_seconds(v) : report::format_bytes(v);
}

}  // namespace

Comparison compare_reports(const std::string& base_json, const std::string& base_path,
                           const std::string& new_json, const std::string& new_path,
                           const CompareOptions& options) {
  if (!(options.max_regression_pct >= 0)) throw ReportError("--max-regression must be a percentage >= 0");
  const Report base = parse(base_json, base_path);
  const Report now = parse(new_json, new_path);
  Comparison c;
  c.base_path = base_path;
  c.new_path = new_path;
  c.base_label = base.label;
  c.new_label = now.label;
  c.options = options;
  c.base_incomplete = base.incomplete;
  c.new_incomplete = now.incomplete;
  for (const auto& name : base.order) {
    if (!now.entries.count(name)) c.removed.push_back(name);
  }
  for (const auto& name : now.order) {
    const Entry& n = now.entries.at(name);
    auto b_it = base.entries.find(name);
    if (b_it == base.entries.end()) {
      c.added.push_back(name);
      if (!passed(n.status)) {
        c.new_failures.push_back({name, "(absent)", n.status,
                                  {n.failed_probes.begin(), n.failed_probes.end()}, {}, n.detail});
      }
      continue;
    }
    ++c.compared;
    const Entry& b = b_it->second;
    StatusChange change{name, b.status, n.status, minus(n.failed_probes, b.failed_probes),
                        minus(b.failed_probes, n.failed_probes), n.detail};
    if (passed(b.status) && !passed(n.status)) {
      c.new_failures.push_back(std::move(change));
    } else if (!passed(b.status) && passed(n.status)) {
      change.detail = b.detail;
      c.fixed.push_back(std::move(change));
    } else if (!passed(b.status)) {
      c.still_failing.push_back(std::move(change));
    }
    if (measured(b.status) && measured(n.status)) {
      compare_metric(c, name, "time", b.time, n.time, options.min_seconds);
      compare_metric(c, name, "time", {{"scenario", b.seconds}}, {{"scenario", n.seconds}}, options.min_seconds);
      compare_metric(c, name, "peak memory", b.memory, n.memory, options.min_bytes);
    }
  }
  return c;
}

Comparison compare_report_files(const std::string& base_path, const std::string& new_path,
                                const CompareOptions& options) {
  const std::string base = read_file(base_path);  // the base first: its error is reported first
  const std::string now = read_file(new_path);
  return compare_reports(base, base_path, now, new_path, options);
}

std::string comparison_markdown(const Comparison& c) {
  std::string md;
  std::vector<std::string> what;
  if (!c.new_failures.empty()) what.push_back(fmt::format("{} new failure{}", c.new_failures.size(), c.new_failures.size() == 1 ? "" : "s"));
  if (!c.new_incomplete.empty()) what.push_back("the new run is incomplete");
  if (!c.regressions.empty()) what.push_back(fmt::format("{} regression{} beyond +{:g}%", c.regressions.size(), c.regressions.size() == 1 ? "" : "s", c.options.max_regression_pct));
  md += fmt::format("## graphcheck compare: {}\n\n", c.regressed() ? fmt::format("REGRESSED ({})", fmt::join(what, ", ")) : "no regression");
  md += fmt::format("- base: `{}` ({})\n- new: `{}` ({})\n", cell(c.base_path), cell(c.base_label), cell(c.new_path), cell(c.new_label));
  if (!c.new_incomplete.empty()) md += fmt::format("- **the new report is incomplete**: {}\n", cell(c.new_incomplete));
  if (!c.base_incomplete.empty()) md += fmt::format("- the base report is incomplete: {}\n", cell(c.base_incomplete));
  md += fmt::format("- {} scenarios in both, {} added, {} removed; {} fixed, {} still failing\n",
                    c.compared, c.added.size(), c.removed.size(), c.fixed.size(), c.still_failing.size());
  md += fmt::format("- a regression: a figure above base × {:g} and by at least {} of time or {} of memory\n",
                    1 + c.options.max_regression_pct / 100, report::format_seconds(c.options.min_seconds),
                    report::format_bytes(c.options.min_bytes));
  auto status_table = [&](const char* title, const std::vector<StatusChange>& rows) {
    if (rows.empty()) return;
    md += fmt::format("\n### {}\n\n| scenario | base | new | probes failing now, not before | probes fixed | detail |\n|---|---|---|---|---|---|\n", title);
    for (const auto& r : rows) {
      md += fmt::format("| {} | {} | {} | {} | {} | {} |\n", cell(r.scenario), r.base_status, r.new_status,
                        cell(fmt::format("{}", fmt::join(r.new_probes, ", "))),
                        cell(fmt::format("{}", fmt::join(r.fixed_probes, ", "))), cell(r.detail));
    }
  };
  auto metric_table = [&](const char* title, const std::vector<MetricChange>& rows) {
    if (rows.empty()) return;
    md += fmt::format("\n### {}\n\n| scenario | metric | phase | base | new | change |\n|---|---|---|---|---|---|\n", title);
    for (const auto& m : rows) {
      md += fmt::format("| {} | {} | {} | {} | {} | {:+.1f}% |\n", cell(m.scenario), m.metric, cell(m.phase),
                        figure(m, m.base), figure(m, m.now), m.percent());
    }
  };
  status_table("New failures", c.new_failures);
  metric_table(fmt::format("Regressions beyond +{:g}%", c.options.max_regression_pct).c_str(), c.regressions);
  status_table("Fixed", c.fixed);
  std::vector<StatusChange> changed;
  for (const auto& s : c.still_failing) {
    if (!s.new_probes.empty() || !s.fixed_probes.empty()) changed.push_back(s);
  }
  status_table("Still failing, with other probes", changed);
  metric_table("Improvements", c.improvements);
  if (!c.added.empty()) md += fmt::format("\nAdded: {}\n", cell(fmt::format("{}", fmt::join(c.added, ", "))));
  if (!c.removed.empty()) md += fmt::format("\nRemoved (not in the new report): {}\n", cell(fmt::format("{}", fmt::join(c.removed, ", "))));
  return md;
}

}  // namespace graphcheck
