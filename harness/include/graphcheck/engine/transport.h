#pragma once
// Distributed scenarios (DESIGN §2.9, Note [Distributed scenarios] in engine/distributed.cpp):
// what one process of such a scenario is (RankContext), and how each refit reaches it from the
// trainer rank (RefitTransport). The transport is implemented by the front that owns the process
// group (python/graphcheck/distributed.py, over torch.distributed): the engine only reads streams.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "graphcheck/model.h"

namespace graphcheck {

// One process of a distributed scenario.
struct RankContext {
  int rank = 0;
  int world_size = 1;
  int tp_rank = 0;  // its place among the rollout ranks
  int tp_size = 1;  // how many rollout ranks
};

// One tensor as the trainer sent it (finish_weight_update's manifest).
struct SentTensor {
  std::string name;
  std::uint64_t fingerprint = 0;  // graphcheck's fingerprint of its bytes (xxh3, fingerprint.h)
  std::string bucket;             // "bucket 2 of 4" when packed, "" when sent on its own
};

// The weight-transfer protocol as a rollout rank sees it (vLLM's: start_weight_update, then
// update_weights, then finish_weight_update), once per refit step, in order.
class RefitTransport {
 public:
  virtual ~RefitTransport() = default;

  struct Incoming {
    std::unique_ptr<WeightStream> stream;  // update_weights: the tensors as they arrive
    std::vector<std::string> names;        // start_weight_update: what the trainer announced
    std::string source;                    // "refit cycle 1 from trainer rank 0 (packed, 4 buckets)"
    // is_checkpoint_format: false means the tensors come in the kernel layout, named as the live
    // tensors, and are copied into them without load_weights() and without PWAL.
    bool checkpoint_format = true;
  };
  // Refit step `cycle` (1-based): announces it and returns its stream, which the caller reads to
  // its end before asking for the manifest.
  virtual Incoming receive(int cycle) = 0;
  // finish_weight_update: what the trainer says it sent in refit step `cycle`.
  virtual std::vector<SentTensor> manifest(int cycle) = 0;
  // Receives and drops every refit step from `cycle` on, so that the trainer's collectives
  // complete when this rank's lifecycle stopped before them.
  virtual void drain_from(int cycle) = 0;
};

}  // namespace graphcheck
