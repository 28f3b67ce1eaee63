// The registry of cumulative reporters, with the five built in.

#include <algorithm>

#include "graphcheck/engine/reporter.h"

namespace graphcheck {

namespace {

template <class R>
ReporterRegistry::Entry builtin(std::string name, std::string help, std::string suffix) {
  return {std::move(name), std::move(help),
          [suffix](const std::string& stem) { return stem + suffix; },
          [](const std::string& path) { return std::make_unique<R>(path); }};
}

bool valid_name(const std::string& name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
  });
}

}  // namespace

// The built-in reporters are added here, not from static initialisers of their own files, so that
// their order (the order reports are written and listed) is fixed.
ReporterRegistry::ReporterRegistry() {
  m_entries.push_back(builtin<JsonReporter>("json", "JSON report path", ".json"));
  m_entries.push_back({"junit", "JUnit XML path",
                       [](const std::string& stem) { return stem == "graphcheck" ? std::string("junit.xml") : stem + "-junit.xml"; },
                       [](const std::string& path) { return std::make_unique<JunitReporter>(path); }});
  m_entries.push_back(builtin<MarkdownReporter>(
      "markdown", "Markdown summary for a PR comment or a CI job summary, e.g. \"$GITHUB_STEP_SUMMARY\"", ".md"));
  m_entries.push_back(
      builtin<HtmlReporter>("html", "Self-contained HTML report with memory and timing charts", ".html"));
  m_entries.push_back(builtin<TraceReporter>(
      "trace", "Chrome trace-event JSON of every pass and phase, for Perfetto or chrome://tracing", "-trace.json"));
}

ReporterRegistry& ReporterRegistry::get() {
  static ReporterRegistry registry;
  return registry;
}

bool ReporterRegistry::add(Entry entry) {
  if (!valid_name(entry.name) || find(entry.name) || !entry.factory) return false;
  m_entries.push_back(std::move(entry));
  return true;
}

const ReporterRegistry::Entry* ReporterRegistry::find(const std::string& name) const {
  auto it = std::find_if(m_entries.begin(), m_entries.end(), [&](const Entry& e) { return e.name == name; });
  return it == m_entries.end() ? nullptr : &*it;
}

std::vector<std::string> ReporterRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& e : m_entries) out.push_back(e.name);
  return out;
}

}  // namespace graphcheck
