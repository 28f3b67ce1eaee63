// A rollout rank's share of the engine (engine/pass_run.h), and the entry of distributed
// scenarios (driver.h: set_distributed_runner, synthesize_full_checkpoint).
//
// Note [Distributed scenarios]
// In RL weight sync a refit is not a file read: the trainer pushes new weights over the process
// group to a running, tensor-parallel inference engine (vLLM's start_weight_update,
// update_weights, finish_weight_update; SGLang's update_weights_from_distributed). A scenario with
// `distributed:` runs world_size processes on torch.distributed (python/graphcheck/distributed.py
// makes the process group and implements RefitTransport); each rollout rank runs the whole engine
// on its shard (its models get tp_rank and tp_size as config keys):
//  - the initial load reads the full checkpoint, synthesized by an unsharded model, as workers
//    read it from disk; every refit arrives from the trainer in the observe pass (its stream is
//    the transport's), and the later passes replay what this rank received;
//  - model B is the truth loaded through the tensor-parallel contract (tensor_parallel()): the
//    full checkpoints the trainer synthesizes, each tensor's shard for this rank copied into its
//    region, then PWAL; never the model's loader, so a loader that takes the wrong rank's rows is
//    a difference between A and B;
//  - after each refit the manifest the trainer sends (finish_weight_update) is checked against
//    what arrived (probe transfer), and the tensors declared replicated and every hook call are
//    recorded, so that merging the ranks' records (session::merge_ranks) can compare the ranks.
// What the rank cannot see alone (one rank skipping PWAL, a replicated scale derived from the
// local shard) is the merge's cross-rank check (probe ranks).

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "counting_allocator.h"
#include "engine/driver.h"
#include "engine/errors.h"
#include "engine/pass_run.h"
#include "engine/streams.h"
#include "fingerprint.h"
#include "graphcheck/checkpoint.h"
#include "graphcheck/model.h"
#include "graphcheck/probe.h"
#include "graphcheck/safetensors.h"
#include "tensor_format.h"

namespace graphcheck {

namespace {

std::mutex g_runner_mutex;
std::mutex g_written_mutex;
std::set<std::string> g_written;  // synthesize_full_checkpoint's files, in this process
DistributedRunner& runner_slot() {
  static DistributedRunner runner;
  return runner;
}

// The tensors of a checkpoint file with these prefixes (every one when empty), by name.
std::map<std::string, torch::Tensor> read_full(const std::string& path, const std::vector<std::string>& prefixes) {
  std::map<std::string, torch::Tensor> out;
  for (NamedTensor& t : engine::read_checkpoint_tensors(path, prefixes)) out[t.name] = std::move(t.tensor);
  return out;
}

// A 64-bit fingerprint as a measurement's value: its top 53 bits, exact in a double.
double fingerprint_value(std::uint64_t fp) { return static_cast<double>(fp >> 11); }

}  // namespace

void set_distributed_runner(DistributedRunner runner) {
  std::lock_guard<std::mutex> lock(g_runner_mutex);
  runner_slot() = std::move(runner);
}

namespace engine {

DistributedRunner distributed_runner() {
  std::lock_guard<std::mutex> lock(g_runner_mutex);
  return runner_slot();
}

void PassRun::load_by_contract(LifecycleModel& model, const char* what) {
  const RankContext& rank = *m_driver.rank();
  // The truth: the initial checkpoint, overlaid with every refit so far, as the trainer
  // synthesized them.
  std::map<std::string, torch::Tensor> weights;
  {
    HarnessTime t(m_harness_seconds);
    weights = read_full(m_driver.checkpoint_for(m_driver.seed(), *this, [&] { return construct_synthesis(); }), {});
    for (const CycleStep& step : m_steps) {
      if (step.cycle > m_cycle) break;
      const std::string path = m_driver.checkpoint_for(step.seed, *this, [&] { return construct_synthesis(); });
      for (auto& [name, tensor] : read_full(path, step.prefixes)) weights[name] = std::move(tensor);
    }
  }
  const std::vector<TensorParallel> specs =
      call_model(m_phase, fmt::format("{} tensor_parallel()", what), [&] { return model.tensor_parallel(); });
  const std::vector<CheckpointEntry> layout =
      call_model(m_phase, fmt::format("{} checkpoint_mapping()", what), [&] { return graphcheck::checkpoint_layout(model); });
  torch::NoGradGuard no_grad;
  for (const CheckpointEntry& entry : layout) {
    auto it = weights.find(entry.checkpoint);
    if (it == weights.end()) {
      throw UserError(fmt::format("{}: rank {}'s model has checkpoint tensor '{}', which the full checkpoint the "
                                  "trainer sends lacks: the sharded and the unsharded model (tp_size 1) must have "
                                  "the same checkpoint names",
                                  scenario().file, rank.rank, entry.checkpoint));
    }
    const torch::Tensor& full = it->second;
    const TensorParallel* spec = find_tensor_parallel(specs, entry.checkpoint);
    torch::Tensor part = full;
    TensorShard shard;
    try {
      if (spec) shard = tensor_shard(*spec, entry.checkpoint, full.sizes(), rank.tp_rank, rank.tp_size);
    } catch (const ConfigError& e) {
      throw UserError(e.what());
    }
    if (shard.sharded) part = full.narrow(shard.dim, shard.offset, shard.size);
    if (part.sizes() != entry.region.sizes()) {
      throw UserError(fmt::format(
          "{}: checkpoint tensor '{}' is {} in the full checkpoint; rank {} (tensor-parallel rank {} of {}) "
          "holds {} of it by tensor_parallel() ({}), but its region in the model is {}: declare how it "
          "shards in tensor_parallel() (column, row, vocab, split_dim, replicated)",
          scenario().file, entry.checkpoint, shape_string(full.sizes()), rank.rank, rank.tp_rank, rank.tp_size,
          shape_string(part.sizes()), spec ? fmt::format("{} '{}'", to_string(spec->kind), spec->pattern) : "no entry: replicated",
          shape_string(entry.region.sizes())));
    }
    torch::Tensor region = entry.region;
    region.copy_(part.to(region.device(), region.scalar_type()));
  }
  call_model(m_phase, fmt::format("{} process_weights_after_loading()", what), [&] {
    model.process_weights_after_loading();
    return 0;
  });
}

PassRun::KernelLoad PassRun::load_kernel_format(WeightStream& stream, LoadEvent& e) {
  std::map<std::string, torch::Tensor> live;
  for (auto& t : graphcheck::live_tensors(*m_model)) live.emplace(t.name, t.tensor);
  KernelLoad out;
  torch::NoGradGuard no_grad;
  while (auto item = stream.next()) {
    auto it = live.find(item->name);
    if (it == live.end() || !it->second.defined()) {
      out.unknown.push_back(item->name);
      continue;
    }
    if (it->second.sizes() != item->tensor.sizes()) {
      out.mismatched.push_back(fmt::format("{} (live {}, sent {})", item->name, shape_string(it->second.sizes()),
                                           shape_string(item->tensor.sizes())));
      continue;
    }
    it->second.copy_(item->tensor.to(it->second.device(), it->second.scalar_type()));
    e.loaded.insert(item->name);
  }
  return out;
}

void PassRun::check_transfer(const LoadEvent& e, const KernelLoad& kernel, const std::vector<std::string>& unread,
                             bool checkpoint_format) {
  TransferEvent t;
  static_cast<PhaseEvent&>(t) = e;
  t.source = e.source;
  t.checkpoint_format = checkpoint_format;
  t.unknown_kernel_names = kernel.unknown;
  t.kernel_shape_mismatches = kernel.mismatched;
  t.unread = unread;
  {
    HarnessTime time(m_harness_seconds);
    // On the host: the trainer's manifest holds host fingerprints (a device one is another hash).
    for (const NamedTensor& r : e.streamed) t.received[r.name] = fingerprint(r.tensor.cpu());
  }
  t.sent = call_model(Phase::refit, "finish_weight_update (the trainer's manifest)",
                      [&] { return m_driver.transport()->manifest(m_cycle); });
  notify(&Probe::on_transfer_checked, t);
}

void PassRun::annotate_shards(std::vector<CheckpointEntry>& layout) {
  const RankContext* rank = m_driver.rank();
  if (!rank || rank->tp_size <= 1) return;
  const std::vector<TensorParallel> specs = call_model(m_phase, "tensor_parallel()", [&] { return m_model->tensor_parallel(); });
  for (CheckpointEntry& entry : layout) {
    const TensorParallel* spec = find_tensor_parallel(specs, entry.checkpoint);
    if (!spec || !entry.region.defined()) continue;
    // The full tensor's extent along the split dim: this rank's region times the ranks (for a
    // vocab split at least that), which is all a message needs.
    std::vector<std::int64_t> full = entry.region.sizes().vec();
    const bool two_d = full.size() >= 2;
    std::int64_t dim = 0;
    switch (spec->kind) {
      case TensorParallel::Kind::replicated: continue;
      case TensorParallel::Kind::row:
        if (!two_d) continue;
        dim = 1;
        break;
      case TensorParallel::Kind::split_dim: dim = spec->dim; break;
      case TensorParallel::Kind::column:
      case TensorParallel::Kind::vocab: dim = 0; break;
    }
    if (dim < 0 || dim >= static_cast<std::int64_t>(full.size())) continue;
    full[static_cast<std::size_t>(dim)] *= rank->tp_size;
    try {
      entry.tp = tensor_shard(*spec, entry.checkpoint, full, rank->tp_rank, rank->tp_size);
      entry.tp_rank = rank->tp_rank;
    } catch (const ConfigError&) {
    }
  }
}

void PassRun::record_replicated() {
  HarnessTime time(m_harness_seconds);
  const std::vector<TensorParallel> specs = call_model(m_phase, "tensor_parallel()", [&] { return m_model->tensor_parallel(); });
  std::set<std::string> checkpoint_names;
  for (const auto& entry : checkpoint_layout()) {
    if (!entry.sharded && entry.checkpoint == entry.live) checkpoint_names.insert(entry.live);
  }
  PhaseEvent at = event(m_phase);
  measure(at, "gc/dist/cycle_done", 1, "cycle");  // the merge compares hooks up to the last cycle all ranks did
  for (const NamedTensor& t : graphcheck::live_tensors(*m_model)) {
    if (!t.tensor.defined()) continue;
    const TensorParallel* spec = find_tensor_parallel(specs, t.name);
    // Declared replicated, or a checkpoint tensor no entry splits (a full copy on every rank).
    const bool replicated = spec ? spec->kind == TensorParallel::Kind::replicated ||
                                       (spec->kind == TensorParallel::Kind::row && t.tensor.dim() < 2)
                                 : checkpoint_names.count(t.name) > 0;
    if (!replicated) continue;
    measure(at, "gc/dist/replicated/" + t.name, fingerprint_value(fingerprint(t.tensor)), "xxh3");
  }
}

}  // namespace engine

std::string synthesize_full_checkpoint(const Scenario& scenario, const RunOptions& options, std::uint64_t seed) {
  // Once per path in this process (the trainer asks for each refit's; its files do not change).
  const std::filesystem::path dir = std::filesystem::path(options.work_dir) / scenario.name;
  const std::string path = (dir / fmt::format("seed-{}.safetensors", seed)).string();
  {
    std::lock_guard<std::mutex> lock(g_written_mutex);
    if (g_written.count(path)) return path;
  }
  const auto split = ModelRegistry::split_front(scenario.fixture);
  ModelConfig config = scenario.config;
  config.set("tp_rank", std::int64_t{0}, "the distributed run");
  config.set("tp_size", std::int64_t{1}, "the distributed run");
  std::unique_ptr<LifecycleModel> model;
  if (split.first.empty()) {
    const ModelRegistry::Entry* entry = ModelRegistry::get().find(scenario.fixture);
    if (!entry) throw std::runtime_error(fmt::format("{}: unknown fixture '{}'", scenario.file, scenario.fixture));
    model = entry->factory(config);
  } else {
    const ModelFront* front = ModelRegistry::get().front(split.first);
    if (!front) throw std::runtime_error(fmt::format("no {} front is loaded", split.first));
    model = front->create(split.second, config);
  }
  if (!model) throw std::runtime_error("the factory returned no model");
  std::vector<NamedTensor> tensors = model->synthesize_checkpoint(seed);
  for (auto& t : tensors) {
    if (t.tensor.defined()) t.tensor = t.tensor.cpu();
  }
  std::filesystem::create_directories(dir);
  save_checkpoint(path, tensors, {{"graphcheck.fixture", scenario.fixture}, {"graphcheck.seed", std::to_string(seed)}},
                  safetensors::Durability::scratch);
  std::lock_guard<std::mutex> lock(g_written_mutex);
  g_written.insert(path);
  return path;
}

}  // namespace graphcheck
