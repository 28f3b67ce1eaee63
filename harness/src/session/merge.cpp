// merge_shards (session.h): `graphcheck merge`, the reports of a sharded run as one. Torch-free.

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "graphcheck/engine/session.h"

namespace graphcheck::session {

MergedRun merge_shards(std::vector<std::pair<std::string, RunRecord>> shards) {
  MergedRun out;
  if (shards.empty()) {
    out.problems.push_back("no report to merge");
    out.run.complete = false;
    out.run.incomplete_reason = out.problems.front();
    return out;
  }
  std::sort(shards.begin(), shards.end(),
            [](const auto& a, const auto& b) { return a.second.shard_index < b.second.shard_index; });
  const RunRecord& first = shards.front().second;
  RunRecord& run = out.run;
  run.tool_version = first.tool_version;
  run.environment = first.environment;
  run.threads = first.threads;
  run.isolated = first.isolated;
  run.jobs = first.jobs;
  run.started_at = first.started_at;
  run.shard_index = 0;
  run.total_shards = 1;
  const int total = first.total_shards;
  const bool mutants = first.kill_matrix.has_value();
  std::map<int, std::string> seen;  // shard index -> its file
  for (const auto& [path, shard] : shards) {
    if (shard.total_shards != total) {
      out.problems.push_back(fmt::format("{} is shard {} of {}, the others of {}: merge the shards of one run",
                                         path, shard.shard_index, shard.total_shards, total));
    }
    if (shard.kill_matrix.has_value() != mutants) {
      out.problems.push_back(fmt::format("{} is a {} report, {} is a {} one: merge reports of one command", path,
                                         shard.kill_matrix ? "mutants" : "run", shards.front().first,
                                         mutants ? "mutants" : "run"));
    }
    if (auto [it, fresh] = seen.emplace(shard.shard_index, path); !fresh) {
      out.problems.push_back(fmt::format("shard {} of {} is given twice ({} and {}): its scenarios are counted once",
                                         shard.shard_index, total, it->second, path));
      continue;
    }
    if (!shard.complete) {
      out.problems.push_back(fmt::format("shard {} of {} ({}) is incomplete: {}", shard.shard_index, total, path,
                                         shard.incomplete_reason.empty() ? "its run did not finish" : shard.incomplete_reason));
    }
    if (shard.tool_version != run.tool_version) {
      out.problems.push_back(fmt::format("{} was written by graphcheck {}, {} by {}", path, shard.tool_version,
                                         shards.front().first, run.tool_version));
    }
    run.started_at = std::min(run.started_at, shard.started_at);
    run.seconds = std::max(run.seconds, shard.seconds);
    for (const auto& s : shard.scenarios) run.scenarios.push_back(s);
    if (shard.kill_matrix) {
      if (!run.kill_matrix) {
        run.kill_matrix = KillMatrix{};
        run.kill_matrix->probes = shard.kill_matrix->probes;
      }
      for (const auto& p : shard.kill_matrix->probes) {
        if (std::find(run.kill_matrix->probes.begin(), run.kill_matrix->probes.end(), p) == run.kill_matrix->probes.end()) {
          run.kill_matrix->probes.push_back(p);
        }
      }
      for (const auto& row : shard.kill_matrix->rows) run.kill_matrix->rows.push_back(row);
      for (const auto& p : shard.kill_matrix->problems) run.kill_matrix->problems.push_back(p);
    }
  }
  std::vector<int> missing;
  for (int i = 0; i < total; ++i) {
    if (!seen.count(i)) missing.push_back(i);
  }
  if (!missing.empty()) {
    out.problems.push_back(fmt::format("shard{} {} of {} missing: the scenarios of {} are not in the merged report",
                                       missing.size() == 1 ? "" : "s", fmt::join(missing, ", "), total,
                                       missing.size() == 1 ? "that shard" : "those shards"));
  }
  std::stable_sort(run.scenarios.begin(), run.scenarios.end(), [](const ScenarioRecord& a, const ScenarioRecord& b) {
    return a.name != b.name ? a.name < b.name : a.mutations < b.mutations;
  });
  if (run.kill_matrix) {
    std::stable_sort(run.kill_matrix->rows.begin(), run.kill_matrix->rows.end(),
                     [](const KillMatrixRow& a, const KillMatrixRow& b) {
                       return a.scenario != b.scenario ? a.scenario < b.scenario : a.mutation < b.mutation;
                     });
  }
  run.complete = out.problems.empty();
  run.incomplete_reason = fmt::format("{}", fmt::join(out.problems, "; "));
  return out;
}

}  // namespace graphcheck::session
