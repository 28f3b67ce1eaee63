#pragma once
// Scenario files (YAML), parsed and validated strictly: unknown keys, wrong types, unknown
// fixtures, mutations or probes are ScenarioErrors carrying file:line:column. Torch-free.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "graphcheck/config.h"

namespace graphcheck {

class ScenarioError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The scenario names a model of a front this process does not have (`model: {python: ...}` in
// the C++ CLI). The CLI leaves such files found in a directory to their own front, and refuses
// one named on the command line.
class ScenarioNeedsFront : public ScenarioError {
 public:
  using ScenarioError::ScenarioError;
};

enum class LoadFormat { checkpoint, dummy };
[[nodiscard]] const char* to_string(LoadFormat format);

// One named part of a refit streamed in several loads (RL weight sync sends buckets).
struct RefitBucket {
  std::string name;
  std::vector<std::string> only;  // name prefixes streamed in this bucket
};

// What one entry of `cycles:` does (README "Scenario files").
enum class CycleKind {
  refit,   // stream new weights (seed), maybe a subset or in buckets
  reload,  // stream the weights model A holds now again: a bit-identical refit
  sleep,   // sleep mode (as vLLM's): level 1 offloads the weights to host memory and discards
           // every other storage; level 2 discards the weights too, and the wake is followed by
           // a reload (of the held weights, or of new ones with `seed`)
};
[[nodiscard]] const char* to_string(CycleKind kind);

struct RefitSpec {
  // refit: the weights' seed. sleep level 2: the reload's, when has_seed (else the held weights).
  std::uint64_t seed = 0;
  std::vector<std::string> only;  // name prefixes streamed in this refit; empty: every tensor
  // Non-empty: the refit is streamed as these buckets, one load_weights() each, in order, then
  // one PWAL (`only` is then empty).
  std::vector<RefitBucket> buckets;
  std::string where;  // file:line:column of the cycle
  CycleKind kind = CycleKind::refit;
  bool has_seed = true;
  int sleep_level = 0;  // sleep: 1 or 2
  // `buckets: sweep`: the refit runs once per bucket boundary position over the stream order
  // (two buckets: the first k tensors, the rest), each with its own weights (seed + step), at
  // most max_splits positions (evenly spaced when the stream has more).
  bool sweep = false;
  std::int64_t max_splits = 32;
  // `pwal: per_bucket`: the loader is called once per bucket, as a chunked reload is: stage,
  // load the bucket, PWAL; else one stage before the first bucket and one PWAL after the last.
  bool pwal_per_bucket = false;

  // The prefixes this refit streams, over all buckets; empty: every tensor.
  [[nodiscard]] std::vector<std::string> prefixes() const;
  // Whether it streams weights that may differ from what model A holds (a refit, or a sleep
  // whose reload has a seed of its own).
  [[nodiscard]] bool new_weights() const {
    return kind == CycleKind::refit || (kind == CycleKind::sleep && sleep_level == 2 && has_seed);
  }
};

// Options of the poison probe (`poison:` in a scenario file).
struct PoisonOptions {
  // Tensor-name patterns of the staging tensors the model registers in stage_for_refit(): they
  // are poisoned before the refit's first load and must hold no poison once streamed.
  std::vector<std::string> staged;
  // Also poison every parameter and persistent buffer a refit streams, before the refit; they
  // must hold no poison after its PWAL.
  bool before_refit = false;
};

// A scenario run by several processes on torch.distributed (`distributed:` in a scenario file,
// DESIGN §2.9): a trainer rank streams every refit over the process group to the rollout ranks,
// which run the lifecycle on their tensor-parallel shards. The trainer may be a rollout rank too
// (colocated). Process groups come from Python: `python -m graphcheck` runs these.
struct DistributedSpec {
  enum class Transfer { per_tensor, packed };
  int world_size = 2;
  int trainer = 0;           // the rank that streams refits
  std::vector<int> rollout;  // the ranks that run the lifecycle, in tensor-parallel rank order
  std::string backend;       // "gloo" or "nccl"; "": gloo on the emulated backend, nccl on cuda
  Transfer transfer = Transfer::per_tensor;
  std::int64_t bucket_bytes = 1 << 20;  // packed: the size of one broadcast bucket
  // Seconds a collective may wait for the other ranks: what a rank does between two refits (its
  // lifecycle's passes) must fit in it.
  double timeout = 600;
  [[nodiscard]] bool colocated() const;
  // The tensor-parallel rank of process `rank`, or -1 when it runs no lifecycle.
  [[nodiscard]] int tp_rank(int rank) const;
};
[[nodiscard]] const char* to_string(DistributedSpec::Transfer transfer);

struct Scenario {
  std::string name;
  std::string description;
  std::string file;
  // A registered fixture's name, or "python:pkg.module:factory" for `model: {python: ...}`.
  std::string fixture;
  ModelConfig config;
  LoadFormat load = LoadFormat::checkpoint;
  std::string checkpoint;  // optional: load this file instead of a synthesized checkpoint
  std::uint64_t seed = 1;  // seed of the initial checkpoint and inputs
  std::vector<std::int64_t> batch_sizes;  // captured ("decode")
  // Run eagerly only ("prefill"), compared against model B after every load as the graphs are.
  std::vector<std::int64_t> eager_batch_sizes;
  std::vector<RefitSpec> cycles;
  std::vector<std::string> checks;  // probe names (expanded from `all`)
  std::map<std::string, std::vector<std::string>> mutations;  // mutation -> catching probes
  // load: dummy only. Tensor-name pattern -> the constant the dummy load must fill it with (the
  // model must declare it as dummy_weight_value).
  std::map<std::string, double> dummy_constants;
  // load: dummy only. Re-run the dummy load on models whose config `key` takes each of `values`
  // and report init writes and time against it (cost growth, e.g. with depth).
  struct Growth {
    std::string key;
    std::vector<std::int64_t> values;
  };
  std::optional<Growth> dummy_growth;
  PoisonOptions poison;
  // Non-empty: the run must stop with an error (a user error or a model failure) whose message
  // contains this text, e.g. a configuration the model must refuse loudly. It passes when it
  // does, and fails when the run completes or stops with another error.
  std::string expect_error;
  std::string expect_error_where;  // file:line:column
  // Seconds its process may run before it is killed and reported as crashed; 0: the run's
  // default. `--timeout` given on the command line wins over it.
  double timeout = 0;
  // Minutes of work or GiB of memory (a scale run): `run` and `mutants` leave it out of a
  // directory unless --slow (the nightly job runs them; the pre-merge job and the suite do not).
  bool slow = false;
  // Several processes on torch.distributed; empty: one process.
  std::optional<DistributedSpec> distributed;
  // What the scenario cannot see, said once in every report (e.g. refits that all carry the
  // weights the model already holds cannot show a stale read).
  std::vector<std::string> warnings;
};

// The names a scenario may refer to. Supplied by the caller so that parsing stays torch-free.
struct ScenarioCatalog {
  std::vector<std::string> fixtures;
  std::vector<std::string> probes;
  std::function<bool(const std::string&)> is_mutation;
  // `model: {KIND: SPEC}` for a front other than registered fixtures (KIND "python"): makes the
  // spec ready and returns "", or returns what is wrong with it and the fix. Unset: such models
  // are refused.
  std::function<std::string(const std::string& kind, const std::string& spec)> prepare_model;
};

// Parses and validates one file. Throws ScenarioError ("file:line:col: message"). Hostile input
// is an error too, never a hang or a crash: a path that is not a regular file (a FIFO, a
// directory, a device) is refused before it is opened; files over 1 MiB, YAML nested deeper
// than 64 levels, anchors and aliases that expand to more than 100,000 nodes, strings that are
// not UTF-8 and tabs in the indentation are each a ScenarioError naming the place (see Note
// [Scenario file limits] in formats/scenario_parser.h).
[[nodiscard]] Scenario parse_scenario_file(const std::string& path, const ScenarioCatalog& catalog);

// Parses scenario text as parse_scenario_file does; `path` stands for the file in messages and
// is the base of a relative `checkpoint:` path. For tests and fuzzing.
[[nodiscard]] Scenario parse_scenario_text(const std::string& text, const std::string& path,
                                           const ScenarioCatalog& catalog);

// Expands files and directories (every *.yaml / *.yml below, sorted) into scenario file paths.
// Throws ScenarioError for a path that does not exist, and for one (given, or a *.yaml / *.yml
// found below a directory) that is neither a regular file nor a directory, e.g. a FIFO.
[[nodiscard]] std::vector<std::string> collect_scenario_files(const std::vector<std::string>& paths);

}  // namespace graphcheck
