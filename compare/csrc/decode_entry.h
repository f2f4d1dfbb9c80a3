// What the backends' compiled decode entries share beside the checks (kvcache_checks.h): the op's schema, the
// table of what the Python path prepared for each call key, and torch's current stream.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>

namespace decode_entry {

// Both entries' kvcache_decode, attention_with_kvcache's arguments but k_new / v_new; undefined tensors (None in
// Python) where the call is declined.
constexpr const char* KVCACHE_DECODE_SCHEMA =
    "kvcache_decode(Tensor q, Tensor k_cache, Tensor v_cache, Tensor cache_seqlens, Tensor? block_table, "
    "Tensor? k_descale, Tensor? v_descale, bool causal, float? scale, int? num_splits, int? split_size, "
    "int window_left, int window_right) -> (Tensor, Tensor)";

// FNV-1a over a key's int64 fields (std::array or std::vector).
struct KeyHash {
  template <typename Key>
  size_t operator()(const Key& key) const {
    uint64_t h = 1469598103934665603ull;
    for (int64_t x : key) h = (h ^ uint64_t(x)) * 1099511628211ull;
    return size_t(h);
  }
};

// What the Python path prepared, by call key, for the entry's later calls: emptied when it reaches `capacity`
// entries (as the Python paths' own caches: a server's changing batch sizes and cache lengths keep adding keys).
template <typename Key, typename Value>
class PreparedCalls {
 public:
  explicit PreparedCalls(size_t capacity) : capacity_(capacity) {}

  std::optional<Value> find(const Key& key) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = calls_.find(key);
    if (found == calls_.end()) return std::nullopt;
    return found->second;
  }

  void put(Key key, Value value) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (calls_.size() >= capacity_) calls_.clear();
    calls_[std::move(key)] = std::move(value);
  }

  int64_t size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return int64_t(calls_.size());
  }

  void clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    calls_.clear();
  }

 private:
  const size_t capacity_;
  mutable std::mutex mutex_;
  std::unordered_map<Key, Value, KeyHash> calls_;
};

// torch's current stream on `device` as the driver's handle (null for a CPU device: the tests' stub launches).
// Through c10's device-guard registry, which torch's CUDA library fills: the entries link libc10 and
// libtorch_cpu only.
inline void* current_stream(const c10::Device& device) {
  if (!device.is_cuda()) return nullptr;
  const auto* impl = c10::impl::getDeviceGuardImpl(device.type());
  return impl->getStreamNativeHandle(impl->getStream(device));
}

}  // namespace decode_entry
