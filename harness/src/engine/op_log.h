#pragma once
// Note [Eager op log]
// The validate pass records the forward afresh on its wide-range inputs (Note [Frozen branches],
// replay_diff_probe.cpp): a trace each, as costly as a capture (0.7 s per recording of a
// 10,000-tensor model, 13% of a run with every probe). Most recordings find nothing. An eager
// forward the pass runs anyway on the same input can say so first: an op log records, on this
// thread, each op the forward calls at the top level (not the ops inside them) with every input
// that is not a tensor (numbers, lists, strings, devices, dtypes) and the value of every Python
// scalar the call wrapped as a tensor: what a trace keeps of a call, with the tensors' dtypes.
// Regions that are no op (an autograd Function's apply) are transparent, and a host sync inside
// an op (which the recording's host-sync check would meet) is logged too.
// When the log of the fresh input equals the log of the capture's own input, run eagerly in the
// same pass just before the capture and again after it, the forward decided nothing differently
// on the host, and a trace would part from the capture nowhere: the recording is skipped. Any
// difference (another op, another host value, even one a trace would not keep, such as a first
// call that builds a cache, or a capture that changed the model's state) falls back to the
// recording, which alone decides the verdict. So the log can only save time, never change a
// finding, with one assumption: what the tracer adds of its own, Python arithmetic on shapes (an
// op only under the tracer), is the same on every input of one batch size. A shape combined with
// a value read from data through no op (a NumPy view) would break it; a read through an op is a
// host sync, refused at capture.
// A backend that records nothing (GraphBackend::records_forwards(): the cuda one) has no
// recording to skip, so the pass neither logs nor runs the extra eager forwards there.

#include <cstdint>

namespace graphcheck::engine {

// A digest of the top-level ops and their host values, in order.
struct OpLogDigest {
  std::uint64_t ops = 0;
  std::uint64_t hash = 0;
  bool operator==(const OpLogDigest&) const = default;
};

// Records into `out` while it lives (one per thread at a time).
class OpLogScope {
 public:
  explicit OpLogScope(OpLogDigest& out);
  ~OpLogScope();
  OpLogScope(const OpLogScope&) = delete;
  OpLogScope& operator=(const OpLogScope&) = delete;

 private:
  std::uint64_t m_handle;
};

}  // namespace graphcheck::engine
