#pragma once
// Checkpoints as safetensors files, seen as torch tensors and weight streams.

#include <torch/types.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "graphcheck/model.h"
#include "graphcheck/safetensors.h"

namespace graphcheck {

// safetensors dtype <-> libtorch dtype. F8_E4M3 / F8_E5M2 map onto libtorch's float8 types;
// F8_E8M0 onto Float8_e8m0fnu where libtorch has it, else uint8 (same bytes). Throws
// safetensors::Error for a libtorch dtype safetensors cannot hold.
[[nodiscard]] c10::ScalarType to_scalar_type(safetensors::Dtype dtype);
[[nodiscard]] safetensors::Dtype to_safetensors_dtype(c10::ScalarType dtype);

// A copy of one tensor of an open file, as a contiguous CPU tensor.
[[nodiscard]] torch::Tensor read_tensor(const safetensors::File& file,
                                        const safetensors::TensorInfo& info);

// graphcheck's fingerprint of a tensor's bytes (xxh3 over its elements in order; a view's, not
// its storage's): what the idempotence check and the distributed transfer manifest compare.
[[nodiscard]] std::uint64_t tensor_fingerprint(const torch::Tensor& tensor);

// Writes tensors (made contiguous, on CPU) as a safetensors file, atomically (durably unless
// `durability` is scratch: safetensors::write).
void save_checkpoint(const std::string& path, const std::vector<NamedTensor>& tensors,
                     const std::map<std::string, std::string>& metadata = {},
                     safetensors::Durability durability = safetensors::Durability::durable);

// How a SafetensorsWeightStream hands out tensors.
//  - copies: each tensor a fresh copy of the file's bytes.
//  - mapped: each tensor a view of a private copy-on-write map of the file (no copy, no fresh
//    memory; the map lives as long as any tensor from it). A write into such a tensor copies the
//    page it lands on and reaches neither the file nor another stream. Only for a file nobody
//    rewrites in place while the tensors live (a truncated map faults on access); a tensor the
//    file does not align to its element size is copied instead.
enum class StreamReads { copies, mapped };

// Streams the tensors of one safetensors file in data-offset order; with `only`, just those whose
// names start with one of the prefixes. Opening validates the whole file (safetensors::Error).
class SafetensorsWeightStream : public WeightStream {
 public:
  // Streams the tensors whose names start with one of `only` (empty: every tensor) and, when
  // `names` is not empty, only those named in it, in the file's order.
  explicit SafetensorsWeightStream(const std::string& path, std::vector<std::string> only = {},
                                   std::set<std::string> names = {},
                                   StreamReads reads = StreamReads::copies);
  SafetensorsWeightStream(const SafetensorsWeightStream&) = delete;
  SafetensorsWeightStream& operator=(const SafetensorsWeightStream&) = delete;
  std::optional<NamedTensor> next() override;
  [[nodiscard]] std::string source() const override;
  [[nodiscard]] const safetensors::File& file() const { return *m_file; }

 private:
  std::shared_ptr<safetensors::File> m_file;
  StreamReads m_reads;
  std::vector<std::string> m_only;
  std::set<std::string> m_names;
  std::size_t m_next = 0;
};

// Streams tensors held in memory.
class TensorListWeightStream : public WeightStream {
 public:
  TensorListWeightStream(std::vector<NamedTensor> tensors, std::string source)
      : m_tensors(std::move(tensors)), m_source(std::move(source)) {}
  std::optional<NamedTensor> next() override;
  [[nodiscard]] std::string source() const override { return m_source; }

 private:
  std::vector<NamedTensor> m_tensors;
  std::string m_source;
  std::size_t m_next = 0;
};

[[nodiscard]] bool matches_any_prefix(const std::string& name,
                                      const std::vector<std::string>& prefixes);

}  // namespace graphcheck
