#pragma once
// Result records: what probes and the driver write, and the only thing reporters read.
// Plain values, torch-free.

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace graphcheck {

// Bumped on any incompatible change to the JSON report (reports/schema/).
inline constexpr int kReportSchemaVersion = 4;

enum class Status {
  passed,   // every check held
  failed,   // a check failed (a probe finding, or model code threw): exit 1
  error,    // bad scenario, config or checkpoint: exit 2
  crashed,  // the harness itself failed: exit 3
  skipped,  // not run, with a stated reason
};
[[nodiscard]] const char* to_string(Status status);

// One failed check, with the evidence a reader needs to find the bug.
struct Finding {
  std::string probe;  // "address", "replay_diff", or "driver" for model exceptions
  std::string pass;   // the pass it was made in: "observe", "census", ... (DESIGN §2.2)
  std::string phase;  // lifecycle phase it was detected in
  int cycle = 0;      // 0: initial load; k >= 1: refit cycle k
  std::int64_t batch_size = 0;  // 0 when not tied to one graph
  std::string subject;          // the tensor, hook or output it is about
  std::string message;          // one sentence: what went wrong and how to fix it
  std::vector<std::pair<std::string, std::string>> evidence;  // ordered key/value pairs
};

// Findings are symptoms; a cause is what an engineer fixes (DESIGN §2.10, session::triage): the
// findings that point at the same tensors, hook or load across cycles, batch sizes and passes,
// with the most specific one as the primary and the others as corroboration.
struct Cause {
  // One line: "`layers.{0,1}.hc_attn_fn_broadcast` is replaced instead of updated in place
  // (cycles 1, 2, 3) — address, replay_diff, coverage, poison, memory agree".
  std::string summary;
  std::string subject;                // "layers.{0,1}.hc_attn_fn_broadcast", "hook 'x'"; may be empty
  std::vector<std::size_t> findings;  // indices into ScenarioRecord::findings, the primary first
  std::vector<std::string> probes;    // the probes among them, the primary's first
  int first_cycle = 0;                // the earliest cycle any of them names
  std::string repro;                  // "graphcheck run scenarios/x.yaml --mutation m"
};

// A tagged number (`gc/replay_diff/max_abs`, `gc/timing/capture`), NVBench style.
struct Measurement {
  std::string tag;
  double value = 0;
  std::string unit;
  std::string phase;
  int cycle = 0;
  std::int64_t batch_size = 0;
  std::string pass;  // the pass it was measured in ("observe", "census", ...)
};

// Whether the probes a scenario declares for a mutation caught it (DESIGN §2.5). A probe is
// credited only with a finding made in one of its own passes (the observe pass, where every probe
// only reads, or its own disturbing pass) and absent from the clean run when one is known.
struct MutationVerdict {
  std::string mutation;
  bool declared = false;              // the scenario declares probes for it
  std::vector<std::string> expected;  // the probes it declares
  // Every probe credited with a kill (declared or not) -> the pass whose finding killed it.
  std::map<std::string, std::string> caught;
  std::vector<std::string> missed;    // declared probes that did not catch it
  // A declared, applicable mutation every declared probe caught.
  [[nodiscard]] bool ok() const { return declared && missed.empty(); }
};

// A stretch of a scenario's wall-clock timeline: one pass, or one phase window inside a pass
// (nested as the windows nest). The Chrome trace and the HTML timing bars are drawn from these.
struct Span {
  std::string pass;   // the pass it ran in
  // The lifecycle phase; empty for the pass as a whole. The harness's own work between phases has
  // spans too: "checkpoint synthesis" (a generated checkpoint written), "model B" (the
  // reference model built for a cycle) and "stream-order model" (a model the stream-order pass
  // builds and loads in one order; "stream-order model, canonical again" where it builds the
  // canonical order's model a second time, beside an order that differs).
  std::string phase;
  int cycle = 0;
  std::int64_t batch_size = 0;
  double start = 0;    // seconds since the scenario started
  double seconds = 0;  // wall clock, the probes' and the harness's work included
};

// How a scenario's own process ended when it did not end with a record (DESIGN §2.8: each
// scenario runs in a child process; a crash costs that scenario, not the run).
struct CrashInfo {
  std::string cause;        // "signal", "timeout", "exit" (exited without a record)
  std::string signal;       // "SIGSEGV (Segmentation fault)"; empty unless cause is signal/timeout
  int exit_code = 0;        // cause "exit": the status it exited with
  double timeout = 0;       // cause "timeout": the limit, seconds
  std::string last_pass;    // the last pass and phase it reported reaching; empty if none
  std::string last_phase;
  int last_cycle = 0;
  std::string stderr_tail;  // the end of what it wrote to stdout and stderr
  std::string log;          // where its whole output is kept
};

struct ScenarioRecord {
  std::string name;
  std::string file;
  std::string description;
  std::string fixture;
  std::string backend;
  std::string backend_reason;  // why that backend ran
  std::vector<std::string> passes;  // the passes that ran, in order
  std::vector<std::string> mutations;  // enabled in this run
  // Declared in the scenario: mutation -> probes that must catch it.
  std::map<std::string, std::vector<std::string>> expected_catches;
  std::vector<std::string> probes;  // probes that ran
  Status status = Status::passed;
  std::string reason;  // error / crashed / skipped: why
  std::vector<std::string> warnings;  // what the scenario cannot see (Scenario::warnings)
  std::vector<Finding> findings;
  std::vector<Cause> causes;  // the findings grouped by root cause, the most important first
  std::vector<Measurement> measurements;
  std::vector<MutationVerdict> verdicts;  // one per enabled mutation
  std::vector<Span> spans;               // every pass and phase window, in start order
  std::optional<CrashInfo> crash;        // its process crashed, hung or was killed
  int repeats = 1;                       // --repeat: how many times it ran (the record is the first)
  double start = 0;                      // seconds since the run started
  double seconds = 0;

  [[nodiscard]] std::set<std::string> failed_probes() const;
};

// --repeat: the first run's record, plus a finding of probe "repeat" for every check whose outcome
// changed across the runs (failed in some, held in others) and for a status that changed. Such a
// record fails: a flaky check is a bug of its own.
[[nodiscard]] ScenarioRecord merge_repeats(std::vector<ScenarioRecord> runs);

// The kill matrix of `graphcheck mutants`: each scenario clean and with every mutation it
// declares.
struct KillMatrixRow {
  std::string scenario;
  std::string mutation;  // "" for the clean run
  // probe -> "KILLED:<pass>" (declared, caught), "MISSED" (declared, not caught),
  // "failed:<pass>" (not declared, caught anyway), "." (neither)
  std::map<std::string, std::string> cells;
  std::string verdict;  // "ok" or what is wrong
  [[nodiscard]] bool ok() const { return verdict == "ok"; }
};

struct KillMatrix {
  std::vector<std::string> probes;  // columns, in order
  std::vector<KillMatrixRow> rows;
  std::vector<std::string> problems;  // every row that is not ok, and suite-level problems
};

struct RunRecord {
  std::string tool_version;
  std::string started_at;  // ISO 8601 UTC
  int threads = 0;         // libtorch intra-op threads the run used
  // What ran: graphcheck, libtorch, compiler, backend ... as (name, version) pairs, in order.
  std::vector<std::pair<std::string, std::string>> environment;
  std::optional<KillMatrix> kill_matrix;  // graphcheck mutants only
  // Reports are rewritten after every scenario: until the run ends they say it is incomplete
  // (and, when it was stopped, why).
  bool complete = true;
  std::string incomplete_reason;
  int shard_index = 0;   // --shard-index / GTEST_SHARD_INDEX
  int total_shards = 1;  // --total-shards / GTEST_TOTAL_SHARDS
  bool isolated = false;  // each scenario ran in a child process
  int jobs = 1;           // -j: scenarios at once
  std::vector<ScenarioRecord> scenarios;
  double seconds = 0;

  [[nodiscard]] int count(Status status) const;
  // 0 all passed, 1 a check failed, 2 bad usage/scenario/checkpoint, 3 harness failure.
  [[nodiscard]] int exit_code() const;
};

}  // namespace graphcheck
