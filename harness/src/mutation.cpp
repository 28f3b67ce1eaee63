#include "graphcheck/mutation.h"
#include "support/registry.h"

#include <cstdio>
#include <cstdlib>
#include <map>

namespace graphcheck::mutation {
namespace {

std::map<std::string, Info, std::less<>>& registry() {
  static std::map<std::string, Info, std::less<>> entries;
  return entries;
}

thread_local const std::set<std::string>* t_enabled = nullptr;

}  // namespace

bool add(std::string name, std::string owner, std::string description) {
  Info info{name, std::move(owner), std::move(description)};
  return detail::add_once(registry(), "mutation", std::move(name), std::move(info), "; give it one owner");
}

const Info* find(std::string_view name) {
  auto& entries = registry();
  auto it = entries.find(name);
  return it == entries.end() ? nullptr : &it->second;
}

std::vector<Info> all() {
  std::vector<Info> infos;
  for (const auto& [name, info] : registry()) infos.push_back(info);
  return infos;
}

bool applies_to(const Info& info, std::string_view fixture) {
  if (info.owner == "driver" || info.owner == fixture) return true;
  // Mutations registered from Python without an owner act on any Python model.
  if (info.owner == "python" && fixture.starts_with("python:")) return true;
  return fixture.size() > info.owner.size() && fixture.substr(0, info.owner.size()) == info.owner &&
         fixture[info.owner.size()] == '_';
}

bool enabled(std::string_view name) {
  if (!t_enabled) return false;
  for (const auto& n : *t_enabled) {
    if (n == name) return true;
  }
  return false;
}

Scope::Scope(std::set<std::string> names) : m_names(std::move(names)), m_previous(t_enabled) {
  t_enabled = &m_names;
}

Scope::~Scope() { t_enabled = m_previous; }

}  // namespace graphcheck::mutation
