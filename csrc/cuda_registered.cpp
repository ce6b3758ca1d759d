// Whether CUDA's device support is registered in this process. libc10_cuda registers it when it
// is loaded (linked, or dlopened with libtorch_cuda), whether or not a GPU is present.
#include <c10/core/impl/DeviceGuardImplInterface.h>

extern "C" {

int tchseq_cuda_registered() { return c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA) ? 1 : 0; }
}
