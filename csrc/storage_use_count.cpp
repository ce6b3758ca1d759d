// How many tensors share a tensor's storage (views included), for reusing a buffer only once
// nothing else holds it (`src/libtorch/reuse.rs`).
#include <ATen/core/Tensor.h>

#include <cstdint>

extern "C" int64_t tchseq_storage_use_count(const at::Tensor* t) {
  return t->has_storage() ? static_cast<int64_t>(t->storage().use_count()) : -1;
}
