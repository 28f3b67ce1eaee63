#include "graphcheck/plugin.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>

#include "graphcheck/model.h"
#include "graphcheck/mutation.h"
#include "graphcheck/probe.h"

namespace graphcheck {
namespace {

struct PluginState {
  // Recursive: a plugin's static initialisers may load another plugin.
  std::recursive_mutex mutex;
  std::map<std::string, PluginInfo> by_file;     // canonical path -> what it added
  std::vector<std::string> order;                // paths as given, in load order
};

PluginState& state() {
  static PluginState s;
  return s;
}

// The clashes of the plugin this thread is loading ("model 'dsv4'"), or nullptr: registrations
// run on the thread that calls dlopen(), and only theirs may be refused.
thread_local std::vector<std::string>* t_clashes = nullptr;

// Sets t_clashes for its lifetime, restoring the outer load's on the way out (also on a throw).
class LoadingScope {
 public:
  explicit LoadingScope(std::vector<std::string>& clashes) : m_previous(t_clashes) { t_clashes = &clashes; }
  ~LoadingScope() { t_clashes = m_previous; }
  LoadingScope(const LoadingScope&) = delete;
  LoadingScope& operator=(const LoadingScope&) = delete;

 private:
  std::vector<std::string>* m_previous;
};

std::set<std::string> model_names() {
  const auto names = ModelRegistry::get().names();
  return {names.begin(), names.end()};
}
std::set<std::string> mutation_names() {
  std::set<std::string> names;
  for (const auto& info : mutation::all()) names.insert(info.name);
  return names;
}
std::set<std::string> probe_names() {
  const auto names = ProbeRegistry::get().names();
  return {names.begin(), names.end()};
}
std::vector<std::string> added(const std::set<std::string>& before, const std::set<std::string>& after) {
  std::vector<std::string> out;
  std::set_difference(after.begin(), after.end(), before.begin(), before.end(), std::back_inserter(out));
  return out;
}

}  // namespace

namespace detail {
bool record_clash(const char* kind, const std::string& name) {
  if (!t_clashes) return false;
  t_clashes->push_back(fmt::format("{} '{}'", kind, name));
  return true;
}
}  // namespace detail

PluginInfo load_plugin(const std::string& path) {
  PluginState& s = state();
  std::lock_guard<std::recursive_mutex> lock(s.mutex);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    throw PluginError(fmt::format(
        "plugin '{}': {}: give the path of a shared library built with graphcheck_add_models() "
        "(--plugin or GRAPHCHECK_PLUGIN_PATH)",
        path, errno == ENOENT ? "no such file" : std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    throw PluginError(fmt::format("plugin '{}': not a regular file: give the path of a shared library (.so)", path));
  }
  std::error_code ec;
  const std::string canonical = std::filesystem::canonical(path, ec).string();
  const std::string key = ec ? path : canonical;
  if (auto it = s.by_file.find(key); it != s.by_file.end()) return it->second;

  const auto models = model_names();
  const auto mutations = mutation_names();
  const auto probes = probe_names();
  std::vector<std::string> clashes;
  void* handle = nullptr;
  ::dlerror();
  try {
    LoadingScope loading(clashes);
    // RTLD_NOW: an unresolved symbol (a plugin built against another graphcheck or libtorch)
    // fails here, not in the middle of a scenario. The handle is never closed: the registered
    // factories point into it.
    handle = ::dlopen(path.find('/') == std::string::npos ? ("./" + path).c_str() : path.c_str(), RTLD_NOW | RTLD_LOCAL);
  } catch (const PluginError&) {
    throw;  // a plugin it loads in turn
  } catch (const std::exception& e) {
    throw PluginError(fmt::format("plugin '{}' threw while registering its models: {}: fix its static "
                                  "initialisers (GRAPHCHECK_REGISTER_* and globals)",
                                  path, e.what()));
  } catch (...) {
    throw PluginError(fmt::format("plugin '{}' threw a non-standard exception while registering its models", path));
  }
  if (!handle) {
    const char* why = ::dlerror();
    throw PluginError(fmt::format(
        "plugin '{}' cannot be loaded: {}: it must be a shared library built against this "
        "graphcheck and libtorch (graphcheck_add_models() in the installed package does that)",
        path, why ? why : "unknown dlopen() failure"));
  }
  if (!clashes.empty()) {
    throw PluginError(fmt::format(
        "plugin '{}' registers {}, already registered by graphcheck or an earlier plugin: rename "
        "it in the plugin (names are global: prefix them with the project's name)",
        path, fmt::join(clashes, ", ")));
  }
  PluginInfo info;
  info.path = path;
  info.models = added(models, model_names());
  info.mutations = added(mutations, mutation_names());
  info.probes = added(probes, probe_names());
  if (info.models.empty() && info.mutations.empty() && info.probes.empty()) {
    throw PluginError(fmt::format(
        "plugin '{}' registers no model, mutation or probe: its GRAPHCHECK_REGISTER_* lines were "
        "dropped or never compiled in (a static archive drops the objects nothing references): "
        "build it as a shared library of the registering sources, e.g. with graphcheck_add_models()",
        path));
  }
  s.by_file.emplace(key, info);
  s.order.push_back(key);  // absolute: a child process may resolve it from anywhere
  return info;
}

std::vector<std::string> loaded_plugins() {
  PluginState& s = state();
  std::lock_guard<std::recursive_mutex> lock(s.mutex);
  return s.order;
}

std::vector<std::string> plugin_paths_from_env() {
  std::vector<std::string> paths;
  const char* env = std::getenv("GRAPHCHECK_PLUGIN_PATH");
  if (!env) return paths;
  std::string item;
  for (const char* p = env;; ++p) {
    if (*p == ':' || *p == '\0') {
      if (!item.empty()) paths.push_back(item);
      item.clear();
      if (*p == '\0') break;
    } else {
      item += *p;
    }
  }
  return paths;
}

}  // namespace graphcheck
