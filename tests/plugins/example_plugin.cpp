// A plugin as a model author outside this repository builds it: one model and its own mutation,
// registered from static initialisers, loaded by the stock CLI with --plugin (issue 11); and a
// report format of its own, written with --report scenario-lines=PATH.

#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/module.h>
#include <torch/types.h>
#include <torch/utils.h>

#include "graphcheck/engine/reporter.h"
#include "graphcheck/hooks.h"
#include "graphcheck/model.h"
#include "graphcheck/mutation.h"

namespace plugin_example {

GRAPHCHECK_REGISTER_MUTATION("plugin_example.rebind_scale", "plugin_example",
                             "PWAL allocates the derived column scale anew on every call");

namespace {

class Net : public torch::nn::Module {
 public:
  Net() { weight = register_parameter("weight", torch::zeros({8, 8})); }
  torch::Tensor weight;
};

class ExampleModel final : public graphcheck::LifecycleModel {
 public:
  explicit ExampleModel(const graphcheck::ModelConfig&) : m_net(std::make_shared<Net>()) {}
  torch::nn::Module& module() override { return *m_net; }
  std::set<std::string> load_weights(graphcheck::WeightStream& weights) override {
    return graphcheck::load_module_weights(*this, weights);
  }
  void process_weights_after_loading() override {
    GRAPHCHECK_HOOK(this, "derive_scale");
    torch::NoGradGuard no_grad;
    torch::Tensor scale = m_net->weight.abs().amax(0) + 1.0;
    if (!m_scale.defined() || graphcheck::mutation::enabled("plugin_example.rebind_scale")) {
      m_scale = scale;
    } else {
      m_scale.copy_(scale);
    }
  }
  torch::Tensor forward(const torch::Tensor& x) override { return torch::matmul(x, m_net->weight) / m_scale; }
  torch::Tensor make_input(std::int64_t batch_size, std::uint64_t seed) override {
    torch::Generator gen = at::detail::createCPUGenerator(seed);
    return torch::randn({batch_size, 8}, gen);
  }
  std::vector<graphcheck::NamedTensor> extra_tensors() override { return {{"scale", m_scale}}; }
  [[nodiscard]] std::vector<graphcheck::ExpectedHook> expected_hooks() const override {
    return {graphcheck::ExpectedHook("(model)", "derive_scale")};
  }

 private:
  std::shared_ptr<Net> m_net;
  torch::Tensor m_scale;
};

}  // namespace

// One line per scenario: "name status".
std::string scenario_lines(const graphcheck::RunRecord& run) {
  std::string out;
  for (const auto& s : run.scenarios) out += s.name + " " + graphcheck::to_string(s.status) + "\n";
  return out;
}

GRAPHCHECK_REGISTER_REPORTER({"scenario-lines", "One line per scenario: its name and status", nullptr,
                              [](const std::string& path) {
                                return std::make_unique<graphcheck::FileReporter>(path, &scenario_lines);
                              }});

GRAPHCHECK_DESCRIBE_MODEL("plugin_example", "a model from a plugin: a derived scale refreshed by PWAL");
GRAPHCHECK_REGISTER_MODEL("plugin_example", [](const graphcheck::ModelConfig& config) {
  return std::make_unique<ExampleModel>(config);
});

}  // namespace plugin_example
