// at::parallel_for for the host kernels (`src/libtorch/parallel.rs`): libtorch's own thread pool,
// so `--threads` governs them as it governs libtorch's ops, and a call from inside a parallel
// region (or with one thread) runs inline.
#include <ATen/Parallel.h>

#include <cstdint>

extern "C" void tchseq_parallel_for(int64_t begin, int64_t end, int64_t grain, void (*body)(void*, int64_t, int64_t),
                                    void* context) {
  at::parallel_for(begin, end, grain, [&](int64_t b, int64_t e) { body(context, b, e); });
}
