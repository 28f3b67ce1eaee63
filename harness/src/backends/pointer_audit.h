#pragma once
// The pure half of the CUDA backend's pointer audit (DESIGN §2.3): what a captured graph reads,
// from the bytes of its kernel nodes' parameter buffers and its memcpy nodes. No CUDA and no
// torch here: the CUDA half (cuda_graph_audit.cpp) walks a cudaGraph_t with the driver's
// functions and hands each node's parameter layout and bytes to these functions, which the CPU
// tests drive with synthetic parameter buffers.
//
// Note [Pointer audit]
// A CUDA graph bakes device pointers into its kernel nodes' parameter buffers. The audit reads
// each buffer with the layout the driver reports (cuFuncGetParamInfo / cuKernelGetParamInfo:
// offset and size of every parameter), takes every 8-byte-aligned word that lies wholly inside
// one parameter of at least 8 bytes (a pointer, or a pointer inside a by-value struct such as an
// array of pointers), and classifies it against address ranges: the graph's static inputs, the
// model's live tensors, the graph's private memory pool (intermediates), and the other segments
// of the caching allocator (memory an undeclared tensor holds). Bytes read are unknown (0): the
// driver's resolver maps the bare address to a tensor. A word that merely looks like a pointer
// (a seed, an index, padding) is ruled out the way PyTorch's prototype did: the forward is
// captured twice and only hits found at the same site in both captures count (confirm()).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace graphcheck::audit {

// The largest kernel parameter buffer CUDA accepts (32764 bytes since CUDA 12.1; 4 KiB before).
inline constexpr std::size_t kMaxParamBytes = 32764;

// One kernel parameter: its offset and size in bytes within the parameter buffer.
struct ParamSlot {
  std::size_t offset = 0;
  std::size_t size = 0;
  friend bool operator==(const ParamSlot&, const ParamSlot&) = default;
};

// The driver's answer for parameter `index`; std::nullopt once past the last parameter (the
// driver's CUDA_ERROR_INVALID_VALUE).
using ParamInfoFn = std::function<std::optional<ParamSlot>(std::size_t index)>;

// A layout the driver reported that cannot be right (overlapping or out-of-range parameters).
class BadLayout : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Asks for parameters 0, 1, ... until the driver says there are no more. Throws BadLayout for
// parameters that overlap, go backwards, are empty, or end past kMaxParamBytes.
[[nodiscard]] std::vector<ParamSlot> walk_param_layout(const ParamInfoFn& info);

// Bytes [0, end of the last parameter) of a parameter buffer: each parameter's bytes copied from
// values[i] (a kernel node's kernelParams array: one pointer to each parameter's value) to its
// offset; gaps (alignment padding) are zero.
[[nodiscard]] std::vector<std::byte> param_image(const std::vector<ParamSlot>& layout,
                                                 const void* const* values);

// The `extra` form of kernel parameters ({CU_LAUNCH_PARAM_BUFFER_POINTER, p,
// CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END}): the buffer, or std::nullopt when the
// array names no buffer. The three markers have these values in every CUDA release (cuda.h).
inline constexpr std::uintptr_t kLaunchParamEnd = 0x00;
inline constexpr std::uintptr_t kLaunchParamBufferPointer = 0x01;
inline constexpr std::uintptr_t kLaunchParamBufferSize = 0x02;
[[nodiscard]] std::optional<std::span<const std::byte>> extra_buffer(const void* const* extra);

// One 8-byte-aligned word of a parameter buffer.
struct ParamWord {
  std::uint64_t value = 0;
  std::size_t param = 0;   // index of the parameter it lies in
  std::size_t offset = 0;  // byte offset in the parameter buffer
};

// Every 8-byte-aligned word that lies wholly inside one parameter of at least 8 bytes. Without a
// layout (empty), every 8-byte-aligned word of the image (parameter index 0).
[[nodiscard]] std::vector<ParamWord> scan_words(std::span<const std::byte> image,
                                                const std::vector<ParamSlot>& layout);

// What a word points into. In order of precedence where ranges overlap.
enum class RangeKind : std::uint8_t {
  input,    // a static input buffer of the graph (not a read of the model's state)
  tensor,   // a live tensor of the model
  pool,     // the graph's private memory pool (intermediates, static outputs)
  segment,  // other caching-allocator memory: a tensor the model did not declare
};
[[nodiscard]] const char* to_string(RangeKind kind);

// Labelled address ranges; classify() finds the range of highest precedence holding an address.
class AuditRanges {
 public:
  void add(std::uint64_t begin, std::uint64_t bytes, RangeKind kind);
  [[nodiscard]] std::optional<RangeKind> classify(std::uint64_t address) const;
  [[nodiscard]] std::size_t size() const { return m_ranges.size(); }

 private:
  struct Range {
    std::uint64_t begin = 0, end = 0;
    RangeKind kind = RangeKind::segment;
  };
  void sort() const;
  mutable std::vector<Range> m_ranges;
  mutable bool m_sorted = true;
  mutable std::vector<std::uint64_t> m_max_end;  // max end over m_ranges[0..i]
};

// A pointer the audit found, and where: node ordinal in walk order (child graphs depth first),
// and for kernel nodes the parameter and its byte offset.
struct AuditHit {
  std::uint64_t address = 0;
  std::uint64_t bytes = 0;  // 0: unknown (a kernel parameter); memcpy nodes know theirs
  RangeKind kind = RangeKind::tensor;
  std::size_t node = 0;
  std::size_t param = 0;
  std::size_t offset = 0;
  bool memcpy = false;
};

struct AuditResult {
  std::vector<AuditHit> hits;
  std::size_t nodes = 0;  // every node walked, child graphs' included (the next ordinal)
  std::size_t kernel_nodes = 0;
  std::size_t kernels_without_layout = 0;  // scanned as a bare image, or skipped (see notes)
  std::size_t memcpy_nodes = 0;
  std::size_t memset_nodes = 0;
  std::size_t child_graphs = 0;
  std::size_t ignored_nodes = 0;  // event record / wait, empty, host and other nodes
  std::size_t words_scanned = 0;
  std::vector<std::string> notes;  // what the audit could not look into, once each
};

// Adds the pointer words of one kernel node's parameter image to `result`.
void audit_kernel_words(std::size_t node, std::span<const std::byte> image,
                        const std::vector<ParamSlot>& layout, const AuditRanges& ranges,
                        AuditResult& result);
// Adds a memcpy node's source (a read of `bytes` bytes) to `result` when it lies in a range.
void audit_memcpy_source(std::size_t node, std::uint64_t source, std::uint64_t bytes,
                         const AuditRanges& ranges, AuditResult& result);

// The hits of `first` confirmed by `second` (another capture of the same forward): a hit counts
// when `second` has one at the same site (node, parameter, offset) of the same kind, with the
// same address except in the pool (a second capture's intermediates lie elsewhere). Where the two
// captures have different shapes (node counts), sites cannot be matched: then a hit counts when
// `second` has one of the same kind at the same address anywhere.
[[nodiscard]] std::vector<AuditHit> confirm(const AuditResult& first, const AuditResult& second);

// The distinct addresses of tensor and segment hits (the graph's reads of the model's state and
// of undeclared memory), sorted, each with the largest known byte count.
struct AuditRead {
  std::uint64_t address = 0;
  std::uint64_t bytes = 0;
  RangeKind kind = RangeKind::tensor;
};
[[nodiscard]] std::vector<AuditRead> reads_of(const std::vector<AuditHit>& hits);

}  // namespace graphcheck::audit
