// external_gated_mlp: a gated MLP whose post-load folds a per-channel gate scale into a derived
// tensor the forward reads (a plain member, declared through extra_tensors()). Its own hook
// announces the fold, so graphcheck checks that it runs after every load and refit.
//
// The planted bug, behind the mutation `external_gated_mlp.fold_once`: the fold runs on the first
// post-load only, so after an RL weight sync the forward still uses the first weights' scale.

#include <ATen/CPUGeneratorImpl.h>
#include <graphcheck/hooks.h>
#include <graphcheck/model.h>
#include <graphcheck/mutation.h>
#include <torch/torch.h>

namespace external_model {

GRAPHCHECK_REGISTER_MUTATION("external_gated_mlp.fold_once", "external_gated_mlp",
                             "the gate scale is folded on the first post-load only: refits keep the old scale");

namespace {

class GatedMlp : public torch::nn::Module {
 public:
  GatedMlp(std::int64_t hidden, std::int64_t intermediate) {
    gate = register_parameter("gate", torch::zeros({intermediate, hidden}));
    up = register_parameter("up", torch::zeros({intermediate, hidden}));
    down = register_parameter("down", torch::zeros({hidden, intermediate}));
    gate_scale = register_parameter("gate_scale", torch::ones({intermediate}));
  }
  torch::Tensor gate, up, down, gate_scale;
};

class GatedMlpModel final : public graphcheck::LifecycleModel {
 public:
  explicit GatedMlpModel(const graphcheck::ModelConfig& config)
      : m_hidden(config.get_int("hidden", 16, 1, 1 << 14)),
        m_mlp(std::make_shared<GatedMlp>(m_hidden, config.get_int("intermediate", 32, 1, 1 << 16))) {}

  torch::nn::Module& module() override { return *m_mlp; }

  std::set<std::string> load_weights(graphcheck::WeightStream& weights) override {
    return graphcheck::load_module_weights(*this, weights);  // copy_ into each parameter, in place
  }

  void process_weights_after_loading() override {
    GRAPHCHECK_HOOK(this, "fold_gate_scale");
    torch::NoGradGuard no_grad;
    torch::Tensor folded = m_mlp->gate * torch::sigmoid(m_mlp->gate_scale).unsqueeze(1);
    if (!m_folded_gate.defined()) {
      m_folded_gate = folded;  // the first load allocates
    } else if (!graphcheck::mutation::enabled("external_gated_mlp.fold_once")) {
      m_folded_gate.copy_(folded);  // every later load updates in place: graphs keep reading it
    }
  }

  torch::Tensor forward(const torch::Tensor& x) override {
    torch::Tensor h = torch::silu(torch::matmul(x, m_folded_gate.t())) * torch::matmul(x, m_mlp->up.t());
    return x + torch::matmul(h, m_mlp->down.t());
  }

  torch::Tensor make_input(std::int64_t batch_size, std::uint64_t seed) override {
    torch::Generator gen = at::detail::createCPUGenerator(seed);
    return torch::randn({batch_size, m_hidden}, gen);
  }

  std::vector<graphcheck::NamedTensor> extra_tensors() override { return {{"folded_gate", m_folded_gate}}; }

  [[nodiscard]] std::vector<graphcheck::ExpectedHook> expected_hooks() const override {
    return {graphcheck::ExpectedHook("(model)", "fold_gate_scale")};
  }

 private:
  std::int64_t m_hidden;
  std::shared_ptr<GatedMlp> m_mlp;
  torch::Tensor m_folded_gate;
};

}  // namespace

GRAPHCHECK_REGISTER_MODEL("external_gated_mlp", [](const graphcheck::ModelConfig& config) {
  return std::make_unique<GatedMlpModel>(config);
});

}  // namespace external_model
