#include "support/registry.h"
#include "graphcheck/model.h"
#include "glob.h"
#include "graphcheck/plugin.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/nn/module.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "dummy_loader.h"
#include "support/release_memory.h"
#include "synthetic_fill.h"
#include "synthesis_slabs.h"
#include "tensor_format.h"

namespace graphcheck {

// ---- TensorAttributes -----------------------------------------------------------------------

void TensorAttributes::set(const torch::Tensor& tensor, TensorAttrs attrs) {
  TORCH_CHECK(tensor.defined(), "graphcheck: tensor attributes need a defined tensor");
  c10::TensorImpl* impl = tensor.unsafeGetTensorImpl();
  m_entries.insert_or_assign(
      impl, Entry{c10::weak_intrusive_ptr<c10::TensorImpl>(tensor.getIntrusivePtr()),
                  std::move(attrs)});
}

const TensorAttrs* TensorAttributes::find(const torch::Tensor& tensor) const {
  if (!tensor.defined()) return nullptr;
  auto it = m_entries.find(tensor.unsafeGetTensorImpl());
  if (it == m_entries.end() || it->second.impl.expired()) return nullptr;
  return &it->second.attrs;
}

void TensorAttributes::erase(const torch::Tensor& tensor) {
  if (tensor.defined()) m_entries.erase(tensor.unsafeGetTensorImpl());
}

// ---- tensor discovery -----------------------------------------------------------------------

std::string_view to_string(TensorKind kind) {
  switch (kind) {
    case TensorKind::parameter: return "parameter";
    case TensorKind::persistent_buffer: return "persistent buffer";
    case TensorKind::non_persistent_buffer: return "non-persistent buffer";
    case TensorKind::extra: return "extra tensor";
  }
  return "tensor";
}

namespace {

// Float32 draws converted a chunk at a time (synthesize_checkpoint): 128 KiB, in L2. Even, so that
// every chunk but the last starts a draw.
constexpr std::int64_t kSynthesisChunk = std::int64_t{1} << 15;

std::string join_path(const std::string& prefix, const std::string& key) {
  if (prefix.empty()) return key;
  std::string name;
  name.reserve(prefix.size() + 1 + key.size());
  name.append(prefix).append(1, '.').append(key);
  return name;
}

// `root` and its submodules in libtorch's preorder (named_modules()), each with its parent's
// position and its rank among its siblings. Keys and paths are looked up only for the modules that
// hold tensors (and their ancestors, whose paths theirs extend): building every module's path
// would cost the square of the depth in characters, and named_children() copies a module's
// children, keys and all, into a fresh OrderedDict, on every snapshot (bench/harness_bench
// BM_AddressSnapshot, 100 tensors spread over the top of 512 nested modules: 2.8 -> 1.1 us a
// tensor for the paths).
struct ModuleNode {
  torch::nn::Module* module = nullptr;
  std::size_t parent = 0;  // the root's is itself
  std::size_t rank = 0;    // its position in its parent's children()
};

void walk_modules(torch::nn::Module& module, std::size_t parent, std::size_t rank, std::vector<ModuleNode>& out) {
  const std::size_t self = out.size();
  out.push_back({&module, out.empty() ? 0 : parent, rank});
  std::size_t child_rank = 0;
  // children() in named_children()'s order, without the keys.
  for (const auto& child : module.children()) walk_modules(*child, self, child_rank++, out);
}

// The dotted paths of a walk's modules, each built once from its parent's when first asked for;
// a parent's keys fetched once, when the first of its children needs one.
class ModulePaths {
 public:
  explicit ModulePaths(const std::vector<ModuleNode>& nodes) : m_nodes(nodes), m_paths(nodes.size()) {
    if (!m_paths.empty()) m_paths[0] = std::string();
  }
  const std::string& operator()(std::size_t index) {
    if (m_paths[index]) return *m_paths[index];
    // The nearest ancestor with a path, then down from it (no recursion: trees can be deep).
    std::vector<std::size_t> chain;
    std::size_t i = index;
    for (; !m_paths[i]; i = m_nodes[i].parent) chain.push_back(i);
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      m_paths[*it] = join_path(*m_paths[m_nodes[*it].parent], key(*it));
    }
    return *m_paths[index];
  }

 private:
  const std::string& key(std::size_t index) {
    const ModuleNode& node = m_nodes[index];
    auto it = m_keys.find(node.parent);
    if (it == m_keys.end()) it = m_keys.emplace(node.parent, m_nodes[node.parent].module->named_children()).first;
    return it->second[node.rank].key();
  }
  const std::vector<ModuleNode>& m_nodes;
  std::vector<std::optional<std::string>> m_paths;
  std::unordered_map<std::size_t, torch::OrderedDict<std::string, std::shared_ptr<torch::nn::Module>>> m_keys;
};

// A module's own parameters as it holds them. parameters_ is protected: read through a pointer to
// member formed in a derived class (legal for a protected member of a base), which spares the walk
// named_parameters(false)'s copy of them, an OrderedDict whose every name is copied and hashed
// (bench/harness_bench BM_AddressSnapshot: 100,000 tensors under 8 modules).
struct ParameterAccess : torch::nn::Module {
  static const torch::OrderedDict<std::string, torch::Tensor>& of(const torch::nn::Module& m) {
    return m.*(&ParameterAccess::parameters_);
  }
};

}  // namespace

// The order of named_parameters(recurse) then named_buffers(recurse): every module's parameters,
// module by module, then every module's buffers; undefined ones left out.
std::vector<CatalogTensor> ModuleCatalog::own_tensors(torch::nn::Module& module, bool recurse) {
  std::vector<ModuleNode> modules;
  if (recurse) {
    walk_modules(module, 0, 0, modules);
  } else {
    modules.push_back({&module, 0, 0});
  }
  ModulePaths prefix(modules);
  std::vector<CatalogTensor> out;
  std::size_t parameters = 0;  // reserved up front: growing by doubling moved each entry once more
  for (const ModuleNode& node : modules) parameters += ParameterAccess::of(*node.module).size();
  out.reserve(parameters);
  const TensorAttributes& attrs = m_model.tensor_attributes();
  for (std::size_t i = 0; i < modules.size(); ++i) {
    for (const auto& item : ParameterAccess::of(*modules[i].module)) {
      if (item.value().defined()) out.push_back({join_path(prefix(i), item.key()), item.value(), TensorKind::parameter});
    }
  }
  for (std::size_t i = 0; i < modules.size(); ++i) {
    auto own = modules[i].module->named_buffers(/*recurse=*/false);
    for (auto& item : own) {
      if (!item.value().defined()) continue;
      const TensorAttrs* a = attrs.find(item.value());
      out.push_back({join_path(prefix(i), item.key()), std::move(item.value()),
                     a && !a->persistent ? TensorKind::non_persistent_buffer : TensorKind::persistent_buffer});
    }
  }
  return out;
}

std::vector<CatalogTensor> ModuleCatalog::registered_tensors() {
  return own_tensors(m_model.module(), /*recurse=*/true);
}

std::vector<CatalogTensor> ModuleCatalog::extra_tensors() {
  std::vector<CatalogTensor> out;
  for (auto& extra : m_model.extra_tensors()) {
    out.push_back({std::move(extra.name), std::move(extra.tensor), TensorKind::extra});
  }
  return out;
}

std::vector<CatalogModule> ModuleCatalog::modules() {
  torch::nn::Module& root = m_model.module();
  std::vector<CatalogModule> out = {{"", detail::object_address(&root), &root}};
  // include_self=false: the root module need not live in a shared_ptr.
  for (const auto& item : root.named_modules("", /*include_self=*/false)) {
    out.push_back({item.key(), detail::object_address(item.value().get()), item.value().get()});
  }
  return out;
}

std::vector<CatalogTensor> ModuleCatalog::module_tensors(const CatalogModule& module, bool recurse) {
  auto* m = static_cast<torch::nn::Module*>(const_cast<void*>(module.handle));
  TORCH_CHECK(m != nullptr, "graphcheck: module_tensors() of a module this catalog did not list");
  return own_tensors(*m, recurse);
}

const TensorAttrs* ModuleCatalog::attributes(const torch::Tensor& tensor) {
  return m_model.tensor_attributes().find(tensor);
}

void ModuleCatalog::to(const c10::Device& device) { m_model.module().to(device); }

torch::nn::Module& LifecycleModel::module() {
  throw std::logic_error(
      "the model implements neither module() nor catalog(): a C++ model returns its module tree "
      "from module()");
}

TensorCatalog& LifecycleModel::catalog() {
  if (!m_catalog.catalog) m_catalog.catalog = std::make_unique<ModuleCatalog>(*this);
  return *m_catalog.catalog;
}

std::vector<NamedTensor> checkpoint_tensors(LifecycleModel& model) {
  std::vector<NamedTensor> out;
  for (auto& t : model.catalog().registered_tensors()) {
    if (is_checkpoint_kind(t.kind)) out.push_back({std::move(t.name), std::move(t.tensor)});
  }
  return out;
}

std::vector<NamedTensor> live_tensors(LifecycleModel& model) {
  std::vector<CatalogTensor> tensors = model.catalog().tensors();
  std::vector<NamedTensor> out;
  out.reserve(tensors.size());
  for (auto& t : tensors) out.push_back({std::move(t.name), std::move(t.tensor)});
  return out;
}

// ---- the model contract's defaults ---------------------------------------------------------

torch::Tensor LifecycleModel::forward(const torch::Tensor&) {
  throw std::logic_error(
      "the model implements neither forward() nor forward_all(): implement forward() (one input, "
      "one output) or forward_all() (several)");
}

TensorList LifecycleModel::forward_all(const TensorList& inputs) {
  if (inputs.size() != 1) {
    throw std::logic_error(fmt::format(
        "the model's make_inputs() gives {} inputs but it implements only the single-tensor "
        "forward(): implement forward_all() too",
        inputs.size()));
  }
  return {forward(inputs.front())};
}

torch::Tensor LifecycleModel::make_input(std::int64_t, std::uint64_t) {
  throw std::logic_error(
      "the model implements neither make_input() nor make_inputs(): implement the one that "
      "matches its forward");
}

TensorList LifecycleModel::make_inputs(std::int64_t batch_size, std::uint64_t seed) {
  return {make_input(batch_size, seed)};
}

void LifecycleModel::load_dummy_weights(std::uint64_t seed) { default_dummy_load(*this, seed); }

// ---- checkpoint names vs live names ---------------------------------------------------------

std::vector<CheckpointShard> stacked_shards(
    const std::string& live, std::int64_t dim,
    const std::vector<std::pair<std::string, std::int64_t>>& parts) {
  std::vector<CheckpointShard> out;
  std::int64_t offset = 0;
  for (const auto& [name, size] : parts) {
    out.push_back({name, live, dim, offset, size});
    offset += size;
  }
  return out;
}

const char* to_string(TensorParallel::Kind kind) {
  switch (kind) {
    case TensorParallel::Kind::replicated: return "replicated";
    case TensorParallel::Kind::column: return "column";
    case TensorParallel::Kind::row: return "row";
    case TensorParallel::Kind::vocab: return "vocab";
    case TensorParallel::Kind::split_dim: return "split_dim";
  }
  return "unknown";
}

std::string TensorShard::describe() const {
  if (!sharded) return "all";
  const std::string what = dim == 0 ? "rows" : dim == 1 ? "columns" : fmt::format("dim {}", dim);
  return fmt::format("{} {}..{}", what, offset, offset + size - 1);
}

const TensorParallel* find_tensor_parallel(const std::vector<TensorParallel>& specs, const std::string& name) {
  for (const auto& spec : specs) {
    if (path_matches(spec.pattern, name)) return &spec;
  }
  return nullptr;
}

TensorShard tensor_shard(const TensorParallel& spec, const std::string& name, c10::IntArrayRef sizes, int rank,
                         int ranks) {
  TensorShard shard;
  if (ranks <= 1 || spec.kind == TensorParallel::Kind::replicated) return shard;
  std::int64_t dim = 0;
  switch (spec.kind) {
    case TensorParallel::Kind::column:
    case TensorParallel::Kind::vocab: dim = 0; break;
    case TensorParallel::Kind::row:
      if (sizes.size() < 2) return shard;  // a row-parallel layer's bias is replicated
      dim = 1;
      break;
    case TensorParallel::Kind::split_dim: dim = spec.dim; break;
    case TensorParallel::Kind::replicated: return shard;
  }
  if (dim < 0 || dim >= static_cast<std::int64_t>(sizes.size())) {
    throw ConfigError(fmt::format("tensor_parallel(): '{}' ({} {}) splits dim {}, which its shape [{}] does not "
                                  "have: fix the entry",
                                  name, to_string(spec.kind), spec.pattern, dim, fmt::join(sizes, ", ")));
  }
  const std::int64_t extent = sizes[static_cast<std::size_t>(dim)];
  std::int64_t per = 0;
  if (spec.kind == TensorParallel::Kind::vocab) {
    per = (extent + ranks - 1) / ranks;
  } else {
    if (extent % ranks != 0) {
      throw ConfigError(fmt::format("tensor_parallel(): '{}' is {} along dim {} ({} of [{}]), which does not split "
                                    "into {} equal parts: change the config or the entry ({})",
                                    name, extent, dim, to_string(spec.kind), fmt::join(sizes, ", "), ranks,
                                    spec.pattern));
    }
    per = extent / ranks;
  }
  shard.sharded = true;
  shard.dim = dim;
  shard.offset = std::min(extent, per * rank);
  shard.size = std::max<std::int64_t>(0, std::min(extent, per * (rank + 1)) - shard.offset);
  return shard;
}

CheckpointShard transposed_shard(std::string checkpoint, std::string live) {
  CheckpointShard s;
  s.checkpoint = std::move(checkpoint);
  s.live = std::move(live);
  s.size = CheckpointShard::kWhole;
  s.permute = {1, 0};
  return s;
}

namespace {

// "transposed", or "with dims permuted (2, 0, 1)": how the live region holds the checkpoint's.
std::string transform_text(const std::vector<std::int64_t>& permute) {
  if (permute == std::vector<std::int64_t>{1, 0}) return "transposed";
  return fmt::format("with dims permuted ({})", fmt::join(permute, ", "));
}

std::vector<std::int64_t> inverse_permutation(const std::vector<std::int64_t>& permute) {
  std::vector<std::int64_t> inverse(permute.size());
  for (std::size_t i = 0; i < permute.size(); ++i) inverse[static_cast<std::size_t>(permute[i])] = static_cast<std::int64_t>(i);
  return inverse;
}

}  // namespace

std::string CheckpointEntry::describe() const {
  // A rollout rank's part of the full tensor: "tensor-parallel rank 1's columns 32..63".
  const std::string part = tp_rank >= 0 && tp.sharded ? fmt::format("tensor-parallel rank {}'s {} of it", tp_rank, tp.describe())
                                                      : std::string();
  if (!part.empty()) {
    CheckpointEntry plain = *this;
    plain.tp_rank = -1;
    const std::string text = plain.describe();
    return text.back() == ')' ? fmt::format("{}; {})", text.substr(0, text.size() - 1), part)
                              : fmt::format("{} ({})", text, part);
  }
  if (!sharded && permute.empty() && live == checkpoint) return fmt::format("'{}'", checkpoint);
  if (!sharded) {
    return fmt::format("'{}' (stored {}in '{}')", checkpoint,
                       permute.empty() ? std::string() : transform_text(permute) + " ", live);
  }
  const std::string expert = index >= 0 ? fmt::format(" of expert {}", index) : std::string();
  const std::string transform = permute.empty() ? std::string() : fmt::format(", stored {}", transform_text(permute));
  return fmt::format("'{}' ({} {}..{} along dim {}{} of '{}'{})", checkpoint, dim == 0 ? "rows" : "slices", offset,
                     offset + size - 1, dim, expert, live, transform);
}

torch::Tensor CheckpointEntry::region_of(const torch::Tensor& live_tensor) const {
  torch::Tensor region = live_tensor;
  if (sharded) {
    const torch::Tensor within = index >= 0 ? live_tensor.select(0, index) : live_tensor;
    region = within.narrow(dim, offset, size);
  }
  return permute.empty() ? region : region.permute(inverse_permutation(permute));
}

namespace {

// checkpoint_layout() of the model's checkpoint tensors, `tensors` (checkpoint_tensors()).
std::vector<CheckpointEntry> layout_of(LifecycleModel& model, std::vector<NamedTensor> tensors) {
  const std::vector<CheckpointShard> shards = model.checkpoint_mapping();
  std::vector<CheckpointEntry> out;
  out.reserve(tensors.size());
  if (shards.empty()) {
    // Every checkpoint tensor is a live one under its own name: nothing to look up per tensor
    // (the sets below cost a 10,000-tensor model more than the rest of the layout; issue 26).
    for (auto& t : tensors) {
      CheckpointEntry& e = out.emplace_back();
      e.checkpoint = t.name;
      e.live = std::move(t.name);
      e.region = std::move(t.tensor);
    }
    return out;
  }
  std::map<std::string, std::vector<const CheckpointShard*>> by_live;
  for (const auto& shard : shards) by_live[shard.live].push_back(&shard);

  std::set<std::string> seen_live;
  // Note [A live tensor under a checkpoint name]: a tensor the model registers under a name its
  // mapping gives to a shard of another (a staging parameter in the checkpoint's layout, made by
  // stage_for_refit() for a loader to write and PWAL to fold into the kernel's tensor) is where
  // that checkpoint tensor loads while it exists: the shard is left out of the layout then, and
  // the poison, the census and the synthesis see the staging tensor, not the kernel's.
  std::set<std::string> live_names;
  for (const auto& t : tensors) live_names.insert(t.name);
  for (auto& t : tensors) {
    seen_live.insert(t.name);
    auto it = by_live.find(t.name);
    if (it == by_live.end()) {
      CheckpointEntry e;
      e.checkpoint = t.name;
      e.live = t.name;
      e.region = t.tensor;
      out.push_back(std::move(e));
      continue;
    }
    // The ranges taken so far, per expert (-1: the whole tensor).
    std::map<std::int64_t, std::vector<std::pair<std::int64_t, std::int64_t>>> taken;
    for (const CheckpointShard* given : it->second) {
      if (given->checkpoint != t.name && live_names.count(given->checkpoint)) continue;  // Note above
      CheckpointShard whole;  // kWhole resolved against the live tensor
      const CheckpointShard* shard = given;
      if (given->size == CheckpointShard::kWhole) {
        whole = *given;
        const torch::Tensor live = whole.index >= 0 && t.tensor.dim() >= 2 ? t.tensor.select(0, whole.index) : t.tensor;
        if (whole.offset != 0 || whole.dim < 0 || whole.dim >= std::max<std::int64_t>(live.dim(), 1)) {
          throw ConfigError(fmt::format(
              "checkpoint_mapping(): shard '{}' of '{}' takes all of dim {} (size kWhole) from offset {}: a "
              "whole-dim shard starts at offset 0 of a dim the live tensor {} has; fix the mapping",
              given->checkpoint, given->live, whole.dim, whole.offset, shape_string(live.sizes())));
        }
        whole.size = live.dim() == 0 ? 1 : live.size(whole.dim);
        shard = &whole;
      }
      if (shard->index >= 0 && (t.tensor.dim() < 2 || shard->index >= t.tensor.size(0))) {
        throw ConfigError(fmt::format(
            "checkpoint_mapping(): shard '{}' names expert {} of '{}', whose shape {} has no such "
            "expert along dim 0: fix the index",
            shard->checkpoint, shard->index, shard->live, shape_string(t.tensor.sizes())));
      }
      // Within the expert it selects, if it selects one.
      const torch::Tensor live = shard->index >= 0 ? t.tensor.select(0, shard->index) : t.tensor;
      if (shard->dim < 0 || shard->dim >= live.dim() || shard->offset < 0 || shard->size <= 0 ||
          shard->offset + shard->size > live.size(shard->dim)) {
        throw ConfigError(fmt::format(
            "checkpoint_mapping(): shard '{}' of '{}' is {} elements from {} along dim {}, "
            "outside the live tensor's shape {}: fix the mapping",
            shard->checkpoint, shard->live, shard->size, shard->offset, shard->dim,
            shape_string(live.sizes())));
      }
      // Offsets of whole-tensor shards and of expert shards count along different dims.
      if (!taken.empty() && (taken.count(-1) > 0) != (shard->index == -1)) {
        throw ConfigError(fmt::format(
            "checkpoint_mapping(): shard '{}' of '{}' mixes shards of whole experts' rows with "
            "shards of the whole tensor: give every shard of it an expert index, or none",
            shard->checkpoint, shard->live));
      }
      for (const auto& [index, ranges] : taken) {
        if (index != shard->index) continue;  // experts meet only their own
        for (const auto& [b, e] : ranges) {
          if (shard->offset >= e || b >= shard->offset + shard->size) continue;
          throw ConfigError(fmt::format(
              "checkpoint_mapping(): shard '{}' overlaps another shard of '{}': fix the offsets",
              shard->checkpoint, shard->live));
        }
      }
      taken[shard->index].emplace_back(shard->offset, shard->offset + shard->size);
      if (!shard->permute.empty()) {
        std::vector<bool> seen(static_cast<std::size_t>(live.dim()), false);
        bool valid = static_cast<std::int64_t>(shard->permute.size()) == live.dim();
        for (const std::int64_t d : shard->permute) {
          valid = valid && d >= 0 && d < live.dim() && !seen[static_cast<std::size_t>(d)];
          if (valid) seen[static_cast<std::size_t>(d)] = true;
        }
        if (!valid) {
          throw ConfigError(fmt::format(
              "checkpoint_mapping(): shard '{}' of '{}' permutes dims ({}), which is no permutation of the {} "
              "dims of its live region {}: list each dim once ({{1, 0}} transposes a matrix)",
              shard->checkpoint, shard->live, fmt::join(shard->permute, ", "), live.dim(),
              shape_string(live.sizes())));
        }
      }
      CheckpointEntry e;
      e.checkpoint = shard->checkpoint;
      e.live = shard->live;
      // A whole live tensor (size kWhole, no expert) is no shard of it: only its name or
      // orientation differs.
      e.sharded = given->size != CheckpointShard::kWhole || shard->index >= 0;
      e.dim = shard->dim;
      e.offset = shard->offset;
      e.size = shard->size;
      e.index = shard->index;
      e.permute = shard->permute;
      e.region = e.region_of(t.tensor);
      out.push_back(std::move(e));
    }
  }
  for (const auto& [live, list] : by_live) {
    if (seen_live.count(live)) continue;
    throw ConfigError(fmt::format(
        "checkpoint_mapping(): shard '{}' names live tensor '{}', which is no parameter or "
        "persistent buffer of the model: fix the live name",
        list.front()->checkpoint, live));
  }
  return out;
}

}  // namespace

std::vector<CheckpointEntry> checkpoint_layout(LifecycleModel& model) {
  return layout_of(model, checkpoint_tensors(model));
}

std::set<std::string> load_module_weights(LifecycleModel& model, WeightStream& weights) {
  // One walk of the module tree for the layout, the live tensors and the non-persistent buffers,
  // hashed by name (three walks and three ordered maps were 6.7 us a tensor of every load on
  // 10,000 tensors: harness_bench BM_ModuleLoad; issue 26).
  std::vector<NamedTensor> tensors;
  std::unordered_set<std::string> non_persistent;
  for (auto& t : model.catalog().registered_tensors()) {
    if (is_checkpoint_kind(t.kind)) {
      tensors.push_back({std::move(t.name), std::move(t.tensor)});
    } else if (t.kind == TensorKind::non_persistent_buffer) {
      non_persistent.insert(std::move(t.name));
    }
  }
  std::unordered_map<std::string_view, const torch::Tensor*> live_by_name;
  live_by_name.reserve(tensors.size());
  for (const auto& t : tensors) live_by_name.emplace(t.name, &t.tensor);
  const std::vector<CheckpointEntry> layout = layout_of(model, tensors);
  std::unordered_map<std::string_view, const CheckpointEntry*> targets;
  targets.reserve(layout.size());
  for (const auto& e : layout) targets.emplace(e.checkpoint, &e);

  torch::NoGradGuard no_grad;
  std::set<std::string> loaded;
  while (auto item = weights.next()) {
    auto it = targets.find(item->name);
    if (it == targets.end()) {
      if (non_persistent.count(item->name)) {
        throw CheckpointMismatch(fmt::format(
            "{}: tensor '{}' is a non-persistent buffer of the model; checkpoints must not carry "
            "it: drop it from the checkpoint",
            weights.source(), item->name));
      }
      if (live_by_name.count(item->name)) {
        throw CheckpointMismatch(fmt::format(
            "{}: tensor '{}' is a fused live tensor whose checkpoint holds its shards separately "
            "(checkpoint_mapping()): write the shards under their checkpoint names",
            weights.source(), item->name));
      }
      const auto first = std::min_element(layout.begin(), layout.end(), [](const auto& a, const auto& b) {
        return a.checkpoint < b.checkpoint;
      });
      throw CheckpointMismatch(fmt::format(
          "{}: tensor '{}' matches no tensor of the model's checkpoint layout: check the name "
          "(checkpoint tensors look like '{}')",
          weights.source(), item->name, first == layout.end() ? "" : first->checkpoint));
    }
    const CheckpointEntry& target = *it->second;
    torch::Tensor param = target.region;
    const torch::Tensor& value = item->tensor;
    const TensorAttrs* attrs = model.catalog().attributes(*live_by_name.at(target.live));
    if (attrs && attrs->weight_loader) {
      attrs->weight_loader(param, value);
    } else {
      if (param.sizes() != value.sizes()) {
        throw CheckpointMismatch(fmt::format(
            "{}: tensor '{}' has shape {} in the checkpoint but {} in the model{}: regenerate the "
            "checkpoint for this model config",
            weights.source(), item->name, shape_string(value.sizes()), shape_string(param.sizes()),
            target.sharded ? fmt::format(" ({})", target.describe()) : std::string()));
      }
      if (param.scalar_type() != value.scalar_type()) {
        throw CheckpointMismatch(fmt::format(
            "{}: tensor '{}' has dtype {} in the checkpoint but {} in the model: convert the "
            "checkpoint or give the tensor a weight_loader that converts",
            weights.source(), item->name, c10::toString(value.scalar_type()),
            c10::toString(param.scalar_type())));
      }
      param.copy_(value);
    }
    loaded.insert(target.live);
  }
  return loaded;
}

namespace {
thread_local SynthesisSlabs* t_synthesis_slabs = nullptr;
}  // namespace

SynthesisSlabs::SynthesisSlabs() : m_outer(t_synthesis_slabs) { t_synthesis_slabs = this; }
SynthesisSlabs::~SynthesisSlabs() { t_synthesis_slabs = m_outer; }

std::vector<NamedTensor> LifecycleModel::synthesize_checkpoint(std::uint64_t seed) {
  // Counter-based fills (synthetic_fill.h) instead of torch's generators: randn, a scaling pass
  // and a conversion were a large part of the harness's own cost on a large model (issue 13).
  std::vector<NamedTensor> out;
  std::uint64_t index = 0;
  torch::Tensor scratch;  // float32 draws for the 16-bit and 64-bit tensors, a chunk at a time
  const std::vector<CheckpointEntry> layout = checkpoint_layout(*this);
  const auto drawn = [](torch::ScalarType dtype) {  // floating: drawn into the slab below
    return dtype != torch::kBool && !c10::isIntegralType(dtype, /*includeBool=*/false);
  };
  // Note [One slab per synthesis]: the floating tensors are views of one allocation, which the
  // kernel may back with huge pages. A tensor of its own each faulted its pages in one by one:
  // on the synthetic model of 10,000 tensors and 512 MiB those faults were a third of each
  // synthesis (perf; issue 26). Aligned as the CPU allocator aligns each tensor. Within a
  // SynthesisSlabs scope the slab is kept for the next synthesis, which takes it once nothing
  // else holds it: fresh memory is zeroed by the kernel as it is faulted in, a quarter of a
  // synthesis again.
  constexpr std::int64_t kAlign = 64;
  constexpr std::int64_t kHugeSlab = std::int64_t{64} << 20;  // past glibc's largest mmap threshold
  std::int64_t slab_bytes = 0;
  for (const auto& e : layout) {
    if (!drawn(e.region.scalar_type())) continue;
    slab_bytes += (e.region.numel() * static_cast<std::int64_t>(e.region.element_size()) + kAlign - 1) / kAlign * kAlign;
  }
  torch::Tensor slab;
  SynthesisSlabs* kept = t_synthesis_slabs;
  if (kept) kept->default_ran = true;
  if (kept && kept->slab.defined() && kept->slab.numel() >= slab_bytes && kept->slab.storage().use_count() == 1) {
    slab = kept->slab;  // every byte a tensor holds is drawn anew
  } else {
    slab = torch::empty({slab_bytes}, torch::TensorOptions().dtype(torch::kUInt8));
    // Only a block the allocator maps on its own: advice on a heap region outlives the block.
    if (slab_bytes >= kHugeSlab) support::advise_huge_pages(slab.data_ptr(), static_cast<std::size_t>(slab_bytes));
    if (kept) kept->slab = slab;
  }
  std::int64_t slab_at = 0;
  for (const auto& e : layout) {
    const torch::Tensor& t = e.region;
    const auto dtype = t.scalar_type();
    const std::uint64_t key = synth::stream_key(seed, index++);
    torch::Tensor value;
    if (!drawn(dtype)) {
      torch::Tensor bytes = torch::empty(t.sizes(), torch::TensorOptions().dtype(torch::kUInt8));
      synth::fill_masked_bytes(bytes.data_ptr<std::uint8_t>(), static_cast<std::size_t>(bytes.numel()), key,
                               dtype == torch::kBool ? 1 : 7);
      value = bytes.to(dtype);
    } else {
      // Scaled like an initialiser (std 1/sqrt(fan-in)) so that deep stacks stay finite; a
      // uniform draw of half-width sqrt(3) * std has that std.
      const double std = t.dim() >= 2 ? 1.0 / std::sqrt(static_cast<double>(t.size(-1))) : 0.5;
      const auto half_width = static_cast<float>(std::sqrt(3.0) * std);
      const std::int64_t bytes = t.numel() * static_cast<std::int64_t>(t.element_size());
      value = slab.narrow(0, slab_at, bytes).view(dtype).view(t.sizes());
      slab_at += (bytes + kAlign - 1) / kAlign * kAlign;
      if (dtype == torch::kFloat32) {
        synth::fill_uniform(value.data_ptr<float>(), static_cast<std::size_t>(value.numel()), key, half_width);
      } else {
        // Drawn in float32 a chunk at a time into a buffer that stays in cache, each chunk
        // converted into the tensor (the values a whole float32 draw and .to(dtype) give): no
        // float32 copy of the tensor's size to allocate, fault in and read back (issue 26).
        const torch::Tensor flat = value.view({-1});
        const std::int64_t n = flat.numel();
        const std::int64_t chunk = std::min<std::int64_t>(n, kSynthesisChunk);
        if (!scratch.defined() || scratch.numel() < chunk) {
          scratch = torch::empty({std::max<std::int64_t>(chunk, 1)}, torch::TensorOptions().dtype(torch::kFloat32));
        }
        for (std::int64_t at = 0; at < n; at += chunk) {
          const std::int64_t len = std::min(chunk, n - at);
          synth::fill_uniform(scratch.data_ptr<float>(), static_cast<std::size_t>(len), key, half_width,
                              static_cast<std::size_t>(at));
          flat.narrow(0, at, len).copy_(scratch.narrow(0, 0, len));
        }
      }
    }
    out.push_back({e.checkpoint, value.contiguous()});
  }
  return out;
}

// ---- registry -------------------------------------------------------------------------------

ModelRegistry& ModelRegistry::get() {
  static ModelRegistry registry;
  return registry;
}

bool ModelRegistry::add(std::string name, ModelFactory factory) {
  auto entry = std::make_unique<Entry>(Entry{name, std::move(factory)});
  return detail::add_once(m_entries, "model", std::move(name), std::move(entry));
}

bool ModelRegistry::describe(const std::string& name, std::string description) {
  m_descriptions[name] = std::move(description);
  return true;
}

std::string ModelRegistry::description(const std::string& name) const {
  auto it = m_descriptions.find(name);
  return it == m_descriptions.end() ? std::string() : it->second;
}

const ModelRegistry::Entry* ModelRegistry::find(const std::string& name) const {
  auto it = m_entries.find(name);
  return it == m_entries.end() ? nullptr : it->second.get();
}

void ModelRegistry::set_front(const std::string& kind, ModelFront front) {
  m_fronts[kind] = std::move(front);
}

const ModelFront* ModelRegistry::front(const std::string& kind) const {
  auto it = m_fronts.find(kind);
  return it == m_fronts.end() ? nullptr : &it->second;
}

std::pair<std::string, std::string> ModelRegistry::split_front(const std::string& fixture) {
  // Registered names never hold ':' (scenario files name them as plain identifiers).
  const auto colon = fixture.find(':');
  if (colon == std::string::npos) return {"", fixture};
  return {fixture.substr(0, colon), fixture.substr(colon + 1)};
}

std::vector<std::string> ModelRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& [name, entry] : m_entries) out.push_back(name);
  return out;
}

}  // namespace graphcheck
