#pragma once
// Plugins: shared libraries whose static registrations (GRAPHCHECK_REGISTER_MODEL, _MUTATION,
// _PROBE) add models, mutations and probes to a running graphcheck, so that the stock CLI checks
// models compiled outside this repository (`graphcheck run --plugin libmodels.so`). Build one
// with the package's graphcheck_add_models() (a shared library linked to graphcheck::harness);
// a static archive would drop the objects nothing references, and their registrations with them.
// Torch-free.

#include <stdexcept>
#include <string>
#include <vector>

namespace graphcheck {

// A plugin that cannot be used: a missing file, a library dlopen() refuses (its dlerror() text),
// one that registers nothing, or a name already registered. A user error: the CLI exits 2.
class PluginError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What one plugin added.
struct PluginInfo {
  std::string path;  // as given
  std::vector<std::string> models, mutations, probes;
};

// Loads the shared library at `path` (once per process: loading the same file again returns what
// it added the first time) and checks what it registered. Throws PluginError.
PluginInfo load_plugin(const std::string& path);

// The plugins loaded in this process so far, in load order (canonical paths). A child process
// that runs a scenario loads the same ones.
[[nodiscard]] std::vector<std::string> loaded_plugins();

// GRAPHCHECK_PLUGIN_PATH: plugin files separated by ':' (empty entries skipped).
[[nodiscard]] std::vector<std::string> plugin_paths_from_env();

namespace detail {
// Registries call this on a duplicate name. While a plugin loads, the clash is recorded (the
// registration is refused and load_plugin() reports it); otherwise it returns false and the
// registry aborts, as a duplicate compiled into one binary is a build error.
bool record_clash(const char* kind, const std::string& name);
}  // namespace detail

}  // namespace graphcheck
