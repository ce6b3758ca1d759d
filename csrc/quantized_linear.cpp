// fbgemm's dynamically quantized linear layer (`quantized::linear_prepack` and
// `quantized::linear_dynamic`, what torch.ao's dynamic Linear calls), for
// `--compute-type int8`. tch has no binding for these ops: they are called through the
// dispatcher, boxed. Errors come back as a malloc'ed message for Rust to free.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>

#include <cstdlib>
#include <cstring>
#include <exception>

namespace {
char* message(const char* text) {
  char* copy = static_cast<char*>(std::malloc(std::strlen(text) + 1));
  if (copy) std::strcpy(copy, text);
  return copy;
}

c10::OperatorHandle op(const char* name, const char* overload = "") {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
}

// torch 2.13 warns once per process that quantized tensors are deprecated; the CLI's stderr is
// for the user's errors.
struct Quiet : c10::WarningHandler {
  void process(const c10::Warning&) override {}
};
}  // namespace

extern "C" {

// Quantizes an f32 weight [out, in] per output row (qint8, `scales` [out], zero points 0) and
// packs it with an optional f32 bias [out].
void* tchseq_linear_prepack(const at::Tensor* weight, const at::Tensor* scales, const at::Tensor* zero_points,
                            const at::Tensor* bias, char** error) {
  try {
    static const c10::OperatorHandle quantize = op("aten::quantize_per_channel");
    static const c10::OperatorHandle prepack = op("quantized::linear_prepack");
    Quiet quiet;
    c10::WarningUtils::WarningHandlerGuard guard(&quiet);
    torch::jit::Stack stack{*weight, *scales, *zero_points, int64_t{0}, c10::ScalarType::QInt8};
    quantize.callBoxed(&stack);
    stack = {std::move(stack.at(0)), bias ? c10::IValue(*bias) : c10::IValue()};
    prepack.callBoxed(&stack);
    return new c10::IValue(std::move(stack.at(0)));
  } catch (const std::exception& e) {
    *error = message(e.what());
    return nullptr;
  }
}

// y = x W^T + b with x quantized on the fly (per tensor, u8), int8 GEMM, f32 out.
at::Tensor* tchseq_linear_dynamic(const at::Tensor* x, const void* packed, bool reduce_range, char** error) {
  try {
    static const c10::OperatorHandle linear = op("quantized::linear_dynamic");
    torch::jit::Stack stack{*x, *static_cast<const c10::IValue*>(packed), reduce_range};
    linear.callBoxed(&stack);
    return new at::Tensor(stack.at(0).toTensor());
  } catch (const std::exception& e) {
    *error = message(e.what());
    return nullptr;
  }
}

void tchseq_linear_packed_free(void* packed) { delete static_cast<c10::IValue*>(packed); }

void tchseq_error_free(char* error) { std::free(error); }
}
