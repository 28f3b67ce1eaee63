#include "graphcheck/model.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

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

std::vector<NamedTensor> checkpoint_tensors(LifecycleModel& model) {
  std::vector<NamedTensor> out;
  const auto& attrs = model.tensor_attributes();
  for (const auto& item : model.module().named_parameters(/*recurse=*/true)) {
    out.push_back({item.key(), item.value()});
  }
  for (const auto& item : model.module().named_buffers(/*recurse=*/true)) {
    const TensorAttrs* a = attrs.find(item.value());
    if (a && !a->persistent) continue;
    out.push_back({item.key(), item.value()});
  }
  return out;
}

std::vector<NamedTensor> live_tensors(LifecycleModel& model) {
  std::vector<NamedTensor> out;
  for (const auto& item : model.module().named_parameters(true)) out.push_back({item.key(), item.value()});
  for (const auto& item : model.module().named_buffers(true)) out.push_back({item.key(), item.value()});
  for (auto& extra : model.extra_tensors()) out.push_back(std::move(extra));
  return out;
}

std::set<std::string> load_module_weights(LifecycleModel& model, WeightStream& weights) {
  std::map<std::string, torch::Tensor> targets;
  for (auto& t : checkpoint_tensors(model)) targets.emplace(t.name, t.tensor);
  std::set<std::string> non_persistent;
  for (const auto& item : model.module().named_buffers(true)) {
    if (!targets.count(item.key())) non_persistent.insert(item.key());
  }

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
      throw CheckpointMismatch(fmt::format(
          "{}: tensor '{}' matches no parameter or persistent buffer of the model: check the "
          "name (model tensors look like '{}')",
          weights.source(), item->name, targets.empty() ? "" : targets.begin()->first));
    }
    torch::Tensor param = it->second;
    const torch::Tensor& value = item->tensor;
    const TensorAttrs* attrs = model.tensor_attributes().find(param);
    if (attrs && attrs->weight_loader) {
      attrs->weight_loader(param, value);
    } else {
      if (param.sizes() != value.sizes()) {
        throw CheckpointMismatch(fmt::format(
            "{}: tensor '{}' has shape {} in the checkpoint but {} in the model: regenerate the "
            "checkpoint for this model config",
            weights.source(), item->name, shape_string(value.sizes()), shape_string(param.sizes())));
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
    loaded.insert(item->name);
  }
  return loaded;
}

std::vector<NamedTensor> LifecycleModel::synthesize_checkpoint(std::uint64_t seed) {
  torch::Generator gen = at::detail::createCPUGenerator(seed);
  std::vector<NamedTensor> out;
  for (auto& t : checkpoint_tensors(*this)) {
    auto options = torch::TensorOptions().dtype(torch::kFloat32);
    torch::Tensor value;
    const auto dtype = t.tensor.scalar_type();
    if (dtype == torch::kBool) {
      value = torch::randint(0, 2, t.tensor.sizes(), gen, options.dtype(torch::kInt64)).to(dtype);
    } else if (c10::isIntegralType(dtype, /*includeBool=*/false)) {
      value = torch::randint(0, 8, t.tensor.sizes(), gen, options.dtype(torch::kInt64)).to(dtype);
    } else {
      // Scaled like an initialiser (std 1/sqrt(fan-in)) so that deep stacks stay finite.
      const double std = t.tensor.dim() >= 2 ? 1.0 / std::sqrt(static_cast<double>(t.tensor.size(-1))) : 0.5;
      value = (torch::randn(t.tensor.sizes(), gen, options) * std).to(dtype);
    }
    out.push_back({t.name, value.contiguous()});
  }
  return out;
}

// ---- registry -------------------------------------------------------------------------------

ModelRegistry& ModelRegistry::get() {
  static ModelRegistry registry;
  return registry;
}

bool ModelRegistry::add(std::string name, ModelFactory factory) {
  if (m_entries.count(name)) {
    std::fprintf(stderr, "graphcheck: model '%s' is registered twice\n", name.c_str());
    std::abort();
  }
  auto entry = std::make_unique<Entry>(Entry{name, std::move(factory)});
  m_entries.emplace(std::move(name), std::move(entry));
  return true;
}

const ModelRegistry::Entry* ModelRegistry::find(const std::string& name) const {
  auto it = m_entries.find(name);
  return it == m_entries.end() ? nullptr : it->second.get();
}

std::vector<std::string> ModelRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& [name, entry] : m_entries) out.push_back(name);
  return out;
}

}  // namespace graphcheck
