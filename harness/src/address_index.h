#pragma once
// An index of live tensors by the address ranges they cover, for resolving what a captured graph
// reads (DESIGN §2.3): an address, interior pointers included, maps to the tensor it falls in and
// the byte offset into it. O(log n + overlaps) per lookup; built once per snapshot of the model.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "graphcheck/model.h"
#include "graphcheck/probe.h"

namespace graphcheck {

// Bytes from a tensor's first element to one past the last element it can touch (its strides
// taken into account); 0 for an empty or storage-less tensor.
[[nodiscard]] std::size_t tensor_extent_bytes(const torch::Tensor& t);

class AddressIndex {
 public:
  AddressIndex() = default;
  // Tensors listed first win where ranges coincide (live_tensors(): parameters, buffers, then
  // extra_tensors()).
  explicit AddressIndex(std::vector<NamedTensor> tensors);

  // The tensor that [address, address + bytes) falls in: among those containing the whole range,
  // one that covers it exactly, else the smallest, else the first listed. bytes 0: the address.
  [[nodiscard]] std::optional<AddressHit> resolve(const void* address, std::size_t bytes) const;
  // The same lookup, written into a graph's read: the name, offset and whole flag only (no
  // tensor handle, one copy of the name). False, `read` untouched, where nothing covers it.
  bool resolve_into(const void* address, std::size_t bytes, ResolvedRead& read) const;
  [[nodiscard]] std::size_t size() const { return m_ranges.size(); }

 private:
  struct Range {
    std::uintptr_t begin = 0;
    std::uintptr_t end = 0;  // one past the last byte
    std::size_t order = 0;   // position in the input list (m_tensors)
  };
  [[nodiscard]] const Range* find(std::uintptr_t begin, std::size_t bytes) const;
  std::vector<NamedTensor> m_tensors;
  std::vector<Range> m_ranges;             // sorted by begin
  std::vector<std::uintptr_t> m_max_end;   // max end over m_ranges[0..i]
};

// Resolves every read of a graph against an index.
[[nodiscard]] std::vector<ResolvedRead> resolve_reads(const std::vector<GraphRead>& reads,
                                                      const AddressIndex& index);

}  // namespace graphcheck
