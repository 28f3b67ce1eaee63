#pragma once
// Note [Eager op log]
// The validate pass records the forward afresh on its wide-range inputs (Note [Frozen branches],
// replay_diff_probe.cpp): a recording each, as costly as a capture (0.7 s per recording of a
// 10,000-tensor model, 13% of a run with every probe, when the recording was a TorchScript trace).
// Most recordings find nothing. An eager forward the pass runs anyway on the same input can say
// so first: an op log records, on this thread, each op the forward calls at the top level (not the
// ops inside them) with every input that is not a tensor (numbers, lists, strings, devices,
// dtypes) and the value of every Python scalar the call wrapped as a tensor: what a recording
// keeps of a call, with the tensors' dtypes. Of each tensor it also keeps which one it is: the
// forward's input by position, memory the forward's ops returned not at all, any other tensor (a
// weight) by its address and size (a recording compares those too: Note [A read chosen at
// capture]); and the bytes the host wrote into memory the forward made, at their first read
// (host_memory_use.h). A logged run fills what its empty-family ops return, as a recording does:
// bytes no value of the forward's, so a forward that reads memory it never wrote computes from
// the fill there; that forward is the noise measurement's finding (two unlogged eager runs that
// differ, Note [Nondeterministic forward]), not the log's to decide.
// Regions that are no op (an autograd Function's apply) are transparent, and a host sync inside
// an op (which the recording's host-sync check would meet) is logged too.
// When the log of the fresh input equals the log of the capture's own input, run eagerly in the
// same pass just before the capture and again after it, the forward decided nothing differently
// on the host, and a recording would part from the capture nowhere: the recording is skipped. Any
// difference (another op, another host value, even one a recording would not keep, such as a
// first call that builds a cache, or a capture that changed the model's state) falls back to the
// recording, which alone decides the verdict. So the log can only save time, never change a
// finding: the log and the recording see the same calls (the top-level ops RecordFunction
// reports, Note [Recorded forwards] in emulated_backend.cpp), and the log keeps more of each (the
// tensors' dtypes, host values inside lists of tensors, the ops of code that asks not to be
// traced). One assumption: model code that asks whether it runs under a capture (Note
// [Capturing, as model code asks]) takes, when recorded, a path that decides nothing on the host
// from data that its eager path leaves undecided.
// A backend that records nothing (GraphBackend::records_forwards(): the cuda one) has no
// recording to skip, so the pass neither logs nor runs the extra eager forwards there.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace at {
class Tensor;
}  // namespace at

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
  // `inputs`: the forward's, logged by position, not by address.
  OpLogScope(OpLogDigest& out, const std::vector<at::Tensor>& inputs);
  ~OpLogScope();
  OpLogScope(const OpLogScope&) = delete;
  OpLogScope& operator=(const OpLogScope&) = delete;

 private:
  std::uint64_t m_handle;
};

// Note [Where a forward stops repeating]
// A forward that two eager runs on one input do not repeat (Note [Nondeterministic forward],
// replay_diff_probe.cpp) is run twice more with an op trail: each op the forward calls at the top
// level, where its Python line is (a Python model), and a fingerprint of the tensors it returns.
// Every op before the first that parts between the two trails returned the same tensors from the
// same inputs, so that op is where the forward stops repeating: a random draw, a dropout left in
// training mode, a kernel with atomics, or a branch taken on such a value (the trails then call
// another op there). Ops that return memory they never write (aten::empty and its kin), and ops
// that return a tensor of that memory (masked_fill_ on an empty() buffer may leave bytes of it
// unwritten), are listed but not compared: those bytes are whatever the allocator hands back.
// Lists of tensors and numbers an op returns are compared too. Traced once per pass; a run that
// fails leaves the place unnamed.
struct OpTrail {
  struct Op {
    std::string name;
    std::string where;          // "model.py:42", or "" (a C++ model)
    std::uint64_t outputs = 0;  // the returned tensors' fingerprints, combined
    bool compared = true;       // false for ops whose outputs are uninitialised memory
  };
  std::vector<Op> ops;
};

// Records into `out` while it lives (one per thread at a time; not beside an OpLogScope).
class OpTrailScope {
 public:
  explicit OpTrailScope(OpTrail& out);
  ~OpTrailScope();
  OpTrailScope(const OpTrailScope&) = delete;
  OpTrailScope& operator=(const OpTrailScope&) = delete;

 private:
  std::uint64_t m_handle;
};

// The position of the first op where `b` parts from `a` (another op, or the same op returning
// other tensors); nullopt when they agree op for op.
[[nodiscard]] std::optional<std::size_t> first_divergence(const OpTrail& a, const OpTrail& b);

}  // namespace graphcheck::engine
