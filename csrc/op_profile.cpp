// Counts libtorch's operator calls and their time through a global RecordFunction callback,
// for `TCHSEQ_OP_PROFILE` (src/libtorch/op_profile.rs). Self time excludes the ops an op calls.
#include <ATen/record_function.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct Totals {
  uint64_t calls = 0, top_level_calls = 0, total_ns = 0, self_ns = 0;
};

struct Frame {
  std::string name;
  uint64_t start_ns, child_ns;
};

std::mutex mutex;
std::map<std::string, Totals> totals;
thread_local std::vector<Frame> stack;
at::CallbackHandle handle = 0;

uint64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction& fn) {
  stack.push_back(Frame{fn.name(), now_ns(), 0});
  return nullptr;
}

void on_exit(const at::RecordFunction&, at::ObserverContext*) {
  if (stack.empty()) return;
  Frame frame = std::move(stack.back());
  stack.pop_back();
  uint64_t total = now_ns() - frame.start_ns;
  if (!stack.empty()) stack.back().child_ns += total;
  std::lock_guard<std::mutex> lock(mutex);
  Totals& t = totals[frame.name];
  t.calls += 1;
  t.top_level_calls += stack.empty() ? 1 : 0;
  t.total_ns += total;
  t.self_ns += total > frame.child_ns ? total - frame.child_ns : 0;
}

}  // namespace

extern "C" {

void tchseq_op_profile_start() {
  if (handle != 0) return;
  handle = at::addGlobalCallback(at::RecordFunctionCallback(on_enter, on_exit).scopes({at::RecordScope::FUNCTION}));
}

// Writes `name\tcalls\ttop_level_calls\ttotal_ns\tself_ns` lines into a malloc'd string the
// caller frees with tchseq_op_profile_free.
char* tchseq_op_profile_report() {
  std::string out;
  {
    std::lock_guard<std::mutex> lock(mutex);
    for (const auto& [name, t] : totals) {
      out += name + "\t" + std::to_string(t.calls) + "\t" + std::to_string(t.top_level_calls) + "\t" +
             std::to_string(t.total_ns) + "\t" + std::to_string(t.self_ns) + "\n";
    }
  }
  char* copy = static_cast<char*>(malloc(out.size() + 1));
  if (copy) memcpy(copy, out.c_str(), out.size() + 1);
  return copy;
}

void tchseq_op_profile_free(char* report) { free(report); }
}
