// Causal (optionally sliding-window, optionally soft-capped) softmax over attention scores, one
// row per query, in two reads and one write of the scores: the fused step of the runtime's sliced
// attention (src/runtime/masked_softmax.rs documents the contract; its CPU twin is the reference).
//
// x, y: rows × t scores, contiguous; row r is query (r % queries) at position first + r % queries.
// Keys [lo, hi) are visible: hi = position + 1 (at most t), lo = position + 1 - window (window > 0).
// Scores are read as f32, soft-capped (cap · tanh(x / cap), cap > 0), reduced in f32 (an online
// max and sum), and written in the scores' own type; hidden keys are written as 0.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#define BLOCK 256

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16(x);
}

// (m, s) pairs: s is the sum of exp(v - m) over the values seen.
__device__ __forceinline__ void combine(float &m, float &s, float m2, float s2) {
  if (m2 == -INFINITY) return;
  if (m == -INFINITY) { m = m2; s = s2; return; }
  if (m2 > m) { s = s * expf(m - m2) + s2; m = m2; }
  else { s = s + s2 * expf(m2 - m); }
}

template <typename T>
__device__ void masked_softmax(const T *x, T *y, const int64_t t, const int64_t queries,
                               const int64_t first, const int64_t window, const float cap) {
  const int64_t row = blockIdx.x;
  const int64_t pos = first + row % queries;
  const int64_t hi = pos + 1 < t ? pos + 1 : t;
  int64_t lo = window > 0 ? pos + 1 - window : 0;
  if (lo < 0) lo = 0;
  if (lo > hi) lo = hi;
  const T *xr = x + row * t;
  T *yr = y + row * t;

  float m = -INFINITY, s = 0.f;
  for (int64_t j = lo + threadIdx.x; j < hi; j += BLOCK) {
    float v = to_float(xr[j]);
    if (cap > 0.f) v = cap * tanhf(v / cap);
    combine(m, s, v, 1.f);
  }
  // warp, then block
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffff, m, o);
    const float s2 = __shfl_xor_sync(0xffffffff, s, o);
    combine(m, s, m2, s2);
  }
  __shared__ float ms[BLOCK / 32], ss[BLOCK / 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) { ms[warp] = m; ss[warp] = s; }
  __syncthreads();
  if (warp == 0) {
    m = lane < BLOCK / 32 ? ms[lane] : -INFINITY;
    s = lane < BLOCK / 32 ? ss[lane] : 0.f;
    for (int o = 16; o > 0; o >>= 1) {
      const float m2 = __shfl_xor_sync(0xffffffff, m, o);
      const float s2 = __shfl_xor_sync(0xffffffff, s, o);
      combine(m, s, m2, s2);
    }
    if (lane == 0) { ms[0] = m; ss[0] = s; }
  }
  __syncthreads();
  m = ms[0];
  const float inv = ss[0] > 0.f ? 1.f / ss[0] : 0.f;

  for (int64_t j = threadIdx.x; j < t; j += BLOCK) {
    float out = 0.f;
    if (j >= lo && j < hi) {
      float v = to_float(xr[j]);
      if (cap > 0.f) v = cap * tanhf(v / cap);
      out = expf(v - m) * inv;
    }
    yr[j] = from_float<T>(out);
  }
}

#define MASKED_SOFTMAX(T, NAME)                                                               \
  extern "C" __global__ void NAME(const T *x, T *y, const int64_t t, const int64_t queries,   \
                                  const int64_t first, const int64_t window, const float cap) { \
    masked_softmax<T>(x, y, t, queries, first, window, cap);                                  \
  }

MASKED_SOFTMAX(float, masked_softmax_f32)
MASKED_SOFTMAX(__half, masked_softmax_f16)
MASKED_SOFTMAX(__nv_bfloat16, masked_softmax_bf16)
