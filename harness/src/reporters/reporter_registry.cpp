// The registry of cumulative reporters, with the five built in.

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "graphcheck/engine/reporter.h"
#include "graphcheck/plugin.h"

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
  if (!valid_name(entry.name) || !entry.factory) {
    // A registration that cannot work is a build error of whoever wrote it, plugin or binary.
    std::fprintf(stderr, "graphcheck: reporter '%s' cannot be registered: %s\n", entry.name.c_str(),
                 entry.factory ? "its name must be [a-z0-9-]+ (it is the flag --NAME)" : "it has no factory");
    std::abort();
  }
  if (find(entry.name)) {
    if (detail::record_clash("reporter", entry.name)) return false;  // a plugin's: load_plugin() reports it
    std::fprintf(stderr, "graphcheck: reporter '%s' is registered twice\n", entry.name.c_str());
    std::abort();
  }
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
