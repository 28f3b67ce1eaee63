#include "backends/pointer_audit.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <tuple>

namespace graphcheck::audit {

std::vector<ParamSlot> walk_param_layout(const ParamInfoFn& info) {
  std::vector<ParamSlot> layout;
  std::size_t end = 0;
  // A kernel has at most kMaxParamBytes parameters (each at least one byte).
  for (std::size_t i = 0; i <= kMaxParamBytes; ++i) {
    const std::optional<ParamSlot> slot = info(i);
    if (!slot) return layout;
    if (slot->size == 0) {
      throw BadLayout(fmt::format("kernel parameter {} has size 0", i));
    }
    if (slot->offset < end) {
      throw BadLayout(
          fmt::format("kernel parameter {} at offset {} overlaps the one before it "
                      "(which ends at {})",
                      i, slot->offset, end));
    }
    end = slot->offset + slot->size;
    if (end > kMaxParamBytes) {
      throw BadLayout(
          fmt::format("kernel parameter {} ends at byte {}, past the {} bytes a "
                      "parameter buffer can hold",
                      i, end, kMaxParamBytes));
    }
    layout.push_back(*slot);
  }
  throw BadLayout(fmt::format("more than {} kernel parameters", kMaxParamBytes));
}

std::vector<std::byte> param_image(const std::vector<ParamSlot>& layout,
                                   const void* const* values) {
  if (layout.empty()) return {};
  std::vector<std::byte> image(layout.back().offset + layout.back().size, std::byte{0});
  for (std::size_t i = 0; i < layout.size(); ++i) {
    if (values[i] == nullptr) continue;
    std::memcpy(image.data() + layout[i].offset, values[i], layout[i].size);
  }
  return image;
}

std::optional<std::span<const std::byte>> extra_buffer(const void* const* extra) {
  if (extra == nullptr) return std::nullopt;
  const void* buffer = nullptr;
  const std::size_t* size = nullptr;
  // Marker / value pairs up to the end marker; at most a handful in practice.
  for (std::size_t i = 0; i < 64; i += 2) {
    const auto marker = reinterpret_cast<std::uintptr_t>(extra[i]);
    if (marker == kLaunchParamEnd) break;
    if (marker == kLaunchParamBufferPointer) {
      buffer = extra[i + 1];
    } else if (marker == kLaunchParamBufferSize) {
      size = static_cast<const std::size_t*>(extra[i + 1]);
    }
  }
  if (buffer == nullptr || size == nullptr || *size > kMaxParamBytes) return std::nullopt;
  return std::span<const std::byte>(static_cast<const std::byte*>(buffer), *size);
}

std::vector<ParamWord> scan_words(std::span<const std::byte> image,
                                  const std::vector<ParamSlot>& layout) {
  std::vector<ParamWord> words;
  auto word_at = [&](std::size_t offset) {
    std::uint64_t value = 0;
    std::memcpy(&value, image.data() + offset, sizeof value);
    return value;
  };
  if (layout.empty()) {
    for (std::size_t off = 0; off + 8 <= image.size(); off += 8)
      words.push_back({word_at(off), 0, off});
    return words;
  }
  for (std::size_t i = 0; i < layout.size(); ++i) {
    const ParamSlot& p = layout[i];
    if (p.size < 8) continue;
    const std::size_t end = std::min(p.offset + p.size, image.size());
    for (std::size_t off = (p.offset + 7) / 8 * 8; off + 8 <= end; off += 8) {
      words.push_back({word_at(off), i, off});
    }
  }
  return words;
}

const char* to_string(RangeKind kind) {
  switch (kind) {
    case RangeKind::input:
      return "input";
    case RangeKind::tensor:
      return "tensor";
    case RangeKind::pool:
      return "pool";
    case RangeKind::segment:
      return "segment";
  }
  return "?";
}

void AuditRanges::add(std::uint64_t begin, std::uint64_t bytes, RangeKind kind) {
  if (bytes == 0) return;
  m_ranges.push_back({begin, begin + bytes, kind});
  m_sorted = false;
}

void AuditRanges::sort() const {
  if (m_sorted) return;
  std::sort(m_ranges.begin(), m_ranges.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin; });
  m_max_end.resize(m_ranges.size());
  std::uint64_t max_end = 0;
  for (std::size_t i = 0; i < m_ranges.size(); ++i) {
    max_end = std::max(max_end, m_ranges[i].end);
    m_max_end[i] = max_end;
  }
  m_sorted = true;
}

std::optional<RangeKind> AuditRanges::classify(std::uint64_t address) const {
  sort();
  auto it = std::upper_bound(m_ranges.begin(), m_ranges.end(), address,
                             [](std::uint64_t a, const Range& r) { return a < r.begin; });
  std::optional<RangeKind> best;
  for (std::size_t i = static_cast<std::size_t>(it - m_ranges.begin()); i-- > 0;) {
    if (m_max_end[i] <= address) break;
    const Range& r = m_ranges[i];
    if (address < r.end && (!best || r.kind < *best)) best = r.kind;
  }
  return best;
}

void audit_kernel_words(std::size_t node, std::span<const std::byte> image,
                        const std::vector<ParamSlot>& layout, const AuditRanges& ranges,
                        AuditResult& result) {
  for (const ParamWord& w : scan_words(image, layout)) {
    ++result.words_scanned;
    if (w.value == 0) continue;
    if (auto kind = ranges.classify(w.value)) {
      result.hits.push_back({w.value, 0, *kind, node, w.param, w.offset, false});
    }
  }
}

void audit_memcpy_source(std::size_t node, std::uint64_t source, std::uint64_t bytes,
                         const AuditRanges& ranges, AuditResult& result) {
  if (source == 0) return;
  if (auto kind = ranges.classify(source)) {
    result.hits.push_back({source, bytes, *kind, node, 0, 0, true});
  }
}

std::vector<AuditHit> confirm(const AuditResult& first, const AuditResult& second) {
  std::vector<AuditHit> kept;
  if (first.nodes == second.nodes) {
    using Site = std::tuple<std::size_t, std::size_t, std::size_t, bool>;
    std::map<Site, std::vector<const AuditHit*>> at;
    for (const AuditHit& h : second.hits) at[{h.node, h.param, h.offset, h.memcpy}].push_back(&h);
    for (const AuditHit& h : first.hits) {
      auto it = at.find({h.node, h.param, h.offset, h.memcpy});
      if (it == at.end()) continue;
      for (const AuditHit* o : it->second) {
        if (o->kind == h.kind && (h.kind == RangeKind::pool || o->address == h.address)) {
          kept.push_back(h);
          break;
        }
      }
    }
    return kept;
  }
  std::set<std::pair<std::uint64_t, RangeKind>> seen;
  for (const AuditHit& h : second.hits) seen.insert({h.address, h.kind});
  for (const AuditHit& h : first.hits) {
    if (h.kind != RangeKind::pool && seen.count({h.address, h.kind})) kept.push_back(h);
  }
  return kept;
}

std::vector<AuditRead> reads_of(const std::vector<AuditHit>& hits) {
  std::map<std::uint64_t, AuditRead> by_address;
  for (const AuditHit& h : hits) {
    if (h.kind != RangeKind::tensor && h.kind != RangeKind::segment) continue;
    AuditRead& r = by_address[h.address];
    r.address = h.address;
    r.bytes = std::max(r.bytes, h.bytes);
    r.kind = h.kind;
  }
  std::vector<AuditRead> out;
  out.reserve(by_address.size());
  for (auto& [address, r] : by_address) out.push_back(r);
  return out;
}

}  // namespace graphcheck::audit
