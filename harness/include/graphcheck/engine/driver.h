#pragma once
// The lifecycle driver: runs one scenario. Torch-free header, so that the CLI (and a future
// child-process runner) only deals in scenarios, options and records.
//
// Phases: construct -> load -> PWAL -> warm-up (per batch size) -> capture (per batch size) ->
// replay + compare (per graph) -> for each refit cycle: [refit: load (in place, maybe a subset)
// -> PWAL] -> replay + compare.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "graphcheck/engine/record.h"
#include "graphcheck/engine/scenario.h"

namespace graphcheck {

class Probe;
class RefitTransport;
struct RankContext;

// Streaming progress, for the console. Called on the thread that runs the scenario.
class ProgressListener {
 public:
  virtual ~ProgressListener() = default;
  virtual void on_scenario_start(const Scenario& scenario, int index, int total) {}
  virtual void on_phase(const std::string& phase, int cycle, std::int64_t batch_size) {}
  // Every phase window of every pass as it begins (on_phase: the observe pass only). A child
  // process reports these to its parent, which names the last one when the child crashes.
  virtual void on_step(const std::string& pass, const std::string& phase, int cycle, std::int64_t batch_size) {}
  virtual void on_scenario_done(const ScenarioRecord& record) {}
};

struct RunOptions {
  std::string backend = "auto";
  std::set<std::string> mutations;     // enabled for the scenario
  std::optional<std::uint64_t> seed;   // replaces the scenario's seed
  std::string work_dir = "reports/out/work";  // generated checkpoints go below it
  // Seconds the scenario may run before the run stops it (0: none). A distributed runner stops a
  // hung rank before it, so that the other ranks' records are kept.
  double timeout = 0;
  // Extra probes that run after the scenario's own (tests use a recording probe). Not owned.
  std::vector<Probe*> extra_probes;
  // A distributed scenario (graphcheck/engine/transport.h): this process's place in it, and where
  // its refits come from. Both set by the front that owns the process group for a rollout rank;
  // unset, a distributed scenario goes to the registered distributed runner.
  std::shared_ptr<const RankContext> rank;
  std::shared_ptr<RefitTransport> transport;
};

// Runs a distributed scenario as a whole: launches its ranks, and merges their records into one.
// Installed by the front that owns process groups (the Python front); none: such a scenario is a
// user error naming `python -m graphcheck`.
using DistributedRunner =
    std::function<ScenarioRecord(const Scenario& scenario, const RunOptions& options, ProgressListener* progress)>;
void set_distributed_runner(DistributedRunner runner);

// The full checkpoint of refit seed `seed` (or the initial one) of a distributed scenario, as the
// trainer sends it: synthesized by an unsharded model (tp_rank 0 of 1) into the work dir, written
// once. Returns its path; throws std::runtime_error naming what failed.
[[nodiscard]] std::string synthesize_full_checkpoint(const Scenario& scenario, const RunOptions& options,
                                                     std::uint64_t seed);

// Runs one scenario; never throws. Model exceptions become failed checks, user errors (bad
// config, bad checkpoint) Status::error, harness faults Status::crashed.
[[nodiscard]] ScenarioRecord run_scenario(const Scenario& scenario, const RunOptions& options,
                                          ProgressListener* progress = nullptr);

// The verdict on `mutation` for a record of a run with it enabled: which probes the scenario
// declares caught it, in which pass, and which missed it. A probe is credited only with findings
// of its own passes; "driver" (the lifecycle itself failed) always is. `clean_failed`: the probes
// that failed the clean run of the same scenario (they get no credit), empty when unknown. Part
// of the session's policy (graphcheck/engine/session.h, session/verdicts.cpp); the driver asks it
// for each enabled mutation, `mutants` again net of the clean run.
[[nodiscard]] MutationVerdict judge_mutation(const ScenarioRecord& record, const std::string& mutation,
                                             const std::set<std::string>& clean_failed = {});

// Caps libtorch's intra-op threads for this process (at::set_num_threads) and returns the number
// now in force. On a shared CI machine one thread per process is fastest (see --threads).
int set_intra_op_threads(int threads);

// What a run ran on, for the reports: graphcheck's and libtorch's versions, the compiler, whether
// this build has CUDA, and the backend `backend` ("auto", "emulated", "cuda") resolves to, why.
[[nodiscard]] std::vector<std::pair<std::string, std::string>> run_environment(const std::string& backend);

// Fixtures, probes and mutations known to this binary.
[[nodiscard]] ScenarioCatalog default_catalog();

}  // namespace graphcheck
