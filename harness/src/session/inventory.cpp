// The session's view of this process: what it knows (for `list`), which backend runs, and the
// run record's header.

#include <chrono>
#include <ctime>

#include "graphcheck/engine/backend.h"
#include "graphcheck/engine/session.h"
#include "graphcheck/model.h"
#include "graphcheck/mutation.h"
#include "graphcheck/plugin.h"
#include "graphcheck/probe.h"

namespace graphcheck::session {

namespace {

std::string now_iso8601() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

// A fixture's config keys and their defaults: the keys its constructor asks for when given none.
// A fixture whose construction fails with its defaults says so instead.
Inventory::Fixture fixture(const std::string& name) {
  Inventory::Fixture info;
  info.name = name;
  info.description = ModelRegistry::get().description(name);
  ModelConfig config;
  try {
    (void)ModelRegistry::get().find(name)->factory(config);
  } catch (const std::exception& e) {
    info.construct_error = e.what();
  }
  for (const auto& [key, value] : config.defaults_asked()) info.config.emplace_back(key, to_string(value));
  return info;
}

}  // namespace

Inventory inventory() {
  Inventory out;
  out.plugins = loaded_plugins();
  for (const auto& name : ModelRegistry::get().names()) out.fixtures.push_back(fixture(name));
  for (const auto& name : ProbeRegistry::get().names()) {
    const ProbeRegistry::Entry* entry = ProbeRegistry::get().find(name);
    Inventory::Probe probe{name, entry->description, {}};
    for (Pass pass : entry->passes) probe.passes.emplace_back(to_string(pass));
    out.probes.push_back(std::move(probe));
  }
  for (const auto& m : mutation::all()) out.mutations.push_back({m.name, m.owner, m.description});
  return out;
}

std::optional<std::string> describe_backend(const std::string& name, std::string& error) {
  try {
    const BackendChoice choice = make_backend(name);
    return std::string(choice.backend->name()) + " (" + choice.reason + ")";
  } catch (const std::invalid_argument& e) {
    error = e.what();
    return std::nullopt;
  }
}

RunRecord new_run(const ExecOptions& options, Shard shard) {
  RunRecord run;
  run.tool_version = GRAPHCHECK_VERSION;
  run.started_at = now_iso8601();
  run.threads = set_intra_op_threads(options.threads);
  run.environment = run_environment(options.backend);
  run.isolated = options.isolate;
  run.jobs = options.isolate ? options.jobs : 1;
  run.shard_index = shard.index;
  run.total_shards = shard.total;
  run.complete = false;
  return run;
}

}  // namespace graphcheck::session
