// oneDNN's linear with a weight reordered once into its blocked layout
// (`mkldnn::_reorder_linear_weight`, `mkldnn::_linear_pointwise`: what inductor's CPU weight
// prepacking calls), for `--compute-type float32`. MKL's sgemm copies the weight into its panel
// layout on every call; this does it once. tch has no binding for these ops: they are called
// through the dispatcher, boxed. Errors come back as a malloc'ed message for Rust to free.
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

c10::OperatorHandle op(const char* name) { return c10::Dispatcher::singleton().findSchemaOrThrow(name, ""); }
}  // namespace

extern "C" {

// The f32 weight [out, in] in oneDNN's layout (an opaque mkldnn tensor).
at::Tensor* tchseq_onednn_reorder_weight(const at::Tensor* weight, char** error) {
  try {
    static const c10::OperatorHandle reorder = op("mkldnn::_reorder_linear_weight");
    torch::jit::Stack stack{*weight, c10::IValue()};
    reorder.callBoxed(&stack);
    return new at::Tensor(stack.at(0).toTensor());
  } catch (const std::exception& e) {
    *error = message(e.what());
    return nullptr;
  }
}

// y = x W^T + b, then ReLU when `relu`; x [..., in] dense f32.
at::Tensor* tchseq_onednn_linear(const at::Tensor* x, const at::Tensor* packed, const at::Tensor* bias, bool relu,
                                 char** error) {
  try {
    static const c10::OperatorHandle linear = op("mkldnn::_linear_pointwise");
    torch::jit::Stack stack{*x, *packed, bias ? c10::IValue(*bias) : c10::IValue(), std::string(relu ? "relu" : "none"),
                            c10::List<std::optional<at::Scalar>>(), std::string("")};
    linear.callBoxed(&stack);
    return new at::Tensor(stack.at(0).toTensor());
  } catch (const std::exception& e) {
    *error = message(e.what());
    return nullptr;
  }
}
}
