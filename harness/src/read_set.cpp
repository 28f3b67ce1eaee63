#include "read_set.h"

namespace graphcheck {

void resolve_read_set_names(std::vector<ReadSetEntry>& read_set,
                            const std::vector<NamedTensor>& live) {
  for (auto& entry : read_set) {
    const c10::StorageImpl* storage = entry.storage.unsafeGetStorageImpl();
    const NamedTensor* same_storage = nullptr;
    const NamedTensor* exact = nullptr;
    for (const auto& t : live) {
      if (!t.tensor.defined() || !t.tensor.has_storage()) continue;
      if (t.tensor.storage().unsafeGetStorageImpl() != storage) continue;
      if (!same_storage) same_storage = &t;
      if (t.tensor.storage_offset() == entry.storage_offset &&
          t.tensor.sizes().vec() == entry.sizes && t.tensor.strides().vec() == entry.strides) {
        exact = &t;
        break;
      }
    }
    if (exact) {
      entry.name = exact->name;
      entry.is_view = false;
    } else if (same_storage) {
      entry.name = same_storage->name;
      entry.is_view = true;
    }
  }
}

}  // namespace graphcheck
