#pragma once
// The session: one library owns the policy of a run, so that every front (the C++ CLI, `python
// -m graphcheck`, a model author's own binary) plans, runs and judges scenarios the same way.
//
//   select_scenarios  which scenarios: files, a name filter, a shard
//   plan_run / plan_mutants
//                     which runs: the mutations that apply to each scenario, skips and why
//   execute           runs the plan (isolated or in this process, -j, timeouts, repeats merged)
//   KillMatrixBuilder verdicts of mutated runs net of their clean run, rows and problems
//   run_plan          all of it: executes a plan, judges it, and streams the run record to the
//                     reporters as items finish
//
// A front parses its flags, calls these, and hands the run record to the reporters. Torch-free.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "graphcheck/engine/driver.h"
#include "graphcheck/engine/record.h"
#include "graphcheck/engine/reporter.h"
#include "graphcheck/engine/scenario.h"

namespace graphcheck::session {

// Seconds a scenario's process may run when neither the run's options nor its timeout key say.
inline constexpr double kDefaultTimeout = 900;

// How scenarios execute; shared by `run` and `mutants`.
struct ExecOptions {
  std::string backend = "auto";
  std::optional<std::uint64_t> seed;  // replaces each scenario's seed
  std::string report_dir = "reports/out";
  int threads = 1;                // libtorch intra-op threads per process (0: libtorch's default)
  bool isolate = true;            // one child process per scenario
  int jobs = 1;                   // children at once
  std::optional<double> timeout;  // given: wins over the scenario's timeout key; 0: none
  int repeat = 1;                 // runs per scenario, merged (a changing outcome is flaky)
};

// Shard `index` (0-based) of `total`: the i-th scenario of the sorted list goes to shard i mod N.
struct Shard {
  int index = 0;
  int total = 1;
};

// The shard this process runs: the values given, else GTEST_SHARD_INDEX / GTEST_TOTAL_SHARDS
// (and GTEST_SHARD_STATUS_FILE is touched, as the gtest protocol asks). nullopt, with `error`
// saying why, for an impossible pair.
[[nodiscard]] std::optional<Shard> resolve_shard(std::optional<int> index, std::optional<int> total,
                                                 std::string& error);

// Scenarios found under some paths.
struct Selection {
  std::vector<Scenario> scenarios;
  // One message per user error (a file that does not parse, a filter that matches nothing, an
  // impossible shard); a front reports each and exits 2.
  std::vector<std::string> errors;
  // What the user should know but is no error: scenario files found in a directory that name a
  // model of another front (Python), which this program leaves to `python -m graphcheck`.
  std::vector<std::string> notes;
  std::size_t errors_before_notes = 0;  // the notes come after this many errors (in file order)
  std::size_t before_shard = 0;  // scenarios that matched the filter, in all shards
  Shard shard;
};

// Loads the scenario files under `paths` (default: scenarios/) with the models of every front
// registered in this process, keeps those whose name matches the glob `filter` ("": all), and
// then those of `shard` (nullopt: from the environment, see resolve_shard). Slow scenarios
// (`slow: true`) found in a directory are left out, with a note, unless `include_slow`; one
// named on the command line runs.
[[nodiscard]] Selection select_scenarios(const std::vector<std::string>& paths, const std::string& filter = "",
                                         std::optional<Shard> shard = Shard{}, bool include_slow = false);
// The same with the shard given as a front's flags: each one not given comes from the
// environment (resolve_shard), resolved once the scenarios are loaded and filtered.
[[nodiscard]] Selection select_scenarios(const std::vector<std::string>& paths, const std::string& filter,
                                         std::optional<int> shard_index, std::optional<int> total_shards,
                                         bool include_slow = false);

// One record a run produces: a scenario with some mutations enabled, or a row skipped for a
// stated reason.
struct PlanItem {
  const Scenario* scenario = nullptr;
  std::set<std::string> mutations;  // enabled in the run
  std::string mutation;             // mutants: the mutation under test ("" for the clean run)
  std::size_t clean = 0;            // mutants: the item of the same scenario's clean run
  std::string skip;                 // non-empty: not run, recorded as skipped with this reason
};

struct Plan {
  std::vector<PlanItem> items;
  bool mutants = false;                  // one clean run per scenario, then one per mutation
  std::set<std::string> declared;        // mutants: every mutation some scenario declares
  [[nodiscard]] std::size_t runnable() const;
};

// Every scenario with the given mutations enabled. A mutation that belongs to another fixture
// skips the scenario, saying so. nullopt, with `error` naming the known mutations, when a
// mutation is unknown.
[[nodiscard]] std::optional<Plan> plan_run(const std::vector<Scenario>& scenarios,
                                           const std::vector<std::string>& mutations, std::string& error);
// Each scenario clean, then with each mutation it declares.
[[nodiscard]] Plan plan_mutants(const std::vector<Scenario>& scenarios);

// "graphcheck: backend emulated (no CUDA device)": which backend `name` resolves to, and why;
// nullopt, with `error`, when it is unavailable here.
[[nodiscard]] std::optional<std::string> describe_backend(const std::string& name, std::string& error);

// The run record's header: versions, environment, threads, isolation, shard; not complete.
[[nodiscard]] RunRecord new_run(const ExecOptions& options, Shard shard);

// Runs a plan: each item `options.repeat` times, merged into one record; skipped items are done
// at once. `console` (may be null) streams progress; `done(i, record)` is called on this thread
// as item i completes. Returns the items stopped, or never started, by a stop signal.
std::vector<std::size_t> execute(const Plan& plan, const ExecOptions& options, ProgressListener* console,
                                 const std::function<void(std::size_t, ScenarioRecord)>& done);

// The signal that stopped the run (SIGINT, SIGTERM), 0 when none. install_stop_handlers() makes
// a first signal stop the run (no new scenario starts; running children are stopped).
void install_stop_handlers();
[[nodiscard]] int stop_signal();
// "stopped by SIGINT after 3 of 7 runs finished; not run or stopped while running: a, b".
[[nodiscard]] std::string stop_reason(int signal, std::size_t finished, std::size_t total,
                                      const std::vector<std::string>& not_run);
// The child process of an isolated run (the hidden `__scenario` subcommand): runs one scenario
// file in this process, reports its steps on `progress_fd` and writes its record to
// `record_path`. Returns the exit code.
int run_child(const std::string& scenario_file, const RunOptions& options, int threads,
              const std::string& record_path, int progress_fd);

// "a" for a run, "a (clean)" or "a m" for mutants: how a plan item is named in messages.
[[nodiscard]] std::string item_name(const PlanItem& item, bool mutants);

// The verdict on one mutated run (declared in driver.h, where the driver asks for it).
using graphcheck::judge_mutation;

// `graphcheck merge`: the reports of a run's shards (--shard-index I --total-shards N) as the
// report of the whole run. Scenarios in name order, kill-matrix rows and problems together; the
// merged run is incomplete, and each problem says why, when a shard is missing (by index), given
// twice, or incomplete itself, or when the shards disagree on their number or kind (run against
// mutants).
struct MergedRun {
  RunRecord run;
  std::vector<std::string> problems;  // what makes it incomplete, one line each
};
[[nodiscard]] MergedRun merge_shards(std::vector<std::pair<std::string, RunRecord>> shards);

// One process of a distributed scenario as it ended (DESIGN §2.9).
struct RankRun {
  int rank = 0;
  int tp_rank = -1;      // its place among the rollout ranks; -1: the trainer only
  bool trainer = false;  // it streamed the refits
  std::optional<ScenarioRecord> record;  // a rollout rank that finished
  std::optional<CrashInfo> crash;        // it died, hung or was killed
  std::string error;                     // the trainer's own failure ("" when none)
};
// The ranks' records as one (Note [Distributed scenarios]): every finding names its rank; a rank
// that crashed makes the record crashed, naming it, and the others' findings stay; the cross-rank
// checks (probe ranks) compare what the rollout ranks recorded: tensors declared replicated must
// hold the same bytes on every rank after every load, and every rank must run the same hooks.
// The figures and timeline are those of the first rollout rank that finished.
[[nodiscard]] ScenarioRecord merge_ranks(const Scenario& scenario, std::vector<RankRun> ranks,
                                         const std::vector<std::string>& mutations = {});

// Triage (DESIGN §2.10): the record's findings grouped into causes, each with a primary finding
// (the most specific probe's, earliest) and the rest as corroboration. Findings group when they
// name the same tensor (evidence "tensor" / "tensors"), hook, undeclared range or cause tag
// ("nondeterministic", "host value baked", "frozen at capture"); a finding that names only the
// tensors that differ from model B joins the cause of one of them; one that names nothing (a
// stale replay, a NaN output, memory growth) joins the leading cause of its cycle. A forward that
// is nondeterministic leads. `repro` is the command each cause gives.
[[nodiscard]] std::vector<Cause> triage(const ScenarioRecord& record, const std::string& repro);
// "graphcheck run FILE --mutation m --seed 7 --backend emulated": the command that reruns one
// record as this run ran it (`python -m graphcheck` for a Python model's).
[[nodiscard]] std::string repro_command(const ScenarioRecord& record, const ExecOptions& options);

// The kill matrix's row for one record: `mutation` "" for the clean run, else the record's
// verdict on it (judge_mutation, already net of the clean run's failures).
[[nodiscard]] KillMatrixRow kill_matrix_row(const KillMatrix& matrix, const ScenarioRecord& record,
                                            const std::string& mutation);

// Builds the kill matrix of a mutants plan as its records arrive (in any order): rows are judged
// in plan order, each mutated run against its scenario's clean run, and every row that is not
// ok is a problem.
class KillMatrixBuilder {
 public:
  explicit KillMatrixBuilder(const Plan& plan);

  // Records item i's record. Returns the rows that can now be judged, in plan order: each up to
  // the first unfinished item. The records of judged rows that ran are appended to `scenarios`,
  // with their verdict recomputed net of the clean run.
  std::vector<KillMatrixRow> add(std::size_t item, ScenarioRecord record, std::vector<ScenarioRecord>& scenarios);
  // After a stop: judges every row still open whose run and clean run finished.
  std::vector<KillMatrixRow> finish_stopped(std::vector<ScenarioRecord>& scenarios);
  // After a whole-suite run: a problem for each known mutation that no scenario declares (no
  // probe is shown to catch it). Returns the problems added.
  std::vector<std::string> require_all_declared();

  [[nodiscard]] const KillMatrix& matrix() const { return m_matrix; }

 private:
  std::vector<KillMatrixRow> judge(bool all, std::vector<ScenarioRecord>& scenarios);

  const Plan& m_plan;
  KillMatrix m_matrix;
  std::vector<std::optional<ScenarioRecord>> m_records;
  std::vector<std::set<std::string>> m_clean_failed;
  std::size_t m_next = 0;
};

// The reporters a run writes, added to `into`: each registered reporter (ReporterRegistry) with
// the path `given` for its name ("-": none), else with its default file in `report_dir` for a run
// called `stem` ("graphcheck", "mutants"). Returns the paths to be written; nullopt, with `error`
// naming the known reporters, when `given` names an unknown one.
// The files a run called `stem` writes: (reporter, path) for each reporter with a path, as
// open_reporters() picks them; names no reporter has are left out.
[[nodiscard]] std::vector<std::pair<std::string, std::string>> report_files(
    const std::map<std::string, std::string>& given, const std::string& report_dir, const std::string& stem);
// Removes those of them that exist, before a run: a run that stops before writing its reports (a
// scenario that does not parse, a model that does not import: exit 2) leaves no earlier run's
// reports to be read as its own. Returns the paths removed.
std::vector<std::string> remove_previous_reports(const std::map<std::string, std::string>& given,
                                                 const std::string& report_dir, const std::string& stem);
[[nodiscard]] std::optional<std::vector<std::string>> open_reporters(const std::map<std::string, std::string>& given,
                                                                     const std::string& report_dir,
                                                                     const std::string& stem, ReporterMux& into,
                                                                     std::string& error);

// What a front shows while a plan runs; every member may be left empty.
struct Listeners {
  ProgressListener* console = nullptr;  // each scenario and phase as it runs
  // Mutants: each kill-matrix row as it is judged (in plan order), and each suite-level problem.
  std::function<void(const KillMatrix& matrix, const KillMatrixRow& row)> row;
  std::function<void(const std::string& problem)> problem;
  // A report that could not be written (the run goes on, and ends with exit code 3), at once.
  std::function<void(const std::string& error)> report_error;
};

struct Outcome {
  RunRecord run;  // complete unless stopped; mutants: with its kill matrix
  int signal = 0;  // the signal that stopped the run, 0 when it finished
  // Why a report could not be written, once per failure (the run went on; each was also given to
  // Listeners::report_error as it happened); a front exits 3.
  std::vector<std::string> report_errors;
};

// Runs `plan` (execute), judges it (a mutants plan: KillMatrixBuilder; `whole_suite`: every known
// mutation must be declared somewhere), and streams the run record to `reports`: rewritten as
// items finish (throttled, so that rewrites take at most about a tenth of the run), marked
// incomplete until the end; the final reports are always written. A stop signal (SIGINT,
// SIGTERM) ends the run early with the record saying what did not run.
[[nodiscard]] Outcome run_plan(const Plan& plan, const ExecOptions& options, Shard shard, Reporter& reports,
                               const Listeners& listeners = {}, bool whole_suite = false);

// How a run ends, for a front's exit code: 0 all passed, 1 a check failed (mutants: a problem in
// the kill matrix), 2 nothing could run, 3 a report could not be written or (mutants) a run
// crashed, 128 + N stopped by signal N. `message`, when not empty, says why on its own line
// (stderr for `error`, else stdout).
struct Ending {
  int code = 0;
  std::string message;
  bool error = false;
};
[[nodiscard]] Ending ending(const Plan& plan, const Outcome& outcome, Shard shard);

// What this process knows, for `list`: loaded plugins, fixtures (their config keys and defaults,
// and the error their defaults give, if any), probes and mutations.
struct Inventory {
  struct Fixture {
    std::string name;
    std::string description;
    std::vector<std::pair<std::string, std::string>> config;  // key -> default
    std::string construct_error;
  };
  struct Probe {
    std::string name;
    std::string description;
    std::vector<std::string> passes;
  };
  struct Mutation {
    std::string name;
    std::string owner;
    std::string description;
  };
  std::vector<std::string> plugins;
  std::vector<Fixture> fixtures;
  std::vector<Probe> probes;
  std::vector<Mutation> mutations;
};
[[nodiscard]] Inventory inventory();
// The inventory, and the scenarios given, as one JSON document (for tools) or as text for people;
// `scenarios` null: no scenario section.
[[nodiscard]] std::string inventory_json(const Inventory& inventory, const std::vector<Scenario>& scenarios);
[[nodiscard]] std::string inventory_text(const Inventory& inventory, const std::vector<Scenario>* scenarios);

}  // namespace graphcheck::session
