// The decode parameter block as plain C++ (no CUDA): the kernels (params.cuh) and the torch-facing entry
// (csrc/torch/kvcache_entry.cpp) both fill or read it.
#pragma once

#include <cstdint>

extern "C" {
// Mirrored field by field by cuda_impl/_lib.py (DecodeParams, checked by size). Strides are in elements.
struct DecodeParams {
  const void* q;               // (batch, seqlen_q, heads_q, head_dim), strides q_stride; head_dim stride 1
  const void* k;               // paged: (num_pages, page_size, heads_kv, head_dim); contiguous: (batch, S_max, ...)
  const void* v;
  void* out;                   // (batch, seqlen_q, heads_q, head_dim_v) contiguous, q's dtype
  float* lse;                  // (batch, heads_q, seqlen_q) contiguous, natural log
  const int32_t* block_table;  // (batch, max_pages), row stride block_table_stride; null: contiguous cache
  const int32_t* seqlens;      // (batch,); null: every sequence holds the whole capacity
  const float* k_descale;      // (batch, heads_kv) for e4m3 K/V, else null
  const float* v_descale;
  float* workspace;            // num_splits > 1: partial O (num_splits, batch, heads_q, seqlen_q, head_dim_v), then
                               // partial LSE (num_splits, batch, heads_q, seqlen_q); else null
  int64_t q_stride[3];         // batch, query position, head
  int64_t k_stride[3];         // page (contiguous: batch), row in the page, head
  int64_t v_stride[3];
  int64_t block_table_stride;
  int32_t batch, seqlen_q, heads_q, heads_kv, head_dim;
  int32_t head_dim_v;           // V's and out's head_dim: head_dim, or MLA's 512 beside Q/K's 576
  int32_t page_size;           // contiguous: S_max (then the page of a sequence is its batch index)
  int32_t num_pages;           // pages in the cache (contiguous: batch)
  int32_t max_pages;           // block-table columns (contiguous: 1); capacity = max_pages * page_size
  int32_t num_splits;          // chunks per sequence (the grid's); chunks past a sequence's length exit early
  int32_t split_keys;          // keys per chunk, a multiple of BLOCK_N
  float scale;                 // softmax scale, > 0
  int32_t causal;              // bottom-right aligned: query i sees keys j <= i + L - seqlen_q
  int32_t dtype;               // q and out: FA_DTYPE_BF16 / FA_DTYPE_FP16
  int32_t kv_dtype;            // K and V: dtype, or KV_E4M3
  int32_t window_left;         // local window around each query's bottom-right diagonal; -1: unbounded. With a left
  int32_t window_right;        // bound the chunks follow the window (decode_chunk0)
};
}
