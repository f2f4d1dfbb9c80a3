// compare/kvcache.py's per-call checks of attention_with_kvcache (check_inputs, check_splits, resolve_scale) and
// compare/oracle.py's check_window, in C++ for the backends' compiled decode entries (cuda_impl/csrc/torch,
// triton_impl/csrc). A check here does not raise: the entries decline the call (the Python path then runs and
// raises the precise error), so what passes here must be a subset of what the Python checks pass.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <c10/util/string_view.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kvcache_checks {

constexpr int64_t ALIGN_BYTES = 16;  // compare/kvcache.py _ALIGN_BYTES

// What a backend takes (its VARIANTS["decode"] entry and compare/kvcache.py's constants), set once from Python.
struct Rules {
  std::vector<at::ScalarType> dtypes;                 // q's (and a 16-bit cache's) dtypes
  std::vector<int64_t> head_dims, head_dim_pairs;     // pairs flattened (d, dv, d, dv, ...)
  std::vector<int64_t> page_sizes;
  int64_t max_seqlen_q = 0, split_multiple = 0;
  c10::DeviceType device_type = c10::DeviceType::CUDA;  // CUDA; CPU in the tests, with stub launches
};

// "bfloat16", "float16", "float32" (str(dtype) without "torch."), the dtypes a decode path can take.
inline std::optional<at::ScalarType> dtype_named(const std::string& name) {
  if (name == "bfloat16") return at::kBFloat16;
  if (name == "float16") return at::kHalf;
  if (name == "float32") return at::kFloat;
  return std::nullopt;
}

// The rules from the entries' configure() arguments (compare/native_build.py rules()), dtypes by name.
inline Rules make_rules(const std::vector<std::string>& dtypes, std::vector<int64_t> head_dims,
                        std::vector<int64_t> head_dim_pairs, std::vector<int64_t> page_sizes, int64_t max_seqlen_q,
                        int64_t split_multiple, c10::string_view device_type) {
  TORCH_CHECK(head_dim_pairs.size() % 2 == 0, "head_dim_pairs: (d, dv) pairs, flattened");
  Rules rules{{}, std::move(head_dims), std::move(head_dim_pairs), std::move(page_sizes), max_seqlen_q,
              split_multiple, c10::Device(std::string(device_type)).type()};
  for (const std::string& name : dtypes) {
    const auto dtype = dtype_named(name);
    TORCH_CHECK(dtype, "configure: unknown dtype ", name);
    rules.dtypes.push_back(*dtype);
  }
  return rules;
}

// A call that passed every check, read off its tensors' shapes.
struct Call {
  int64_t batch, seqlen_q, heads_q, head_dim, heads_kv, head_dim_v;
  int64_t blocks, rows;  // k_cache.shape[0:2]: pages and page size, or batch and S_max
  int64_t capacity, max_pages;
  bool paged, fp8, mla;
  double scale;
};

inline bool contains(const std::vector<int64_t>& values, int64_t x) {
  return std::find(values.begin(), values.end(), x) != values.end();
}

// _check_rows: last dimension contiguous, every other stride of more than one element and the start 16-byte
// aligned.
inline bool rows_ok(const at::Tensor& x) {
  const auto shape = x.sizes();
  const auto stride = x.strides();
  if (stride[3] != 1 && shape[3] != 1) return false;
  const int64_t per_chunk = ALIGN_BYTES / int64_t(x.element_size());
  for (int d = 0; d < 3; d++)
    if (stride[d] % per_chunk && shape[d] > 1) return false;
  return reinterpret_cast<uintptr_t>(x.const_data_ptr()) % ALIGN_BYTES == 0;
}

inline bool on(const at::Tensor& x, int64_t dims, const c10::Device& device) {
  return x.dim() == dims && x.device() == device;
}

// The call's shape if every check of the Python path passes (and no tensor needs grad: those calls go through
// the backends' torch.library ops); std::nullopt otherwise. k_new / v_new calls never come here.
inline std::optional<Call> check(const Rules& rules, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const at::Tensor& seqlens, const std::optional<at::Tensor>& table,
                                 const std::optional<at::Tensor>& k_descale,
                                 const std::optional<at::Tensor>& v_descale, std::optional<double> scale_arg,
                                 std::optional<int64_t> num_splits, std::optional<int64_t> split_size,
                                 int64_t window_left, int64_t window_right) {
  if (q.dim() != 4 || q.device().type() != rules.device_type) return std::nullopt;
  const at::ScalarType dtype = q.scalar_type();
  if (std::find(rules.dtypes.begin(), rules.dtypes.end(), dtype) == rules.dtypes.end()) return std::nullopt;
  const c10::Device device = q.device();
  Call c{};
  c.batch = q.size(0), c.seqlen_q = q.size(1), c.heads_q = q.size(2), c.head_dim = q.size(3);
  if (c.seqlen_q < 1 || c.seqlen_q > rules.max_seqlen_q || c.batch < 1 || c.heads_q < 1) return std::nullopt;
  if (!on(k, 4, device) || !on(v, 4, device)) return std::nullopt;
  for (const at::Tensor* t : {&q, &k, &v, &seqlens})
    if (t->requires_grad()) return std::nullopt;
  for (const auto* t : {&table, &k_descale, &v_descale})
    if (t->has_value() && (*t)->requires_grad()) return std::nullopt;
  c.blocks = k.size(0), c.rows = k.size(1), c.heads_kv = k.size(2), c.head_dim_v = v.size(3);
  c.mla = c.head_dim_v != c.head_dim;
  if (c.mla) {
    bool pair = false;
    for (size_t i = 0; i + 1 < rules.head_dim_pairs.size(); i += 2)
      pair |= rules.head_dim_pairs[i] == c.head_dim && rules.head_dim_pairs[i + 1] == c.head_dim_v;
    if (!pair) return std::nullopt;
  } else if (!contains(rules.head_dims, c.head_dim)) {
    return std::nullopt;
  }
  if (v.size(0) != c.blocks || v.size(1) != c.rows || v.size(2) != c.heads_kv || k.size(3) != c.head_dim)
    return std::nullopt;
  const at::ScalarType kv_type = k.scalar_type();
  c.fp8 = kv_type == at::kFloat8_e4m3fn;
  if (v.scalar_type() != kv_type || (!c.fp8 && kv_type != dtype)) return std::nullopt;
  if (c.heads_kv < 1 || c.heads_q % c.heads_kv) return std::nullopt;
  if (!rows_ok(q) || !rows_ok(k) || !rows_ok(v)) return std::nullopt;
  if (c.fp8) {
    for (const auto* d : {&k_descale, &v_descale}) {
      if (!d->has_value()) return std::nullopt;
      const at::Tensor& t = **d;
      if (!on(t, 2, device) || t.size(0) != c.batch || t.size(1) != c.heads_kv || t.scalar_type() != at::kFloat ||
          !t.is_contiguous())
        return std::nullopt;
    }
  } else if (k_descale.has_value() || v_descale.has_value()) {
    return std::nullopt;
  }
  c.paged = table.has_value();
  c.capacity = c.rows, c.max_pages = 1;
  if (c.paged) {
    const at::Tensor& t = *table;
    if (!on(t, 2, device) || t.scalar_type() != at::kInt || t.size(0) != c.batch || t.size(1) < 1 ||
        t.stride(1) != 1 || !contains(rules.page_sizes, c.rows))
      return std::nullopt;
    c.max_pages = t.size(1);
    c.capacity = c.max_pages * c.rows;
  } else if (c.blocks != c.batch) {
    return std::nullopt;
  }
  if (!on(seqlens, 1, device) || seqlens.scalar_type() != at::kInt || seqlens.size(0) != c.batch ||
      !seqlens.is_contiguous())
    return std::nullopt;
  // check_splits, check_window, resolve_scale
  if (num_splits.has_value() && split_size.has_value()) return std::nullopt;
  if (num_splits.has_value() && *num_splits < 1) return std::nullopt;
  if (split_size.has_value() && (*split_size < rules.split_multiple || *split_size % rules.split_multiple))
    return std::nullopt;
  if (window_left < -1 || window_right < -1) return std::nullopt;
  // pow, as Python's head_dim ** -0.5: the same double, so the same float32 in the kernels' arguments.
  c.scale = scale_arg.has_value() ? *scale_arg : std::pow(double(c.head_dim), -0.5);
  if (!(c.scale > 0) || std::isinf(c.scale)) return std::nullopt;
  return c;
}

}  // namespace kvcache_checks
