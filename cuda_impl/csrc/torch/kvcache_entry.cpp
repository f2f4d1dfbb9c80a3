// The decode call as one compiled torch op, "cuda_fa_native::kvcache_decode": the per-call checks of
// compare/kvcache.py (compare/csrc/kvcache_checks.h), the split plan's lookup, the allocations and the launch
// (csrc/fwd_decode.cu, fwd_mla_decode.cu through their C entries), without the Python layers that cost a decode
// step most of its host time. It takes a call only when every check passes and the call's plan was computed before
// by the Python path (cuda_impl/decode.py, which remembers it here); otherwise it returns undefined tensors (None
// in Python) and cuda_impl.attention_with_kvcache runs the Python path, which raises the precise error or
// computes the plan.
// So the Python path stays the one definition of what is accepted: this file accepts a subset of it.
//
// Built against the running torch's headers (cuda_impl/native.py); torch's C++ ABI is not stable across
// versions, unlike the ctypes surface of the kernels' library. Only libc10 and libtorch_cpu are linked (the current
// stream: compare/csrc/decode_entry.h).
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <tuple>
#include <vector>

#include "../decode/params_abi.h"
#include "decode_entry.h"
#include "kvcache_checks.h"

namespace {

using DecodeEntry = int (*)(const DecodeParams*, void* stream, char* err, int err_len);
constexpr int ERR_LEN = 512;
constexpr int32_t E4M3_CODE = 2;  // FA_DTYPE_E4M3, cuda_impl._lib.E4M3_CODE

// What the Python side declares (cuda_impl/native.py configure): what the decode kernels take (the rules of the
// checks) and the two C entries.
struct Config {
  kvcache_checks::Rules rules;
  DecodeEntry decode = nullptr, mla = nullptr;
};
std::atomic<const Config*> config{nullptr};

// A plan is what cuda_impl/decode.py's _plan computes from the key's fields: (chunks, keys per chunk, window sides
// as the kernel takes them).
constexpr int KEY_FIELDS = 14;
using PlanKey = std::array<int64_t, KEY_FIELDS>;
struct Plan {
  int32_t splits, split_keys, left, right;
};
constexpr size_t PLAN_CACHE_SIZE = 4096;  // as decode.py's
decode_entry::PreparedCalls<PlanKey, Plan> plans(PLAN_CACHE_SIZE);
std::atomic<int64_t> taken{0};  // calls launched here (the tests and benchmarks ask which path ran)

int32_t dtype_code(at::ScalarType t) {
  return t == at::kBFloat16 ? 0 : t == at::kHalf ? 1 : -1;
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
  const kvcache_checks::Call& c = *checked;
  // MLA's latent cache: V the first columns of K's rows (cuda_impl._check_latent), 16-bit, no window.
  if (c.mla && (c.fp8 || v.const_data_ptr() != k.const_data_ptr() || v.strides() != k.strides() ||
                window_left != -1 || window_right != -1))
    return NOT_TAKEN;
  const int32_t dtype = dtype_code(q.scalar_type());
  const c10::Device device = q.device();
  const int64_t batch = c.batch, seqlen_q = c.seqlen_q, heads_q = c.heads_q, head_dim_v = c.head_dim_v;
  const bool fp8 = c.fp8;

  // The plan: remembered by the Python path after a call of this key passed all of its checks (the device's
  // architecture, the kernels' shape table) and was planned.
  const PlanKey key{batch, seqlen_q, heads_q, c.head_dim, dtype, device.index(), c.heads_kv, head_dim_v, c.capacity,
                    fp8, num_splits.value_or(-1), split_size.value_or(-1), window_left, window_right};
  const std::optional<Plan> found = plans.find(key);
  if (!found) return NOT_TAKEN;
  const Plan plan = *found;

  const c10::DeviceGuard guard(device);
  at::Tensor out = at::empty({batch, seqlen_q, heads_q, head_dim_v}, q.options());
  at::Tensor lse = at::empty({batch, heads_q, seqlen_q}, q.options().dtype(at::kFloat));
  at::Tensor workspace;
  if (plan.splits > 1)
    workspace = at::empty({int64_t(plan.splits) * batch * heads_q * seqlen_q * (head_dim_v + 1)},
                          q.options().dtype(at::kFloat));

  // The same block cuda_impl._lib.launch_decode packs: a contiguous cache is one page per sequence.
  DecodeParams p{};
  p.q = q.const_data_ptr();
  p.k = k.const_data_ptr();
  p.v = v.const_data_ptr();
  p.out = out.mutable_data_ptr();
  p.lse = lse.mutable_data_ptr<float>();
  p.block_table = table.has_value() ? table->const_data_ptr<int32_t>() : nullptr;
  p.seqlens = seqlens.const_data_ptr<int32_t>();
  p.k_descale = fp8 ? k_descale->const_data_ptr<float>() : nullptr;
  p.v_descale = fp8 ? v_descale->const_data_ptr<float>() : nullptr;
  p.workspace = plan.splits > 1 ? workspace.mutable_data_ptr<float>() : nullptr;
  for (int d = 0; d < 3; d++) {
    p.q_stride[d] = q.stride(d);
    p.k_stride[d] = k.stride(d);
    p.v_stride[d] = v.stride(d);
  }
  p.block_table_stride = table.has_value() ? table->stride(0) : 0;
  p.batch = int32_t(batch);
  p.seqlen_q = int32_t(seqlen_q);
  p.heads_q = int32_t(heads_q);
  p.heads_kv = int32_t(c.heads_kv);
  p.head_dim = int32_t(c.head_dim);
  p.head_dim_v = int32_t(head_dim_v);
  p.page_size = int32_t(std::max<int64_t>(1, c.rows));
  p.num_pages = int32_t(c.blocks);
  p.max_pages = int32_t(c.paged ? c.max_pages : int64_t(c.rows > 0));
  p.num_splits = plan.splits;
  p.split_keys = plan.split_keys;
  p.scale = float(c.scale);
  p.causal = causal;
  p.dtype = dtype;
  p.kv_dtype = fp8 ? E4M3_CODE : dtype;
  p.window_left = plan.left;
  p.window_right = plan.right;

  char err[ERR_LEN] = {0};
  const int rc = (c.mla ? cfg->mla : cfg->decode)(&p, decode_entry::current_stream(device), err, ERR_LEN);
  TORCH_CHECK(rc == 0, "cuda_impl decode: ", err);
  taken.fetch_add(1, std::memory_order_relaxed);
  return {out, lse};
}

void configure(std::vector<std::string> dtypes, std::vector<int64_t> head_dims, std::vector<int64_t> head_dim_pairs,
               std::vector<int64_t> page_sizes, int64_t max_seqlen_q, int64_t split_multiple, int64_t decode_entry,
               int64_t mla_entry, c10::string_view device_type) {
  TORCH_CHECK(decode_entry != 0 && mla_entry != 0, "the decode entries' addresses");
  kvcache_checks::Rules rules = kvcache_checks::make_rules(dtypes, std::move(head_dims), std::move(head_dim_pairs),
                                                           std::move(page_sizes), max_seqlen_q, split_multiple,
                                                           device_type);
  for (at::ScalarType dtype : rules.dtypes)
    TORCH_CHECK(dtype_code(dtype) >= 0, "configure: the decode kernels do not take dtype ", dtype);
  static std::mutex once;
  std::lock_guard<std::mutex> lock(once);
  // Kept for the process's life: a call in flight may hold the previous one.
  config.store(new Config{std::move(rules), reinterpret_cast<DecodeEntry>(decode_entry),
                          reinterpret_cast<DecodeEntry>(mla_entry)},
               std::memory_order_release);
}

void remember_plan(std::vector<int64_t> key, int64_t splits, int64_t split_keys, int64_t left, int64_t right) {
  TORCH_CHECK(key.size() == KEY_FIELDS, "remember_plan: a key of ", KEY_FIELDS, " fields, got ", key.size());
  PlanKey k;
  std::copy(key.begin(), key.end(), k.begin());
  plans.put(k, Plan{int32_t(splits), int32_t(split_keys), int32_t(left), int32_t(right)});
}

int64_t plan_count() { return plans.size(); }

int64_t taken_count() { return taken.load(std::memory_order_relaxed); }

void forget_plans() { plans.clear(); }

}  // namespace

TORCH_LIBRARY(cuda_fa_native, m) {
  m.def(decode_entry::KVCACHE_DECODE_SCHEMA);
  // CompositeImplicitAutograd: the kernel runs at the first dispatch key, whatever the device; callers keep
  // tensors that need grad, tensor subclasses and torch modes on the Python path (cuda_impl/native.py).
  m.impl("kvcache_decode", c10::DispatchKey::CompositeImplicitAutograd, TORCH_FN(kvcache_decode));
  m.def("configure(str[] dtypes, int[] head_dims, int[] head_dim_pairs, int[] page_sizes, int max_seqlen_q, "
        "int split_multiple, int decode_entry, int mla_entry, str device_type) -> ()", TORCH_FN(configure));
  m.def("remember_plan(int[] key, int splits, int split_keys, int left, int right) -> ()", TORCH_FN(remember_plan));
  m.def("plan_count() -> int", TORCH_FN(plan_count));
  m.def("forget_plans() -> ()", TORCH_FN(forget_plans));
  m.def("taken_count() -> int", TORCH_FN(taken_count));
}
