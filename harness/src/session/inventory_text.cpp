// The inventory (`graphcheck list`) as JSON and as text. Torch-free.

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include "graphcheck/engine/session.h"

namespace graphcheck::session {

std::string inventory_json(const Inventory& inv, const std::vector<Scenario>& scenarios) {
  nlohmann::ordered_json doc;
  doc["plugins"] = inv.plugins;
  doc["fixtures"] = nlohmann::ordered_json::array();
  for (const auto& f : inv.fixtures) {
    nlohmann::ordered_json config = nlohmann::ordered_json::object();
    for (const auto& [key, value] : f.config) config[key] = value;
    doc["fixtures"].push_back({{"name", f.name}, {"description", f.description}, {"config", config},
                               {"construct_error", f.construct_error}});
  }
  doc["probes"] = nlohmann::ordered_json::array();
  for (const auto& p : inv.probes) {
    doc["probes"].push_back({{"name", p.name}, {"description", p.description}, {"passes", p.passes}});
  }
  doc["mutations"] = nlohmann::ordered_json::array();
  for (const auto& m : inv.mutations) {
    doc["mutations"].push_back({{"name", m.name}, {"owner", m.owner}, {"description", m.description}});
  }
  doc["scenarios"] = nlohmann::ordered_json::array();
  for (const auto& sc : scenarios) {
    doc["scenarios"].push_back({{"name", sc.name}, {"fixture", sc.fixture}, {"file", sc.file},
                                {"description", sc.description}, {"mutations", sc.mutations}});
  }
  return doc.dump(2) + "\n";
}

std::string inventory_text(const Inventory& inv, const std::vector<Scenario>* scenarios) {
  std::string out;
  auto line = [&out](const std::string& text) { out += text + "\n"; };
  for (const auto& plugin : inv.plugins) line(fmt::format("plugin: {}", plugin));
  line("fixtures:");
  for (const auto& f : inv.fixtures) {
    line(fmt::format("  {:<18} {}", f.name, f.description));
    std::vector<std::string> keys;
    for (const auto& [key, value] : f.config) keys.push_back(fmt::format("{}={}", key, value));
    if (!keys.empty()) line(fmt::format("  {:<18} config: {}", "", fmt::join(keys, ", ")));
    if (!f.construct_error.empty()) line(fmt::format("  {:<18} (its defaults do not construct: {})", "", f.construct_error));
  }
  line("probes:");
  for (const auto& p : inv.probes) line(fmt::format("  {:<14} {}", p.name, p.description));
  line("mutations:");
  for (const auto& m : inv.mutations) line(fmt::format("  {:<28} [{}] {}", m.name, m.owner, m.description));
  if (!scenarios) return out;
  line("scenarios:");
  for (const auto& sc : *scenarios) {
    line(fmt::format("  {:<28} {:<10} {}", sc.name, sc.fixture, sc.file));
    for (const auto& [m, probes] : sc.mutations) line(fmt::format("      mutation {} -> {}", m, fmt::join(probes, ", ")));
  }
  return out;
}

}  // namespace graphcheck::session
