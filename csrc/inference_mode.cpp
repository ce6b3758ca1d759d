// c10::InferenceMode, which tch does not bind: no autograd or view/version bookkeeping on the
// ops of the calling thread until the guard is freed (the kernels, and so the bits, stay the same).
#include <c10/core/InferenceMode.h>

extern "C" {

void* tchseq_inference_mode_enter() { return new c10::InferenceMode(true); }

void tchseq_inference_mode_exit(void* guard) { delete static_cast<c10::InferenceMode*>(guard); }
}
