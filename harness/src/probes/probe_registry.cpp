#include <cstdio>
#include <cstdlib>

#include "graphcheck/probe.h"
#include "graphcheck/plugin.h"

namespace graphcheck {

ProbeRegistry& ProbeRegistry::get() {
  static ProbeRegistry registry;
  return registry;
}

bool ProbeRegistry::add(std::string name, std::string description, ProbeFactory factory,
                        std::vector<Pass> passes) {
  if (m_entries.count(name)) {
    if (detail::record_clash("probe", name)) return false;  // a plugin's clash: load_plugin() reports it
    std::fprintf(stderr, "graphcheck: probe '%s' is registered twice\n", name.c_str());
    std::abort();
  }
  auto entry = std::make_unique<Entry>(Entry{name, std::move(description), std::move(factory), std::move(passes)});
  m_entries.emplace(std::move(name), std::move(entry));
  return true;
}

const ProbeRegistry::Entry* ProbeRegistry::find(const std::string& name) const {
  auto it = m_entries.find(name);
  return it == m_entries.end() ? nullptr : it->second.get();
}

std::vector<std::string> ProbeRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& [name, entry] : m_entries) out.push_back(name);
  return out;
}

}  // namespace graphcheck
