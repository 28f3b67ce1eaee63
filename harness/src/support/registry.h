#pragma once
// The one rule of every registry of names (models, probes, mutations): a name is registered once.
// A second registration of a name while a plugin loads is that plugin's clash (recorded, refused,
// and reported by load_plugin()); anywhere else it is a build error of this binary, and aborts.
// Torch-free.

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "graphcheck/plugin.h"

namespace graphcheck::detail {

// Emplaces `value` under `name` in `entries` (a std::map keyed by name); false when refused.
// `fix`: what the abort message tells the author to do, after "registered twice".
template <class Map, class Value>
bool add_once(Map& entries, const char* kind, std::string name, Value&& value, const char* fix = "") {
  if (entries.count(name)) {
    if (record_clash(kind, name)) return false;  // a plugin's clash: load_plugin() reports it
    std::fprintf(stderr, "graphcheck: %s '%s' is registered twice%s\n", kind, name.c_str(), fix);
    std::abort();
  }
  entries.emplace(std::move(name), std::forward<Value>(value));
  return true;
}

}  // namespace graphcheck::detail
