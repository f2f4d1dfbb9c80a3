// The decode call as one compiled torch op, "triton_fa_native::kvcache_decode": the per-call checks of
// compare/kvcache.py (compare/csrc/kvcache_checks.h), the lookup of the call's launches, the allocations and the
// launches of the compiled Triton kernels (split, and merge when the keys are split) through the driver's
// cuLaunchKernel, without the Python layers that cost a decode step most of its host time.
//
// A call's launches are what triton_impl/kernels/decode.py's Launch made of the first call of its key: for each
// kernel the CUfunction Triton loaded, the grid, the block, the shared memory and the kernel's parameters in order
// (which tensor a pointer is, the scale, the int arguments Triton did not fold into the kernel), recorded here by
// triton_impl/native.py after the Python path ran that call (`remember_launch`). The key is everything Triton
// specialised on: the tensors' shapes, strides, dtypes and 16-byte alignment, whether V is K's view, the options
// and the device. The op takes only calls whose checks pass and whose key was recorded; it returns undefined
// tensors (None in Python) otherwise, and triton_impl.attention_with_kvcache runs its Python path, which raises the
// precise error or compiles, launches and records.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <memory>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "decode_entry.h"
#include "kvcache_checks.h"

namespace {

// cuLaunchKernel's signature (cuda.h's types as plain ones: CUfunction and CUstream are pointers, CUresult an int).
using LaunchKernel = int (*)(void* function, unsigned grid_x, unsigned grid_y, unsigned grid_z, unsigned block_x,
                             unsigned block_y, unsigned block_z, unsigned shared_bytes, void* stream, void** params,
                             void** extra);

struct Config {
  kvcache_checks::Rules rules;
  LaunchKernel launch = nullptr;  // the driver's cuLaunchKernel (a recorder in the tests)
  double log2e = 0;               // the kernels take scale * log2(e), computed as kernels/decode.py does
};
std::atomic<const Config*> config{nullptr};

// The tensors a kernel parameter can point at (kernels/decode.py Launch.SLOTS): the call's seven inputs and the
// four tensors allocated here.
enum Slot : int64_t { Q, K, V, OUT, LSE, WS_O, WS_LSE, SEQLENS, TABLE, K_DESCALE, V_DESCALE, SLOTS };
// A parameter's kind, in remember_launch's list.
enum Kind : int64_t { POINTER = 0, SCALE = 1, I32 = 2, I64 = 3 };
constexpr int MAX_PARAMS = 96;
// Triton's kernels take two scratch pointers after their own parameters (global and profile scratch); the
// recorded kernels need neither (triton_impl/native.py records none that does), so both are null.
constexpr int SCRATCH_PARAMS = 2;

struct Param {
  Kind kind;
  int64_t value;  // POINTER: the slot; I32 / I64: the value
};
struct Kernel {
  void* function;
  std::array<uint32_t, 3> grid;
  uint32_t threads, shared_bytes;
  std::vector<Param> params;
};
struct Launches {
  std::vector<int64_t> out_shape, lse_shape, ws_o_shape, ws_lse_shape;  // ws_*: empty without a split
  std::vector<Kernel> kernels;
};

using Key = std::vector<int64_t>;
constexpr size_t CACHE_SIZE = 4096;  // as triton_impl/decode.py's prepared calls
decode_entry::PreparedCalls<Key, std::shared_ptr<const Launches>> launches(CACHE_SIZE);
std::atomic<int64_t> taken{0};  // calls launched here (the tests and benchmarks ask which path ran)

void add_tensor(Key& key, const at::Tensor& t) {
  key.push_back(int64_t(t.scalar_type()));
  key.push_back(t.dim());
  for (int64_t d = 0; d < t.dim(); d++) {
    key.push_back(t.size(d));
    key.push_back(t.stride(d));
  }
  key.push_back(reinterpret_cast<uintptr_t>(t.const_data_ptr()) % kvcache_checks::ALIGN_BYTES == 0);
}

void add_optional(Key& key, const std::optional<at::Tensor>& t) {
  if (t.has_value())
    add_tensor(key, *t);
  else
    key.push_back(-1);
}

// The window as triton_impl/decode.py launches it (its _window, then _decode_impl): causal sets the right side to 0,
// a side reaching past every row's keys is unbounded (-1). Applying it twice gives the same: remember_launch takes
// the window _decode_impl launched, the op the one the caller gave.
std::pair<int64_t, int64_t> launched_window(const at::Tensor& q, const at::Tensor& k,
                                            const std::optional<at::Tensor>& table, bool causal, int64_t left,
                                            int64_t right) {
  if (left == -1 && right == -1) return {-1, -1};
  if (causal) right = 0;
  const int64_t capacity = table.has_value() ? table->size(1) * k.size(1) : k.size(1);
  return {left >= capacity ? -1 : left, right >= q.size(1) - 1 ? -1 : right};
}

// Everything the recorded launches were made from but the tensors' addresses and the scale.
Key key_of(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& seqlens,
           const std::optional<at::Tensor>& table, const std::optional<at::Tensor>& k_descale,
           const std::optional<at::Tensor>& v_descale, bool causal, std::optional<int64_t> num_splits,
           std::optional<int64_t> split_size, int64_t window_left, int64_t window_right) {
  Key key;
  key.reserve(96);
  for (const at::Tensor* t : {&q, &k, &v, &seqlens}) add_tensor(key, *t);
  for (const auto* t : {&table, &k_descale, &v_descale}) add_optional(key, *t);
  key.push_back(v.const_data_ptr() == k.const_data_ptr());
  key.push_back(q.device().index());
  const auto [left, right] = launched_window(q, k, table, causal, window_left, window_right);
  for (int64_t x : {int64_t(causal), num_splits.value_or(-1), split_size.value_or(-1), left, right}) key.push_back(x);
  return key;
}

using Result = std::tuple<at::Tensor, at::Tensor>;
const Result NOT_TAKEN{};

Result kvcache_decode(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& seqlens,
                      const std::optional<at::Tensor>& table, const std::optional<at::Tensor>& k_descale,
                      const std::optional<at::Tensor>& v_descale, bool causal, std::optional<double> scale_arg,
                      std::optional<int64_t> num_splits, std::optional<int64_t> split_size, int64_t window_left,
                      int64_t window_right) {
  const Config* cfg = config.load(std::memory_order_acquire);
  if (cfg == nullptr) return NOT_TAKEN;
  const auto checked = kvcache_checks::check(cfg->rules, q, k, v, seqlens, table, k_descale, v_descale, scale_arg,
                                             num_splits, split_size, window_left, window_right);
  if (!checked) return NOT_TAKEN;
  const auto found = launches.find(
      key_of(q, k, v, seqlens, table, k_descale, v_descale, causal, num_splits, split_size, window_left, window_right));
  if (!found) return NOT_TAKEN;
  const std::shared_ptr<const Launches>& recorded = *found;

  const c10::DeviceGuard guard(q.device());
  const auto f32 = q.options().dtype(at::kFloat);
  at::Tensor out = at::empty(recorded->out_shape, q.options());
  at::Tensor lse = at::empty(recorded->lse_shape, f32);
  at::Tensor ws_o, ws_lse;
  if (!recorded->ws_o_shape.empty()) {
    ws_o = at::empty(recorded->ws_o_shape, f32);
    ws_lse = at::empty(recorded->ws_lse_shape, f32);
  }
  // An absent tensor's parameter points at lse (never dereferenced), as in kernels/decode.py.
  std::array<const void*, SLOTS> address{};
  address[Q] = q.const_data_ptr();
  address[K] = k.const_data_ptr();
  address[V] = v.const_data_ptr();
  address[OUT] = out.const_data_ptr();
  address[LSE] = lse.const_data_ptr();
  address[WS_O] = ws_o.defined() ? ws_o.const_data_ptr() : address[LSE];
  address[WS_LSE] = ws_lse.defined() ? ws_lse.const_data_ptr() : address[LSE];
  address[SEQLENS] = seqlens.const_data_ptr();
  address[TABLE] = table.has_value() ? table->const_data_ptr() : address[LSE];
  address[K_DESCALE] = k_descale.has_value() ? k_descale->const_data_ptr() : address[LSE];
  address[V_DESCALE] = v_descale.has_value() ? v_descale->const_data_ptr() : address[LSE];
  // The recorded launches were specialised on 16-byte-aligned outputs; torch's allocator gives more.
  for (Slot s : {OUT, LSE, WS_O, WS_LSE})
    if (reinterpret_cast<uintptr_t>(address[s]) % kvcache_checks::ALIGN_BYTES) return NOT_TAKEN;
  const float scale_log2 = float(checked->scale * cfg->log2e);

  void* stream = decode_entry::current_stream(q.device());
  // Each parameter's value in its own 8-byte slot (the driver reads its size from the kernel's parameter list).
  std::array<uint64_t, MAX_PARAMS + SCRATCH_PARAMS> values{};
  std::array<void*, MAX_PARAMS + SCRATCH_PARAMS> params{};
  for (const Kernel& kernel : recorded->kernels) {
    const size_t n = kernel.params.size();
    for (size_t i = 0; i < n; i++) {
      const Param& p = kernel.params[i];
      uint64_t& slot = values[i];
      slot = 0;
      switch (p.kind) {
        case POINTER: slot = reinterpret_cast<uintptr_t>(address[p.value]); break;
        case SCALE: std::memcpy(&slot, &scale_log2, sizeof(float)); break;
        case I32: {
          const int32_t x = int32_t(p.value);
          std::memcpy(&slot, &x, sizeof(x));
          break;
        }
        case I64: slot = uint64_t(p.value); break;
      }
      params[i] = &slot;
    }
    for (size_t i = n; i < n + SCRATCH_PARAMS; i++) {
      values[i] = 0;
      params[i] = &values[i];
    }
    const int rc = cfg->launch(kernel.function, kernel.grid[0], kernel.grid[1], kernel.grid[2], kernel.threads, 1, 1,
                               kernel.shared_bytes, stream, params.data(), nullptr);
    TORCH_CHECK(rc == 0, "triton_impl decode: cuLaunchKernel failed (CUresult ", rc, ")");
  }
  taken.fetch_add(1, std::memory_order_relaxed);
  return {out, lse};
}

void configure(std::vector<std::string> dtypes, std::vector<int64_t> head_dims, std::vector<int64_t> head_dim_pairs,
               std::vector<int64_t> page_sizes, int64_t max_seqlen_q, int64_t split_multiple, int64_t launch_entry,
               double log2e, c10::string_view device_type) {
  TORCH_CHECK(launch_entry != 0, "cuLaunchKernel's address");
  kvcache_checks::Rules rules = kvcache_checks::make_rules(dtypes, std::move(head_dims), std::move(head_dim_pairs),
                                                           std::move(page_sizes), max_seqlen_q, split_multiple,
                                                           device_type);
  static std::mutex once;
  std::lock_guard<std::mutex> lock(once);
  // Kept for the process's life: a call in flight may hold the previous one.
  config.store(new Config{std::move(rules), reinterpret_cast<LaunchKernel>(launch_entry), log2e},
               std::memory_order_release);
}

// shapes: out (4), lse (3), ws_o (5 or none), ws_lse (4 or none), as [n, d0, .., n, d0, ..]; kernels: for each,
// [function, grid x, y, z, threads, shared bytes, parameter count, (kind, value) per parameter].
void remember_launch(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& seqlens,
                     const std::optional<at::Tensor>& table, const std::optional<at::Tensor>& k_descale,
                     const std::optional<at::Tensor>& v_descale, bool causal, std::optional<int64_t> num_splits,
                     std::optional<int64_t> split_size, int64_t window_left, int64_t window_right,
                     std::vector<int64_t> shapes, std::vector<int64_t> kernels) {
  auto recorded = std::make_shared<Launches>();
  size_t at = 0;
  auto take = [&](const char* what) {
    TORCH_CHECK(at < shapes.size() + kernels.size(), "remember_launch: ", what, " cut short");
    return at < shapes.size() ? shapes[at++] : kernels[at++ - shapes.size()];
  };
  for (auto* shape : {&recorded->out_shape, &recorded->lse_shape, &recorded->ws_o_shape, &recorded->ws_lse_shape}) {
    const int64_t n = take("shapes");
    for (int64_t i = 0; i < n; i++) shape->push_back(take("shapes"));
  }
  TORCH_CHECK(at == shapes.size(), "remember_launch: ", shapes.size() - at, " shape values left over");
  while (at < shapes.size() + kernels.size()) {
    Kernel kernel;
    kernel.function = reinterpret_cast<void*>(take("kernel"));
    for (auto& g : kernel.grid) g = uint32_t(take("kernel"));
    kernel.threads = uint32_t(take("kernel"));
    kernel.shared_bytes = uint32_t(take("kernel"));
    const int64_t n = take("kernel");
    TORCH_CHECK(n >= 0 && n <= MAX_PARAMS, "remember_launch: ", n, " parameters (at most ", MAX_PARAMS, ")");
    for (int64_t i = 0; i < n; i++) {
      const int64_t kind = take("parameter"), value = take("parameter");
      TORCH_CHECK(kind >= POINTER && kind <= I64, "remember_launch: parameter kind ", kind);
      TORCH_CHECK(kind != POINTER || (value >= 0 && value < SLOTS), "remember_launch: pointer slot ", value);
      kernel.params.push_back(Param{Kind(kind), value});
    }
    recorded->kernels.push_back(std::move(kernel));
  }
  TORCH_CHECK(!recorded->kernels.empty(), "remember_launch: no kernel");
  launches.put(
      key_of(q, k, v, seqlens, table, k_descale, v_descale, causal, num_splits, split_size, window_left, window_right),
      std::move(recorded));
}

int64_t launch_count() { return launches.size(); }

int64_t taken_count() { return taken.load(std::memory_order_relaxed); }

void forget_launches() { launches.clear(); }

}  // namespace

TORCH_LIBRARY(triton_fa_native, m) {
  m.def(decode_entry::KVCACHE_DECODE_SCHEMA);
  // CompositeImplicitAutograd: the kernel runs at the first dispatch key, whatever the device; callers keep
  // tensors that need grad, tensor subclasses and torch modes on the Python path (triton_impl/native.py).
  m.impl("kvcache_decode", c10::DispatchKey::CompositeImplicitAutograd, TORCH_FN(kvcache_decode));
  m.def("configure(str[] dtypes, int[] head_dims, int[] head_dim_pairs, int[] page_sizes, int max_seqlen_q, "
        "int split_multiple, int launch_entry, float log2e, str device_type) -> ()", TORCH_FN(configure));
  m.def("remember_launch(Tensor q, Tensor k_cache, Tensor v_cache, Tensor cache_seqlens, Tensor? block_table, "
        "Tensor? k_descale, Tensor? v_descale, bool causal, int? num_splits, int? split_size, int window_left, "
        "int window_right, int[] shapes, int[] kernels) -> ()", TORCH_FN(remember_launch));
  m.def("launch_count() -> int", TORCH_FN(launch_count));
  m.def("forget_launches() -> ()", TORCH_FN(forget_launches));
  m.def("taken_count() -> int", TORCH_FN(taken_count));
}
