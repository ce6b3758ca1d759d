// Tensors over a checkpoint's mapped bytes (src/checkpoint/file_storage.rs). Each storage's data
// pointer carries its owner's context, which Rust releases when the storage lets go of the bytes.
// A list of weak references finds the storages still alive when loading is done, and moves each
// one's bytes into libtorch's own allocation, under every tensor that views it.
#include <ATen/core/Tensor.h>
#include <ATen/ops/from_blob.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/StorageImpl.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <vector>

namespace {
char* message(const char* text) {
  char* copy = static_cast<char*>(std::malloc(std::strlen(text) + 1));
  if (copy) std::strcpy(copy, text);
  return copy;
}
// `memcpy`, a few MB at a time, handing each part's file pages back once copied: a large
// storage (an embedding table) is then never held twice. Only pages wholly inside the storage
// are handed back (its neighbours' bytes share the others); the source still reads as the file.
void copy_releasing(char* to, const char* from, size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t chunk = size_t{4} << 20;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(from);
  uintptr_t released = (begin + page - 1) / page * page;
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(chunk, bytes - done);
    std::memcpy(to + done, from + done, n);
    done += n;
    const uintptr_t last = (begin + done) / page * page;
    if (last > released) {
      madvise(reinterpret_cast<void*>(released), last - released, MADV_DONTNEED);
      released = last;
    }
  }
}
}  // namespace

struct FileStorage {
  c10::weak_intrusive_ptr<c10::StorageImpl> storage;
  const void* data;  // where it was made, in the mapping
};

struct TchseqFileStorages {
  std::vector<FileStorage> storages;
};

extern "C" {

TchseqFileStorages* tchseq_file_storages_new() { return new (std::nothrow) TchseqFileStorages(); }

// A 1-D tensor of `numel` elements of `scalar_type` over `data`; `release(context)` runs once,
// when its storage no longer needs the bytes, or at once on an error.
at::Tensor* tchseq_file_storages_tensor(TchseqFileStorages* list, void* data, int64_t numel, int8_t scalar_type,
                                        void* context, void (*release)(void*), char** error) {
  bool handed = false;
  try {
    list->storages.reserve(list->storages.size() + 1);
    // from here on the maker, then the storage, owns `context`
    handed = true;
    at::Tensor t = at::for_blob(data, {numel})
                       .context(context, release)
                       .options(at::TensorOptions().dtype(static_cast<c10::ScalarType>(scalar_type)).device(at::kCPU))
                       .make_tensor();
    list->storages.push_back(FileStorage{t.storage().getWeakStorageImpl(), data});
    return new at::Tensor(std::move(t));
  } catch (const std::exception& e) {
    if (!handed) release(context);
    *error = message(e.what());
    return nullptr;
  }
}

// Moves the bytes of every storage still alive into libtorch's allocator and forgets them all.
// Returns how many could not be moved (they stay over the file, which stays mapped for them).
int64_t tchseq_file_storages_detach(TchseqFileStorages* list) {
  int64_t failed = 0;
  for (auto& made : list->storages) {
    c10::intrusive_ptr<c10::StorageImpl> storage = made.storage.lock();
    // gone, or no longer over the file (nothing here swaps a storage's bytes but `detach`)
    if (!storage || storage->data() != made.data) continue;
    try {
      const size_t bytes = storage->nbytes();
      at::DataPtr fresh = c10::GetCPUAllocator()->allocate(bytes);
      copy_releasing(static_cast<char*>(fresh.get()), static_cast<const char*>(storage->data()), bytes);
      storage->set_data_ptr_noswap(std::move(fresh));
    } catch (const std::exception&) {
      ++failed;
    }
  }
  list->storages.clear();
  return failed;
}

// Moves `tensor`'s storage into libtorch's own allocation when its bytes belong to something
// else (a checkpoint's mapping: the data pointer's context is then its owner, not the bytes), so
// that writing it fills memory of its own rather than copying the file's pages one fault at a
// time. Returns false with `error` set when it could not.
bool tchseq_storage_own(const at::Tensor* tensor, char** error) {
  try {
    c10::StorageImpl* storage = tensor->storage().unsafeGetStorageImpl();
    if (storage == nullptr || storage->data_ptr().get_context() == storage->data()) return true;
    const size_t bytes = storage->nbytes();
    at::DataPtr fresh = c10::GetCPUAllocator()->allocate(bytes);
    copy_releasing(static_cast<char*>(fresh.get()), static_cast<const char*>(storage->data()), bytes);
    storage->set_data_ptr_noswap(std::move(fresh));
    return true;
  } catch (const std::exception& e) {
    *error = message(e.what());
    return false;
  }
}

void tchseq_file_storages_free(TchseqFileStorages* list) { delete list; }

}  // extern "C"
