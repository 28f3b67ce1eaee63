// The safetensors writer: write() checks the tensors, orders them so that each stays aligned,
// encodes the header and writes the file atomically (support/atomic_file.h). The reader is
// safetensors.cpp. Torch-free.

#include "graphcheck/safetensors.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "formats/safetensors_detail.h"
#include "support/atomic_file.h"

namespace graphcheck::safetensors {

using detail::fail;
using detail::format_shape;
using detail::k_metadata_key;
using detail::tensor_label;

namespace {

void put_le64(std::string& out, std::uint64_t value) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

// The header keeps the order write() gives the tensors; the reader's plain json would sort them
// by name (see the note on Json in safetensors.cpp).
using OrderedJson = nlohmann::ordered_json;

}  // namespace

void write(const std::string& path, const std::vector<TensorView>& tensors,
           const std::map<std::string, std::string>& metadata,
           Durability durability) {
  std::set<std::string_view> names;
  for (const TensorView& tensor : tensors) {
    const std::string label = tensor_label(tensor.name);
    if (tensor.name.empty()) fail(path, "cannot write a tensor with an empty name");
    if (tensor.name == k_metadata_key) {
      fail(path,
           "cannot write a tensor named \"__metadata__\": the name is reserved for the "
           "metadata map; rename the tensor");
    }
    if (!names.insert(tensor.name).second) {
      fail(path, "cannot write " + label + " twice (duplicate name); names must be unique");
    }
    (void)dtype_size(tensor.dtype);  // throws for an out-of-range enum value
    const auto numel = checked_numel(tensor.shape);
    if (!numel) {
      fail(path, "cannot write " + label + ": shape " + format_shape(tensor.shape) +
                     " has a negative dim or its element count overflows");
    }
    std::uint64_t expected = 0;
    if (__builtin_mul_overflow(static_cast<std::uint64_t>(*numel),
                               static_cast<std::uint64_t>(dtype_size(tensor.dtype)), &expected) ||
        expected != tensor.nbytes) {
      fail(path, "cannot write " + label + ": shape " + format_shape(tensor.shape) + " of " +
                     std::string(dtype_name(tensor.dtype)) + " needs numel * dtype_size = " +
                     std::to_string(*numel) + " * " + std::to_string(dtype_size(tensor.dtype)) +
                     " bytes but nbytes is " + std::to_string(tensor.nbytes));
    }
    if (tensor.nbytes > 0 && tensor.data == nullptr) {
      fail(path, "cannot write " + label + ": data is null but nbytes is " +
                     std::to_string(tensor.nbytes));
    }
  }

  // Largest element size first keeps every tensor aligned to its element size (all sizes are
  // powers of two and the data section starts 8-byte aligned).
  std::vector<const TensorView*> order;
  order.reserve(tensors.size());
  for (const TensorView& tensor : tensors) order.push_back(&tensor);
  std::stable_sort(order.begin(), order.end(), [](const TensorView* a, const TensorView* b) {
    return dtype_size(a->dtype) > dtype_size(b->dtype);
  });

  // The header's text, entry by entry: what dumping one ordered_json object gives, without
  // building it (ordered_json finds a key by a linear search, so an object of n tensors took n^2/2
  // string compares: 6% of synthesizing a 10,000-tensor checkpoint, issue 26). Names are unique
  // (checked above); dump() escapes them and refuses invalid UTF-8.
  std::string prefix;
  try {
    std::string text = "{";
    const auto member = [&](const std::string& key, const OrderedJson& value) {
      if (text.size() > 1) text += ',';
      text += OrderedJson(key).dump();
      text += ':';
      text += value.dump();
    };
    if (!metadata.empty()) {
      OrderedJson meta = OrderedJson::object();
      for (const auto& [key, value] : metadata) meta[key] = value;
      member(std::string(k_metadata_key), meta);
    }
    std::uint64_t offset = 0;
    for (const TensorView* tensor : order) {
      OrderedJson entry = OrderedJson::object();
      entry["dtype"] = std::string(dtype_name(tensor->dtype));
      entry["shape"] = tensor->shape;
      entry["data_offsets"] = {offset, offset + tensor->nbytes};
      member(tensor->name, entry);
      offset += tensor->nbytes;
    }
    text += '}';
    text.append((8 - text.size() % 8) % 8, ' ');  // data section starts 8-byte aligned
    put_le64(prefix, text.size());
    prefix += text;
  } catch (const nlohmann::json::exception& e) {
    fail(path, "cannot encode the header (" + std::string(e.what()) +
                   "): tensor names and metadata must be valid UTF-8");
  }

  // Note: the atomic write's one home is support/atomic_file.h; its errors are this file's.
  try {
    AtomicFile file(path);
    file.write(prefix.data(), prefix.size());
    for (const TensorView* tensor : order) file.write(tensor->data, tensor->nbytes);
    file.commit(durability == Durability::durable);
  } catch (const std::runtime_error& e) {
    fail(path, e.what());
  }
}

}  // namespace graphcheck::safetensors
