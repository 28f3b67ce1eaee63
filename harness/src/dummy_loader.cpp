#include "dummy_loader.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/types.h>
#include <torch/utils.h>

#include "graphcheck/mutation.h"

namespace graphcheck {

GRAPHCHECK_REGISTER_MUTATION(
    "dummy.recursive_init", "driver",
    "the dummy loader initialises each module's whole recursive state, so every tensor is filled "
    "once per ancestor (O(depth) fills)");
GRAPHCHECK_REGISTER_MUTATION("dummy.init_non_persistent", "driver",
                             "the dummy loader also fills non-persistent buffers");
GRAPHCHECK_REGISTER_MUTATION(
    "dummy.value_after_float_check", "driver",
    "the dummy loader honours dummy_weight_value only inside its floating-point branch, so "
    "integer tensors (UE8M0 uint8 scales) get random values instead of their constant");

namespace {

using WriteObserver = std::function<void(const std::string&, const torch::Tensor&)>;

void fill_random(torch::Tensor& t, torch::Generator& gen) {
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

void fill(torch::Tensor& t, const TensorAttrs* attrs, torch::Generator& gen) {
  const bool has_value = attrs && attrs->dummy_weight_value;
  if (mutation::enabled("dummy.value_after_float_check")) {
    // Pre-fix: the constant is only looked at for floating-point tensors.
    if (c10::isFloatingType(t.scalar_type()) && has_value) {
      t.fill_(*attrs->dummy_weight_value);
    } else {
      fill_random(t, gen);
    }
    return;
  }
  if (has_value) {
    t.fill_(*attrs->dummy_weight_value);  // any dtype: UE8M0 uint8 scales hold 127
  } else {
    fill_random(t, gen);
  }
}

void init_tensors(TensorCatalog& catalog, const CatalogModule& module, bool recurse,
                  torch::Generator& gen, std::vector<std::string>& names,
                  const WriteObserver& on_write) {
  const bool skip_non_persistent = !mutation::enabled("dummy.init_non_persistent");
  const std::string prefix = module.path.empty() ? "" : module.path + ".";
  for (auto& t : catalog.module_tensors(module, recurse)) {
    // Never touch non-persistent buffers.
    if (skip_non_persistent && t.kind == TensorKind::non_persistent_buffer) continue;
    fill(t.tensor, catalog.attributes(t.tensor), gen);
    names.push_back(prefix + t.name);
    if (on_write) on_write(names.back(), t.tensor);
  }
}

}  // namespace

std::vector<std::string> dummy_load(LifecycleModel& model, std::uint64_t seed,
                                    const WriteObserver& on_write) {
  torch::NoGradGuard no_grad;
  torch::Generator gen = at::detail::createCPUGenerator(seed);
  // Pre-fix: each module re-initialises its recursive state while the walk already visits every
  // module, so a tensor is filled once per ancestor. The fix: each module's own tensors only.
  const bool recurse = mutation::enabled("dummy.recursive_init");
  std::vector<std::string> names;
  TensorCatalog& catalog = model.catalog();
  for (const CatalogModule& module : catalog.modules()) {
    init_tensors(catalog, module, recurse, gen, names, on_write);
  }
  return names;
}

}  // namespace graphcheck

namespace graphcheck {

std::vector<std::string> default_dummy_load(LifecycleModel& model, std::uint64_t seed) {
  return dummy_load(model, seed);
}

}  // namespace graphcheck
