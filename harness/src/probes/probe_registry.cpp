#include "graphcheck/probe.h"
#include "support/registry.h"

namespace graphcheck {

ProbeRegistry& ProbeRegistry::get() {
  static ProbeRegistry registry;
  return registry;
}

bool ProbeRegistry::add(std::string name, std::string description, ProbeFactory factory,
                        std::vector<Pass> passes) {
  auto entry = std::make_unique<Entry>(Entry{name, std::move(description), std::move(factory), std::move(passes)});
  return detail::add_once(m_entries, "probe", std::move(name), std::move(entry));
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
