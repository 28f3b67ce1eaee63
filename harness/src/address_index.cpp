#include "address_index.h"

#include <algorithm>
#include <cstdlib>

namespace graphcheck {

std::size_t tensor_extent_bytes(const torch::Tensor& t) {
  if (!t.defined() || !t.has_storage() || t.numel() == 0) return 0;
  std::int64_t last = 0;
  for (std::int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * std::abs(t.stride(d));
  return static_cast<std::size_t>((last + 1) * t.element_size());
}

AddressIndex::AddressIndex(std::vector<NamedTensor> tensors) : m_tensors(std::move(tensors)) {
  m_ranges.reserve(m_tensors.size());
  for (std::size_t i = 0; i < m_tensors.size(); ++i) {
    const torch::Tensor& t = m_tensors[i].tensor;
    const std::size_t bytes = tensor_extent_bytes(t);
    if (bytes == 0) continue;
    const auto begin = reinterpret_cast<std::uintptr_t>(t.data_ptr());
    m_ranges.push_back({begin, begin + bytes, i});
  }
  std::sort(m_ranges.begin(), m_ranges.end(), [](const Range& a, const Range& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.order < b.order;
  });
  m_max_end.resize(m_ranges.size());
  std::uintptr_t max_end = 0;
  for (std::size_t i = 0; i < m_ranges.size(); ++i) {
    max_end = std::max(max_end, m_ranges[i].end);
    m_max_end[i] = max_end;
  }
}

const AddressIndex::Range* AddressIndex::find(std::uintptr_t begin, std::size_t bytes) const {
  const std::uintptr_t end = begin + std::max<std::size_t>(bytes, 1);
  // Ranges starting at or before `begin`; walk back while one of them can still reach `end`.
  auto it = std::upper_bound(m_ranges.begin(), m_ranges.end(), begin,
                             [](std::uintptr_t a, const Range& r) { return a < r.begin; });
  const Range* best = nullptr;
  auto better = [&](const Range& r) {
    if (!best) return true;
    const bool r_exact = r.begin == begin && r.end == end && bytes > 0;
    const bool b_exact = best->begin == begin && best->end == end && bytes > 0;
    if (r_exact != b_exact) return r_exact;
    const auto r_len = r.end - r.begin, b_len = best->end - best->begin;
    if (r_len != b_len) return r_len < b_len;
    return r.order < best->order;
  };
  for (std::size_t i = static_cast<std::size_t>(it - m_ranges.begin()); i-- > 0;) {
    if (m_max_end[i] < end) break;  // nothing at or before i reaches the end of the range
    const Range& r = m_ranges[i];
    if (r.begin <= begin && end <= r.end && better(r)) best = &r;
  }
  return best;
}

std::optional<AddressHit> AddressIndex::resolve(const void* address, std::size_t bytes) const {
  const auto begin = reinterpret_cast<std::uintptr_t>(address);
  const Range* best = find(begin, bytes);
  if (!best) return std::nullopt;
  AddressHit hit;
  const NamedTensor& t = m_tensors[best->order];
  hit.name = t.name;
  hit.tensor = t.tensor;
  hit.offset = static_cast<std::int64_t>(begin - best->begin);
  hit.whole = bytes > 0 && best->begin == begin && best->end - best->begin == bytes;
  return hit;
}

bool AddressIndex::resolve_into(const void* address, std::size_t bytes, ResolvedRead& read) const {
  const auto begin = reinterpret_cast<std::uintptr_t>(address);
  const Range* best = find(begin, bytes);
  if (!best) return false;
  read.name = m_tensors[best->order].name;
  read.offset = static_cast<std::int64_t>(begin - best->begin);
  read.whole = bytes > 0 && best->begin == begin && best->end - best->begin == bytes;
  return true;
}

std::vector<ResolvedRead> resolve_reads(const std::vector<GraphRead>& reads,
                                        const AddressIndex& index) {
  std::vector<ResolvedRead> out(reads.size());
  for (std::size_t i = 0; i < reads.size(); ++i) {
    out[i].read = reads[i];
    index.resolve_into(reads[i].address, reads[i].bytes, out[i]);
  }
  return out;
}

}  // namespace graphcheck
