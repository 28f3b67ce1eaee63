#pragma once
// Note [One slab per synthesis] (model.cpp): while a SynthesisSlabs lives on a thread, the default
// LifecycleModel::synthesize_checkpoint() on that thread keeps the block its floating tensors are
// views of, and the next synthesis reuses it once the tensors of the last are gone (written and
// dropped), rather than faulting in fresh memory. The block goes when the scope ends. Scopes nest.

#include <torch/types.h>

namespace graphcheck {

class SynthesisSlabs {
 public:
  SynthesisSlabs();
  ~SynthesisSlabs();
  SynthesisSlabs(const SynthesisSlabs&) = delete;
  SynthesisSlabs& operator=(const SynthesisSlabs&) = delete;

  torch::Tensor slab;  // the last synthesis's block
  // Set by the default synthesis when it runs: where a model's own synthesize_checkpoint() ran
  // instead, the caller keeps its promise of a fresh model for the next seed.
  bool default_ran = false;

 private:
  SynthesisSlabs* m_outer;
};

}  // namespace graphcheck
