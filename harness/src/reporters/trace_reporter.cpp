// Chrome trace-event JSON (the "JSON Object Format" that Perfetto and chrome://tracing open):
// one process per scenario record, one thread per pass, a complete event ("X") per pass and per
// phase window, an instant event ("i") per finding at the end of the window it was made in.

#include <nlohmann/json.hpp>

#include <cmath>
#include <map>

#include "graphcheck/engine/reporter.h"
#include "report_views.h"

namespace graphcheck {
namespace {

double micros(double seconds) { return std::isfinite(seconds) ? std::round(seconds * 1e7) / 10 : 0; }

}  // namespace

std::string chrome_trace(const RunRecord& run) {
  using nlohmann::ordered_json;
  ordered_json events = ordered_json::array();
  for (std::size_t i = 0; i < run.scenarios.size(); ++i) {
    const ScenarioRecord& r = run.scenarios[i];
    const int pid = static_cast<int>(i) + 1;
    events.push_back({{"ph", "M"}, {"pid", pid}, {"tid", 0}, {"name", "process_name"},
                      {"args", {{"name", report::display_name(r)}}}});
    events.push_back({{"ph", "M"}, {"pid", pid}, {"tid", 0}, {"name", "process_sort_index"},
                      {"args", {{"sort_index", pid}}}});
    std::map<std::string, int> tids;
    for (const auto& pass : r.passes) {
      const int tid = static_cast<int>(tids.size()) + 1;
      if (!tids.emplace(pass, tid).second) continue;
      events.push_back({{"ph", "M"}, {"pid", pid}, {"tid", tid}, {"name", "thread_name"},
                        {"args", {{"name", pass + " pass"}}}});
      events.push_back({{"ph", "M"}, {"pid", pid}, {"tid", tid}, {"name", "thread_sort_index"},
                        {"args", {{"sort_index", tid}}}});
    }
    auto tid_of = [&](const std::string& pass) {
      auto it = tids.find(pass);
      if (it != tids.end()) return it->second;
      const int tid = static_cast<int>(tids.size()) + 1;
      tids.emplace(pass, tid);
      return tid;
    };
    for (const auto& span : r.spans) {
      ordered_json args = {{"pass", span.pass}, {"cycle", span.cycle}};
      if (span.batch_size > 0) args["batch_size"] = span.batch_size;
      events.push_back({{"ph", "X"},
                        {"pid", pid},
                        {"tid", tid_of(span.pass)},
                        {"cat", span.phase.empty() ? "pass" : "phase"},
                        {"name", span.phase.empty() ? span.pass + " pass" : span.phase},
                        {"ts", micros(r.start + span.start)},
                        {"dur", micros(span.seconds)},
                        {"args", std::move(args)}});
    }
    for (const auto& f : r.findings) {
      const Span* span = report::span_of(r, f);
      const double at = span ? span->start + span->seconds : r.seconds;
      ordered_json args = {{"probe", f.probe}, {"subject", f.subject}, {"message", f.message},
                           {"phase", f.phase}, {"cycle", f.cycle}};
      for (const auto& [k, v] : f.evidence) args["evidence." + k] = v;
      events.push_back({{"ph", "i"},
                        {"s", "t"},
                        {"pid", pid},
                        {"tid", tid_of(f.pass.empty() ? "observe" : f.pass)},
                        {"cat", "finding"},
                        {"name", "FAIL [" + f.probe + "] " + f.subject},
                        {"ts", micros(r.start + at)},
                        {"args", std::move(args)}});
    }
  }
  ordered_json doc;
  doc["traceEvents"] = std::move(events);
  doc["displayTimeUnit"] = "ms";
  ordered_json other = {{"tool", "graphcheck"}, {"tool_version", run.tool_version},
                        {"started_at", run.started_at}};
  for (const auto& [k, v] : run.environment) other[k] = v;
  doc["otherData"] = std::move(other);
  return doc.dump(1, ' ', false, ordered_json::error_handler_t::replace) + "\n";
}

TraceReporter::TraceReporter(std::string path) : FileReporter(std::move(path), &chrome_trace) {}

}  // namespace graphcheck
