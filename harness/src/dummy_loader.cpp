#include "dummy_loader.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

namespace graphcheck {
namespace {

void fill(torch::Tensor& t, const TensorAttrs* attrs, torch::Generator& gen) {
  if (attrs && attrs->dummy_weight_value) {
    t.fill_(*attrs->dummy_weight_value);  // also for integer dtypes (UE8M0 scales: 127)
    return;
  }
  const auto options = torch::TensorOptions().dtype(torch::kFloat32);
  const auto dtype = t.scalar_type();
  if (dtype == torch::kBool) {
    t.copy_(torch::randint(0, 2, t.sizes(), gen, options.dtype(torch::kInt64)).to(torch::kBool));
  } else if (c10::isIntegralType(dtype, /*includeBool=*/false)) {
    t.copy_(torch::randint(0, 8, t.sizes(), gen, options.dtype(torch::kInt64)));
  } else {
    // Drawn in float32 and converted, so reduced-precision and float8 dtypes work alike.
    t.copy_(torch::empty(t.sizes(), options).uniform_(-1e-3, 1e-3, gen));
  }
}

void init_own_tensors(LifecycleModel& model, torch::nn::Module& module, const std::string& prefix,
                      torch::Generator& gen, std::vector<std::string>& names) {
  const TensorAttributes& attrs = model.tensor_attributes();
  for (auto& item : module.named_parameters(/*recurse=*/false)) {
    torch::Tensor t = item.value();
    fill(t, attrs.find(t), gen);
    names.push_back(prefix + item.key());
  }
  for (auto& item : module.named_buffers(/*recurse=*/false)) {
    torch::Tensor t = item.value();
    const TensorAttrs* a = attrs.find(t);
    if (a && !a->persistent) continue;  // non-persistent buffers are never touched
    fill(t, a, gen);
    names.push_back(prefix + item.key());
  }
}

}  // namespace

std::vector<std::string> dummy_load(LifecycleModel& model, std::uint64_t seed) {
  torch::NoGradGuard no_grad;
  torch::Generator gen = at::detail::createCPUGenerator(seed);
  std::vector<std::string> names;
  torch::nn::Module& root = model.module();
  init_own_tensors(model, root, "", gen, names);
  for (auto& item : root.named_modules("", /*include_self=*/false)) {
    init_own_tensors(model, *item.value(), item.key() + ".", gen, names);
  }
  return names;
}

}  // namespace graphcheck
