#include "graphcheck/checkpoint.h"

#include <fmt/format.h>
#include <torch/nn/module.h>
#include <torch/types.h>

#include "torch_compat.h"

namespace graphcheck {

namespace st = safetensors;

c10::ScalarType to_scalar_type(st::Dtype dtype) {
  switch (dtype) {
    case st::Dtype::F64: return torch::kFloat64;
    case st::Dtype::F32: return torch::kFloat32;
    case st::Dtype::F16: return torch::kFloat16;
    case st::Dtype::BF16: return torch::kBFloat16;
    case st::Dtype::I64: return torch::kInt64;
    case st::Dtype::I32: return torch::kInt32;
    case st::Dtype::I16: return torch::kInt16;
    case st::Dtype::I8: return torch::kInt8;
    case st::Dtype::U64: return c10::ScalarType::UInt64;
    case st::Dtype::U32: return c10::ScalarType::UInt32;
    case st::Dtype::U16: return c10::ScalarType::UInt16;
    case st::Dtype::U8: return torch::kUInt8;
    case st::Dtype::BOOL: return torch::kBool;
    case st::Dtype::F8_E4M3: return c10::ScalarType::Float8_e4m3fn;
    case st::Dtype::F8_E5M2: return c10::ScalarType::Float8_e5m2;
    case st::Dtype::E8M0:
#if GRAPHCHECK_HAS_FLOAT8_E8M0
      return c10::ScalarType::Float8_e8m0fnu;
#else
      return torch::kUInt8;
#endif
  }
  throw st::Error("unknown safetensors dtype");
}

st::Dtype to_safetensors_dtype(c10::ScalarType dtype) {
  switch (dtype) {
    case torch::kFloat64: return st::Dtype::F64;
    case torch::kFloat32: return st::Dtype::F32;
    case torch::kFloat16: return st::Dtype::F16;
    case torch::kBFloat16: return st::Dtype::BF16;
    case torch::kInt64: return st::Dtype::I64;
    case torch::kInt32: return st::Dtype::I32;
    case torch::kInt16: return st::Dtype::I16;
    case torch::kInt8: return st::Dtype::I8;
    case c10::ScalarType::UInt64: return st::Dtype::U64;
    case c10::ScalarType::UInt32: return st::Dtype::U32;
    case c10::ScalarType::UInt16: return st::Dtype::U16;
    case torch::kUInt8: return st::Dtype::U8;
    case torch::kBool: return st::Dtype::BOOL;
    case c10::ScalarType::Float8_e4m3fn: return st::Dtype::F8_E4M3;
    case c10::ScalarType::Float8_e5m2: return st::Dtype::F8_E5M2;
#if GRAPHCHECK_HAS_FLOAT8_E8M0
    case c10::ScalarType::Float8_e8m0fnu: return st::Dtype::E8M0;
#endif
    default: break;
  }
  throw st::Error(fmt::format("libtorch dtype {} has no safetensors equivalent: convert the tensor "
                              "to a supported dtype before saving",
                              c10::toString(dtype)));
}

torch::Tensor read_tensor(const st::File& file, const st::TensorInfo& info) {
  auto options = torch::TensorOptions().dtype(to_scalar_type(info.dtype));
  if (info.nbytes() == 0) return torch::empty(info.shape, options);
  // from_blob does not own the mapped bytes: clone before the file can be unmapped.
  void* data = const_cast<std::byte*>(file.data(info));
  return torch::from_blob(data, info.shape, options).clone();
}

void save_checkpoint(const std::string& path, const std::vector<NamedTensor>& tensors,
                     const std::map<std::string, std::string>& metadata, st::Durability durability) {
  std::vector<torch::Tensor> keep;  // owns the contiguous CPU copies while writing
  std::vector<st::TensorView> views;
  keep.reserve(tensors.size());
  for (const auto& t : tensors) {
    keep.push_back(t.tensor.detach().to(torch::kCPU).contiguous());
    const auto& c = keep.back();
    views.push_back({t.name, to_safetensors_dtype(c.scalar_type()),
                     std::vector<std::int64_t>(c.sizes().begin(), c.sizes().end()), c.data_ptr(),
                     static_cast<std::size_t>(c.nbytes())});
  }
  st::write(path, views, metadata, durability);
}

bool matches_any_prefix(const std::string& name, const std::vector<std::string>& prefixes) {
  if (prefixes.empty()) return true;
  for (const auto& p : prefixes) {
    if (name.compare(0, p.size(), p) == 0) return true;
  }
  return false;
}

namespace {

// A tensor over the map's bytes that keeps the map alive; a copy where the file does not align the
// tensor to its element size.
torch::Tensor mapped_tensor(const std::shared_ptr<st::File>& file, const st::TensorInfo& info) {
  const c10::ScalarType dtype = to_scalar_type(info.dtype);
  if (info.nbytes() == 0) return torch::empty(info.shape, torch::TensorOptions().dtype(dtype));
  std::byte* data = file->mutable_data(info);
  if (reinterpret_cast<std::uintptr_t>(data) % c10::elementSize(dtype) != 0) return read_tensor(*file, info);
  return torch::from_blob(data, info.shape, [keep = file](void*) {}, torch::TensorOptions().dtype(dtype));
}

}  // namespace

SafetensorsWeightStream::SafetensorsWeightStream(const std::string& path,
                                                 std::vector<std::string> only,
                                                 std::set<std::string> names, StreamReads reads)
    : m_file(std::make_shared<st::File>(st::File::open(
          path, reads == StreamReads::mapped ? st::Mapping::copy_on_write : st::Mapping::read_only))),
      m_reads(reads),
      m_only(std::move(only)),
      m_names(std::move(names)) {}

std::optional<NamedTensor> SafetensorsWeightStream::next() {
  const auto& infos = m_file->tensors();
  while (m_next < infos.size()) {
    const auto& info = infos[m_next++];
    if (!matches_any_prefix(info.name, m_only)) continue;
    if (!m_names.empty() && !m_names.count(info.name)) continue;
    return NamedTensor{info.name, m_reads == StreamReads::mapped ? mapped_tensor(m_file, info)
                                                                 : read_tensor(*m_file, info)};
  }
  return std::nullopt;
}

std::string SafetensorsWeightStream::source() const {
  return fmt::format("checkpoint '{}'", m_file->path());
}

std::optional<NamedTensor> TensorListWeightStream::next() {
  if (m_next >= m_tensors.size()) return std::nullopt;
  return m_tensors[m_next++];
}

}  // namespace graphcheck
