// Conversions between packed 32-bit words of T and fp32 accumulators.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace tw::ops {

template <class T> struct Elem;
template <> struct Elem<float> {
  static constexpr int kPerWord = 1;
  __device__ static void unpack(uint32_t w, float* f) { f[0] = __uint_as_float(w); }
  __device__ static uint32_t pack(const float* f) { return __float_as_uint(f[0]); }
};
template <> struct Elem<__nv_bfloat16> {
  static constexpr int kPerWord = 2;
  __device__ static void unpack(uint32_t w, float* f) {
    __nv_bfloat162 h = *reinterpret_cast<__nv_bfloat162*>(&w);
    float2 v = __bfloat1622float2(h);
    f[0] = v.x;
    f[1] = v.y;
  }
  __device__ static uint32_t pack(const float* f) {
    __nv_bfloat162 h = __floats2bfloat162_rn(f[0], f[1]);
    return *reinterpret_cast<uint32_t*>(&h);
  }
};
template <> struct Elem<__half> {
  static constexpr int kPerWord = 2;
  __device__ static void unpack(uint32_t w, float* f) {
    __half2 h = *reinterpret_cast<__half2*>(&w);
    float2 v = __half22float2(h);
    f[0] = v.x;
    f[1] = v.y;
  }
  __device__ static uint32_t pack(const float* f) {
    __half2 h = __floats2half2_rn(f[0], f[1]);
    return *reinterpret_cast<uint32_t*>(&h);
  }
};

// acc[k*kPerWord + j] (+)= element j of word k, for NW words.
template <class T, int NW, bool kFirst>
__device__ __forceinline__ void accumulate(float* acc, const uint32_t* w) {
#pragma unroll
  for (int k = 0; k < NW; ++k) {
    float f[Elem<T>::kPerWord];
    Elem<T>::unpack(w[k], f);
#pragma unroll
    for (int j = 0; j < Elem<T>::kPerWord; ++j) {
      if (kFirst) acc[k * Elem<T>::kPerWord + j] = f[j];
      else acc[k * Elem<T>::kPerWord + j] += f[j];
    }
  }
}

template <class T, int NW>
__device__ __forceinline__ void pack_words(const float* acc, uint32_t* w) {
#pragma unroll
  for (int k = 0; k < NW; ++k) w[k] = Elem<T>::pack(acc + k * Elem<T>::kPerWord);
}

}  // namespace tw::ops
