// The CUDA caching allocator's peak statistics (what torch.cuda.max_memory_allocated and
// max_memory_reserved read), through c10's device-generic allocator interface: no CUDA header
// is needed, and without libtorch_cuda there is no CUDA allocator to ask.
#include <c10/core/CachingDeviceAllocator.h>
#include <cstdint>

extern "C" {

// 1 and the peaks in bytes, or 0 when no CUDA allocator is registered or initialized.
int tchseq_cuda_peak_memory(int device, int64_t* allocated, int64_t* reserved) {
  try {
    auto* allocator = c10::getDeviceAllocator(c10::DeviceType::CUDA);
    if (allocator == nullptr || !allocator->initialized()) return 0;
    auto stats = allocator->getDeviceStats(static_cast<c10::DeviceIndex>(device));
    auto aggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    *allocated = stats.allocated_bytes[aggregate].peak;
    *reserved = stats.reserved_bytes[aggregate].peak;
    return 1;
  } catch (...) {
    return 0;
  }
}
}
