// at::cuda::CUDAGraph for a replayed decoder step (src/libtorch/cuda_graph.rs).
//
// Built as a shared object of its own, never linked: its CUDA symbols (at::cuda, c10::cuda and
// the CUDA runtime) resolve against the libtorch_cuda the program loads at run time, with
// RTLD_GLOBAL, before this object is opened. Every entry point catches what it calls and
// returns 0 on success or -1 with the message written to `error`.
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstring>
#include <exception>
#include <optional>

namespace {

struct StepGraph {
  at::cuda::CUDAGraph graph;
  // the graph's own memory pool, kept so that a broken capture can end allocating to it
  c10::MempoolId_t pool{0, 0};
  c10::DeviceIndex device = 0;
  // the side stream the capture runs on, current from capture_begin to capture_end
  std::optional<c10::cuda::CUDAStreamGuard> capture_stream;
};

int fail(const char* message, char* error, size_t error_len) {
  if (error != nullptr && error_len > 0) {
    std::strncpy(error, message, error_len - 1);
    error[error_len - 1] = '\0';
  }
  return -1;
}

// Ends a capture an operation broke, so that neither the stream nor the caching allocator stays
// in capture mode; restores the stream that was current before.
void abandon_capture(StepGraph* g) {
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(g->device).stream();
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
    cudaGraph_t broken = nullptr;
    cudaStreamEndCapture(stream, &broken);
    if (broken != nullptr) cudaGraphDestroy(broken);
  }
  // an invalidated capture leaves its error as the thread's last one
  (void)cudaGetLastError();
  try {
    c10::cuda::CUDACachingAllocator::endAllocateToPool(g->device, g->pool);
  } catch (...) {
    // capture_end got as far as ending it
  }
  g->capture_stream.reset();
}

}  // namespace

extern "C" {

void* tchseq_cuda_graph_new() {
  try {
    return new StepGraph();
  } catch (...) {
    return nullptr;
  }
}

void tchseq_cuda_graph_free(void* graph) {
  try {
    delete static_cast<StepGraph*>(graph);
  } catch (...) {
  }
}

// Waits for the work queued on `device`, makes a side stream current and begins capturing into
// the graph's own pool (thread-local capture: other threads' CUDA calls are not ours to break).
int tchseq_cuda_graph_capture_begin(void* graph, int device, char* error, size_t error_len) {
  auto* g = static_cast<StepGraph*>(graph);
  try {
    g->device = static_cast<c10::DeviceIndex>(device);
    g->pool = at::cuda::graph_pool_handle();
    c10::cuda::CUDAGuard device_guard(g->device);
    c10::cuda::device_synchronize();
    g->capture_stream.emplace(c10::cuda::getStreamFromPool(false, g->device));
    g->graph.capture_begin(g->pool, cudaStreamCaptureModeThreadLocal);
    return 0;
  } catch (const std::exception& e) {
    abandon_capture(g);
    return fail(e.what(), error, error_len);
  } catch (...) {
    abandon_capture(g);
    return fail("unknown error in capture_begin", error, error_len);
  }
}

// Ends the capture and instantiates the graph; restores the stream current before the capture.
int tchseq_cuda_graph_capture_end(void* graph, char* error, size_t error_len) {
  auto* g = static_cast<StepGraph*>(graph);
  try {
    g->graph.capture_end();
    g->capture_stream.reset();
    return 0;
  } catch (const std::exception& e) {
    abandon_capture(g);
    return fail(e.what(), error, error_len);
  } catch (...) {
    abandon_capture(g);
    return fail("unknown error in capture_end", error, error_len);
  }
}

// For a capture an operation failed inside: ends it without a graph.
void tchseq_cuda_graph_capture_abort(void* graph) {
  try {
    abandon_capture(static_cast<StepGraph*>(graph));
  } catch (...) {
  }
}

// Launches the graph on the current stream.
int tchseq_cuda_graph_replay(void* graph, char* error, size_t error_len) {
  auto* g = static_cast<StepGraph*>(graph);
  try {
    c10::cuda::CUDAGuard device_guard(g->device);
    g->graph.replay();
    return 0;
  } catch (const std::exception& e) {
    return fail(e.what(), error, error_len);
  } catch (...) {
    return fail("unknown error in replay", error, error_len);
  }
}
}
