#pragma once
// Mutations: named toggles that re-introduce one known bug, written next to the fix they revert:
//
//   if (graphcheck::mutation::enabled("mhc.rebind_broadcast")) { ...pre-fix... } else { ...fix... }
//
// A mutation is registered once (GRAPHCHECK_REGISTER_MUTATION) with its owner (a fixture name,
// or "driver" for generic ones) and a one-line description; scenarios and the CLI may only name
// registered mutations. Which mutations are enabled is scoped to the running scenario
// (mutation::Scope), so a mutation never leaks from one scenario into the next.

#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace graphcheck::mutation {

struct Info {
  std::string name;
  // The fixture it belongs to, or "driver" for generic ones. A fixture owner also covers the
  // fixtures of its family ("dsv4" covers "dsv4_mtp").
  std::string owner;
  std::string description;  // what bug it re-introduces
};

// Registers a mutation; returns true so it can initialise a static. Duplicate names abort.
bool add(std::string name, std::string owner, std::string description);
[[nodiscard]] const Info* find(std::string_view name);
[[nodiscard]] std::vector<Info> all();

// Whether the mutation can act on a scenario of `fixture`.
[[nodiscard]] bool applies_to(const Info& info, std::string_view fixture);

// True when `name` is enabled in the scenario running on this thread.
[[nodiscard]] bool enabled(std::string_view name);

// Enables a set of mutations on this thread for its lifetime. move-only; nests (inner wins).
class Scope {
 public:
  explicit Scope(std::set<std::string> names);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  std::set<std::string> m_names;
  const std::set<std::string>* m_previous;
};

}  // namespace graphcheck::mutation

#define GRAPHCHECK_MUTATION_CONCAT_(a, b) a##b
#define GRAPHCHECK_MUTATION_CONCAT(a, b) GRAPHCHECK_MUTATION_CONCAT_(a, b)
#define GRAPHCHECK_REGISTER_MUTATION(name, owner, description)                             \
  static const bool GRAPHCHECK_MUTATION_CONCAT(graphcheck_mutation_registered_, __COUNTER__) = \
      ::graphcheck::mutation::add(name, owner, description)
