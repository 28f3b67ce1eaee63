#pragma once
// The model contract: what a model author implements so graphcheck can drive its weight
// lifecycle. See DESIGN.md §2.1.
//
//   class MyModel : public graphcheck::LifecycleModel { ... };
//   GRAPHCHECK_REGISTER_MODEL("my_model", [](const graphcheck::ModelConfig& config) {
//     return std::make_unique<MyModel>(config);
//   });

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "graphcheck/catalog.h"
#include "graphcheck/config.h"
#include "graphcheck/hooks.h"
#include "graphcheck/mutation.h"

namespace graphcheck {

struct NamedTensor {
  std::string name;
  torch::Tensor tensor;
};

using TensorList = std::vector<torch::Tensor>;

// Tensor parallelism (DESIGN §2.9): how a tensor splits across the tensor-parallel ranks of a
// distributed scenario, as vLLM's parallel layers split theirs. `pattern` names checkpoint
// tensors (and live ones, for state a model derives), '*' one dotted component, "**" anything.
//   column      dim 0 in equal parts (ColumnParallelLinear: the output features)
//   row         dim 1 in equal parts (RowParallelLinear: the input features); a 1-D tensor (its
//               bias) is replicated
//   vocab       dim 0 in parts of ceil(rows / ranks), the last one shorter (VocabParallelEmbedding,
//               ParallelLMHead; a model that pads its shard maps the real rows in
//               checkpoint_mapping())
//   split_dim   `dim` in equal parts
//   replicated  every rank holds all of it, bit-identical after every load (checked across ranks)
// A tensor no entry names is replicated. The first matching entry wins.
struct TensorParallel {
  enum class Kind { replicated, column, row, vocab, split_dim };
  std::string pattern;
  Kind kind = Kind::replicated;
  std::int64_t dim = 0;  // split_dim only
};
[[nodiscard]] const char* to_string(TensorParallel::Kind kind);

// The part of a full tensor of `sizes` that tensor-parallel rank `rank` of `ranks` holds under
// `spec`: the whole tensor (sharded false) or [offset, offset + size) along dim. Throws
// ConfigError naming the tensor when the dim does not split in equal parts.
struct TensorShard {
  bool sharded = false;
  std::int64_t dim = 0, offset = 0, size = 0;
  // "rows 32..63", "columns 0..15", "dim 2 16..31": for messages.
  [[nodiscard]] std::string describe() const;
};
[[nodiscard]] TensorShard tensor_shard(const TensorParallel& spec, const std::string& name,
                                       c10::IntArrayRef sizes, int rank, int ranks);
// The entry of `specs` that names `name` (nullptr: replicated).
[[nodiscard]] const TensorParallel* find_tensor_parallel(const std::vector<TensorParallel>& specs,
                                                         const std::string& name);

// Checkpoint names vs live names (DESIGN §2.2). A checkpoint tensor stored in a region of a live
// tensor: rows [offset, offset + size) along `dim` of `live` hold checkpoint tensor `checkpoint`,
// as vLLM's stacked_params_mapping stores q_proj/k_proj/v_proj in one qkv_proj. Every live tensor
// no shard names is its own checkpoint tensor (identity).
//
// A fused-experts live tensor ([experts, rows, cols], as transformers' MoE `gate_up_proj`) holds
// one checkpoint tensor per expert: `index` >= 0 first selects expert `index` along dim 0, and
// dim/offset/size then address the region within it (`mlp.experts.3.up_proj.weight` is rows
// I..2I-1 of expert 3 of `mlp.experts.gate_up_proj`; a whole expert is dim 0, offset 0, all rows).
//
// A layout transform: a live region may hold its checkpoint tensor with the dims permuted (a
// kernel that wants `[in, out]` of a checkpoint's `[out, in]`). `permute` says how: the region
// equals checkpoint.permute(permute), so {1, 0} is a transpose (transposed_shard()). dim, offset
// and size stay in the live tensor's orientation; the census, synthesis, model B and every message
// speak the checkpoint's (CheckpointEntry::region is the region seen in checkpoint orientation).
// `size` kWhole takes all of `dim` (offset 0): a whole live tensor that is only transformed.
struct CheckpointShard {
  static constexpr std::int64_t kWhole = -1;
  std::string checkpoint;  // "layers.0.attn.q_proj.weight"
  std::string live;        // "layers.0.attn.qkv_proj.weight"
  std::int64_t dim = 0;
  std::int64_t offset = 0;
  std::int64_t size = 0;
  std::int64_t index = -1;  // >= 0: expert `index` along dim 0 first
  std::vector<std::int64_t> permute = {};  // empty: stored as in the checkpoint
};

// Checkpoint tensor `checkpoint` stored transposed in the whole of 2-D live tensor `live`.
[[nodiscard]] CheckpointShard transposed_shard(std::string checkpoint, std::string live);

// Consecutive shards of one live tensor along `dim`, in order: {{"q_proj.weight", 64},
// {"k_proj.weight", 16}, {"v_proj.weight", 16}} -> offsets 0, 64, 80.
[[nodiscard]] std::vector<CheckpointShard> stacked_shards(
    const std::string& live, std::int64_t dim,
    const std::vector<std::pair<std::string, std::int64_t>>& parts);

// One tensor of the checkpoint layout and where it lives in the model.
struct CheckpointEntry {
  std::string checkpoint;  // its name in checkpoints
  std::string live;        // the live tensor it is stored in
  // The live tensor, or the view of its shard, in the checkpoint's orientation (a view through
  // the inverse of `permute`): its shape is the checkpoint tensor's, its element [i, j] the one
  // the checkpoint's [i, j] is loaded into.
  torch::Tensor region;
  bool sharded = false;    // region is a shard of a larger live tensor
  std::int64_t dim = 0, offset = 0, size = 0;  // the shard, when sharded
  std::int64_t index = -1;  // the expert along dim 0 first, when >= 0 (CheckpointShard::index)
  std::vector<std::int64_t> permute;  // CheckpointShard::permute; empty: none
  // On a rollout rank of a distributed scenario (tp_rank >= 0): the part of the full checkpoint
  // tensor this region holds, by tensor_parallel(). Set by the engine, for messages.
  int tp_rank = -1;
  TensorShard tp = {};

  // The same region of another tensor of the live tensor's shape (model B's, say).
  [[nodiscard]] torch::Tensor region_of(const torch::Tensor& live_tensor) const;

  // "'layers.0.attn.q_proj.weight' (rows 0..63 of 'layers.0.attn.qkv_proj.weight')",
  // "'layers.0.proj.weight' (stored transposed in 'layers.0.proj.weight_t')".
  [[nodiscard]] std::string describe() const;
};

// A stream of (name, tensor) pairs, in the order a checkpoint or a refit bucket delivers them.
class WeightStream {
 public:
  virtual ~WeightStream() = default;
  // The next tensor, or std::nullopt once the stream is exhausted.
  virtual std::optional<NamedTensor> next() = 0;
  // Where the tensors come from, for error messages: "checkpoint 'ckpt/seed-1.safetensors'".
  [[nodiscard]] virtual std::string source() const = 0;
};

// The checkpoint and the model disagree (unknown name, shape or dtype mismatch, a tensor the
// model needs that the checkpoint lacks). A user error: the CLI exits 2.
class CheckpointMismatch : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Loads one checkpoint tensor into a live tensor (`param`), in place. The default copies.
using WeightLoader = std::function<void(torch::Tensor& param, const torch::Tensor& loaded)>;

// Per-tensor attributes, the C++ counterpart of the Python stacks' set_weight_attrs().
struct TensorAttrs {
  // Dummy load fills the tensor with this constant instead of random values.
  std::optional<double> dummy_weight_value;
  // false: a non-persistent buffer (libtorch buffers have no such flag): not in checkpoints,
  // never touched by loaders.
  bool persistent = true;
  // Replaces the default copy when a checkpoint tensor is loaded into this tensor.
  WeightLoader weight_loader;
};

// Attributes keyed by tensor identity (the TensorImpl), owned by one model. Rebinding a member to
// a new tensor drops its attributes, as in Python.
class TensorAttributes {
 public:
  void set(const torch::Tensor& tensor, TensorAttrs attrs);
  // nullptr when the tensor has no attributes.
  [[nodiscard]] const TensorAttrs* find(const torch::Tensor& tensor) const;
  // Drops the tensor's attributes (e.g. of a staging tensor once it is folded back; a loader
  // bound to a tensor would otherwise keep it alive).
  void erase(const torch::Tensor& tensor);

 private:
  struct Entry {
    c10::weak_intrusive_ptr<c10::TensorImpl> impl;  // keeps the key's address from being reused
    TensorAttrs attrs;
  };
  std::unordered_map<const c10::TensorImpl*, Entry> m_entries;
};

// A lifecycle hook the model promises to run (DESIGN §1.2). The hooks probe checks that it ran
// for every matching module, for every listed load, before the first forward and never inside it.
struct ExpectedHook {
  ExpectedHook(std::string module_pattern, std::string hook_name,
               std::vector<std::string> after_hooks = {},
               std::vector<std::string> loads = {"checkpoint", "dummy", "refit"})
      : module(std::move(module_pattern)),
        hook(std::move(hook_name)),
        on(std::move(loads)),
        after(std::move(after_hooks)) {}

  // Module path pattern: "layers.*.experts" ('*' one path component, "**" anything), "(root)"
  // for module() itself, "(model)" for the LifecycleModel object (a hook announced on either ran
  // on the model; wildcards match modules, never these two). On a refit that streams some
  // prefixes only, a module none of whose tensors lies under them need not run it.
  std::string module;
  std::string hook;
  // Loads it must run on: "checkpoint", "dummy" (initial load formats) and "refit".
  std::vector<std::string> on;
  // Hooks that must run before it within the same load (first and last calls ordered).
  std::vector<std::string> after;
};

class LifecycleModel {
 public:
  virtual ~LifecycleModel() = default;

  // Tensor discovery: the module tree whose parameters and buffers are the model's weights. A C++
  // model implements it; the engine reads it only through catalog().
  virtual torch::nn::Module& module();

  // Checkpoint path: consume a stream of (name, tensor) and return the names it loaded. Must load
  // in place (copy_) so that addresses baked into captured graphs stay valid. Most models call
  // load_module_weights(*this, weights).
  virtual std::set<std::string> load_weights(WeightStream& weights) = 0;

  // PWAL: called by the loader after every load format (checkpoint, dummy) and every refit.
  // Must be idempotent.
  virtual void process_weights_after_loading() = 0;

  // Refit: called by the loader once before the first tensor of every refit is streamed. A model
  // whose live tensors hold a post-processed (kernel) layout swaps in checkpoint-layout staging
  // tensors here, so that load_weights() can load them; its PWAL then folds the results back into
  // the live storage with copy_(), which captured graphs keep reading (DESIGN §1.4). An
  // unsupported configuration must throw here (ConfigError), never load into the kernel layout.
  // The default does nothing.
  virtual void stage_for_refit() {}

  // The forward that is captured. Must be graph-capturable: no host sync (item(), .cpu(), a
  // branch on a value read through data_ptr()), no allocation that outlives the call. A model
  // with one input and one output implements forward() and make_input(); a model with several
  // implements forward_all() and make_inputs() instead. The defaults bridge the two.
  virtual torch::Tensor forward(const torch::Tensor& input);
  virtual TensorList forward_all(const TensorList& inputs);

  // An input batch of `batch_size` rows, deterministic in `seed` (one tensor / every input).
  virtual torch::Tensor make_input(std::int64_t batch_size, std::uint64_t seed);
  virtual TensorList make_inputs(std::int64_t batch_size, std::uint64_t seed);

  // How checkpoint names map onto live tensors: the shards of fused live tensors (identity for
  // every tensor not named). The completeness check, partial refits, buckets, the write census,
  // the poison probe and model B all go through it. load_module_weights() loads shards into
  // their regions.
  virtual std::vector<CheckpointShard> checkpoint_mapping() { return {}; }

  // The dummy load format: fill every parameter and persistent buffer once, in place (one
  // in-place op per tensor: fill_, uniform_, or copy_ from a temporary), honouring
  // dummy_weight_value and never touching non-persistent buffers. The default is graphcheck's
  // loader (default_dummy_load()); a model that brings its own loader overrides it, and the
  // init_count probe checks it by the writes it observes (version counters and content).
  virtual void load_dummy_weights(std::uint64_t seed);

  // Tensors the forward reads that are not registered parameters or buffers (plain members),
  // with their dotted names ("layers.0.hc_attn_fn_broadcast").
  virtual std::vector<NamedTensor> extra_tensors() { return {}; }

  // A full checkpoint, deterministic in `seed`, in the checkpoint layout (checkpoint names, see
  // checkpoint_mapping()). The default draws every tensor of checkpoint_layout() from a seeded
  // uniform distribution with the spread of an initialiser (std 1/sqrt(last dim) for matrices,
  // 0.5 for vectors; integers: [0, 8); booleans: either), computed in float32 and converted to
  // the tensor's dtype. Called on a freshly constructed model.
  virtual std::vector<NamedTensor> synthesize_checkpoint(std::uint64_t seed);

  // The hooks this model promises to run (GRAPHCHECK_HOOK announces each call).
  [[nodiscard]] virtual std::vector<ExpectedHook> expected_hooks() const { return {}; }

  // Everything the engine knows of the model's tensors and modules. The default is a
  // ModuleCatalog over module(), extra_tensors() and tensor_attributes(); a front whose models
  // are not torch::nn::Modules (Python) overrides it instead of module(). (Last among the
  // virtuals, so that the vtable slots of the others are where they were before it.)
  virtual TensorCatalog& catalog();

  // How its tensors split across tensor-parallel ranks in a distributed scenario (TensorParallel),
  // for a model whose factory reads the config keys tp_rank and tp_size there. Model B of each
  // rank is loaded through it (the checkpoint's shard of every tensor, not the model's loader),
  // messages name each rank's shard, and tensors declared replicated are compared across ranks.
  // (After catalog(): the earlier vtable slots stay where they were.)
  [[nodiscard]] virtual std::vector<TensorParallel> tensor_parallel() { return {}; }

  [[nodiscard]] TensorAttributes& tensor_attributes() { return m_attributes; }
  [[nodiscard]] const TensorAttributes& tensor_attributes() const { return m_attributes; }

 private:
  // The default catalog, made on first use. A copy of a model makes its own.
  class CatalogSlot {
   public:
    CatalogSlot() = default;
    CatalogSlot(const CatalogSlot&) {}
    CatalogSlot& operator=(const CatalogSlot&) { return *this; }
    std::unique_ptr<TensorCatalog> catalog;
  };
  TensorAttributes m_attributes;
  CatalogSlot m_catalog;
};

// The default catalog of a C++ model: module()'s parameters and buffers (non-persistent where
// tensor_attributes() says persistent = false), then extra_tensors(); modules by their address.
class ModuleCatalog final : public TensorCatalog {
 public:
  explicit ModuleCatalog(LifecycleModel& model) : m_model(model) {}
  [[nodiscard]] std::vector<CatalogTensor> registered_tensors() override;
  [[nodiscard]] std::vector<CatalogTensor> extra_tensors() override;
  [[nodiscard]] std::vector<CatalogModule> modules() override;
  [[nodiscard]] std::vector<CatalogTensor> module_tensors(const CatalogModule& module,
                                                          bool recurse) override;
  [[nodiscard]] const TensorAttrs* attributes(const torch::Tensor& tensor) override;
  void to(const c10::Device& device) override;

 private:
  [[nodiscard]] std::vector<CatalogTensor> own_tensors(torch::nn::Module& module, bool recurse);
  LifecycleModel& m_model;
};

// The live tensors loads write: every parameter and persistent buffer, by dotted (live) name.
[[nodiscard]] std::vector<NamedTensor> checkpoint_tensors(LifecycleModel& model);

// The tensors a checkpoint must provide, by checkpoint name, each with the live region it fills:
// checkpoint_tensors() with every sharded live tensor replaced by its shards. Throws ConfigError
// for a mapping that names an unknown live tensor, a bad dim or a region out of range, or
// overlapping shards.
[[nodiscard]] std::vector<CheckpointEntry> checkpoint_layout(LifecycleModel& model);

// Every tensor the model owns or declares: parameters, buffers (persistent or not) and
// extra_tensors(), by dotted name.
[[nodiscard]] std::vector<NamedTensor> live_tensors(LifecycleModel& model);

// The default load_weights(): each streamed tensor is matched by checkpoint name to its live
// region (checkpoint_layout()) and loaded in place: the live tensor's weight_loader if it has one
// (called with the region), else copy_. Returns the live names loaded. Throws CheckpointMismatch
// naming the tensor on an unknown name or a shape or dtype mismatch.
std::set<std::string> load_module_weights(LifecycleModel& model, WeightStream& weights);

// graphcheck's dummy loader (the default load_dummy_weights()): walks the module tree and fills
// each module's own parameters and persistent buffers once (dummy_weight_value where declared,
// any dtype; else floats uniform in [-1e-3, 1e-3], integers in [0, 8)). Deterministic in `seed`.
// Returns the live names filled, in walk order.
std::vector<std::string> default_dummy_load(LifecycleModel& model, std::uint64_t seed);

// ---- registry -----------------------------------------------------------------------------

using ModelFactory = std::function<std::unique_ptr<LifecycleModel>(const ModelConfig&)>;

// A front that makes models from a spec rather than a registered name: scenario files say
// `model: {python: "pkg.module:factory"}`, and the scenario's fixture is "python:pkg.module:factory".
// The Python extension installs the "python" front; a process without it refuses such scenarios.
struct ModelFront {
  // Makes a spec ready before its scenario is validated (imports the module, which registers its
  // mutations). Returns "" or what went wrong, with the fix.
  std::function<std::string(const std::string& spec)> prepare;
  // A model of the spec with the scenario's config (model code: failures are model failures).
  std::function<std::unique_ptr<LifecycleModel>(const std::string& spec, const ModelConfig& config)> create;
};

class ModelRegistry {
 public:
  struct Entry {
    std::string name;
    ModelFactory factory;
  };
  static ModelRegistry& get();
  // Returns true so that it can initialise a static; a duplicate name aborts with a message
  // (while a plugin loads, load_plugin() reports it instead).
  bool add(std::string name, ModelFactory factory);
  // A one-line description for `graphcheck list` (GRAPHCHECK_DESCRIBE_MODEL).
  bool describe(const std::string& name, std::string description);
  [[nodiscard]] std::string description(const std::string& name) const;
  [[nodiscard]] const Entry* find(const std::string& name) const;
  [[nodiscard]] std::vector<std::string> names() const;

  // Fronts by kind ("python"). A fixture name "KIND:SPEC" is made by front KIND from SPEC.
  void set_front(const std::string& kind, ModelFront front);
  [[nodiscard]] const ModelFront* front(const std::string& kind) const;
  // Splits "python:pkg.mod:factory" into {"python", "pkg.mod:factory"}; {"", name} for a
  // registered name.
  [[nodiscard]] static std::pair<std::string, std::string> split_front(const std::string& fixture);

 private:
  std::map<std::string, std::unique_ptr<Entry>> m_entries;
  std::map<std::string, ModelFront> m_fronts;
  std::map<std::string, std::string> m_descriptions;
};

}  // namespace graphcheck

#define GRAPHCHECK_MODEL_CONCAT_(a, b) a##b
#define GRAPHCHECK_MODEL_CONCAT(a, b) GRAPHCHECK_MODEL_CONCAT_(a, b)
// Registers a model factory under a name scenario files use (`model: {fixture: NAME}`).
#define GRAPHCHECK_REGISTER_MODEL(name, factory)                                      \
  static const bool GRAPHCHECK_MODEL_CONCAT(graphcheck_model_registered_, __COUNTER__) = \
      ::graphcheck::ModelRegistry::get().add(name, factory)
// Its one-line description for `graphcheck list`: GRAPHCHECK_DESCRIBE_MODEL("my_model", "...").
#define GRAPHCHECK_DESCRIBE_MODEL(name, description)                                   \
  static const bool GRAPHCHECK_MODEL_CONCAT(graphcheck_model_described_, __COUNTER__) = \
      ::graphcheck::ModelRegistry::get().describe(name, description)
