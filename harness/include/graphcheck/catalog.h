#pragma once
// The tensor catalog: the one way the engine discovers a model's tensors and modules (DESIGN
// §2.1b). A C++ model gets the default catalog over its module() tree (ModuleCatalog); another
// front (the Python one) implements this interface over its own module objects, so nothing in
// the engine needs a torch::nn::Module.

#include <torch/types.h>

#include <string>
#include <string_view>
#include <vector>

namespace graphcheck {

struct TensorAttrs;

// What a tensor is to the model. Loads write parameters and persistent buffers (the checkpoint
// tensors); nothing loads non-persistent buffers (derived state, scratch); extras are tensors the
// forward reads that no module registers (plain members).
enum class TensorKind { parameter, persistent_buffer, non_persistent_buffer, extra };

// "parameter", "persistent buffer", "non-persistent buffer", "extra tensor".
[[nodiscard]] std::string_view to_string(TensorKind kind);

[[nodiscard]] inline bool is_checkpoint_kind(TensorKind kind) {
  return kind == TensorKind::parameter || kind == TensorKind::persistent_buffer;
}

struct CatalogTensor {
  std::string name;  // dotted, relative to the module it was asked of: "layers.0.attn.weight"
  torch::Tensor tensor;
  TensorKind kind = TensorKind::parameter;
};

// One module of the model's tree.
struct CatalogModule {
  std::string path;          // "" for the root, else dotted: "layers.0.attn"
  const void* identity = nullptr;  // what hooks announce it by (GRAPHCHECK_HOOK's `this`)
  const void* handle = nullptr;    // the catalog's own reference, for module_tensors()
};

class TensorCatalog {
 public:
  virtual ~TensorCatalog() = default;

  // The tensors modules register, by dotted name: parameters, then buffers (persistent or
  // not), each once per name, in a stable order.
  [[nodiscard]] virtual std::vector<CatalogTensor> registered_tensors() = 0;
  // The tensors the forward reads that no module registers (kind extra), by dotted name.
  [[nodiscard]] virtual std::vector<CatalogTensor> extra_tensors() = 0;
  // registered_tensors(), then extra_tensors().
  [[nodiscard]] std::vector<CatalogTensor> tensors() {
    std::vector<CatalogTensor> out = registered_tensors();
    for (auto& t : extra_tensors()) out.push_back(std::move(t));
    return out;
  }

  // Every module: the root first (path ""), then its submodules in depth-first order. Identities
  // are stable for as long as the module lives.
  [[nodiscard]] virtual std::vector<CatalogModule> modules() = 0;

  // The parameters and buffers of one module of modules(): its own (recurse false) or its whole
  // subtree's, named relative to it.
  [[nodiscard]] virtual std::vector<CatalogTensor> module_tensors(const CatalogModule& module,
                                                                  bool recurse) = 0;

  // The per-tensor attributes of a tensor (set_weight_attrs), or nullptr.
  [[nodiscard]] virtual const TensorAttrs* attributes(const torch::Tensor& tensor) = 0;

  // Moves every parameter and buffer to `device` in place (their identities survive, and with
  // them the attributes keyed by them).
  virtual void to(const c10::Device& device) = 0;
};

}  // namespace graphcheck
