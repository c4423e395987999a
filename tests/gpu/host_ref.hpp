// tests/gpu/host_ref.hpp — the reference side of the GPU tests, in plain C++.
//
// Seeded input values (the same function fills buffers on the device and recomputes them on the
// host), host fp32 <-> bf16/fp16 conversions written from the formats' definitions (not from
// cuda_bf16.h, so the reference does not share code with what it checks), and comparisons that
// describe the first mismatch. Included by common.cuh; tests/cpu/test_reference_test.cpp checks
// it on machines without a GPU.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tilewire/runtime/dtype.hpp"

#if defined(__CUDACC__)
#define TW_TEST_HD __host__ __device__ __forceinline__
#else
#define TW_TEST_HD inline
#endif

namespace tw_test {

// ------------------------------------------------------------------------- seeded values
// splitmix64 of (seed, rank, index): a well-mixed 64-bit value, same on host and device.
TW_TEST_HD uint64_t mix(uint64_t seed, int rank, uint64_t i) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + (uint64_t)(rank + 1) * 0xD1B54A32D192ED03ull + i;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A non-zero integer in [-8, 8]: sums of up to 8 ranks (|sum| <= 64) are exact in bf16, fp16
// and fp32, and so is every fp32 partial sum, whatever the order.
TW_TEST_HD int small_int(uint64_t seed, int rank, uint64_t i) {
  const int v = (int)(mix(seed, rank, i) % 16);  // 0..15
  return v < 8 ? v - 8 : v - 7;                  // -8..-1, 1..8
}

// Significand bits (after the leading one) of each type.
TW_TEST_HD int mantissa_bits(tw::DType t) {
  return t == tw::DType::kFloat32 ? 23 : (t == tw::DType::kFloat16 ? 10 : 7);
}

// A random value exactly representable in `t`: +-(1 + m / 2^mbits) * 2^e, e in [-4, 4]. Computed
// exactly in fp32 on host and device, so converting it to `t` never rounds.
TW_TEST_HD float random_exact(uint64_t seed, int rank, uint64_t i, tw::DType t) {
  const uint64_t h = mix(seed ^ 0x5EEDull, rank, i);
  const int mb = mantissa_bits(t);
  const uint32_t m = (uint32_t)(h & ((1ull << mb) - 1));
  const int e = (int)((h >> 32) % 9) - 4;
  const float sig = 1.0f + (float)m / (float)(1u << mb);
  float scale = 1.0f;
  for (int k = 0; k < e; ++k) scale *= 2.0f;
  for (int k = 0; k > e; --k) scale *= 0.5f;
  const float v = sig * scale;
  return (h >> 63) ? -v : v;
}

enum class Fill { kSmallInt, kRandom };

TW_TEST_HD float input_value(Fill f, uint64_t seed, int rank, uint64_t i, tw::DType t) {
  return f == Fill::kSmallInt ? (float)small_int(seed, rank, i) : random_exact(seed, rank, i, t);
}

// ------------------------------------------------------------------ host conversions (RNE)
inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);                                           // round half to even
  return (uint16_t)(u >> 16);
}
inline float bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

inline uint16_t f32_to_f16(float f) {
  const uint32_t u = f32_bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);        // NaN
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);       // >= 65520 rounds to inf
  if (a < 0x38800000u) {                                         // below 2^-14: subnormal (or 0)
    const double scaled = (double)bits_f32(a) * 16777216.0;      // units of 2^-24, exact
    return (uint16_t)(sign | (uint32_t)std::nearbyint(scaled));  // 1024 becomes the min normal
  }
  const uint32_t exp = (a >> 23) - 127 + 15, man = a & 0x7fffffu;
  uint32_t h = (exp << 10) | (man >> 13);
  const uint32_t rest = man & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // carry may bump the exponent: right
  return (uint16_t)(sign | h);
}
inline float f16_to_f32(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float v;
  if (exp == 0)
    v = std::ldexp((float)man, -24);
  else if (exp == 31)
    v = man ? NAN : INFINITY;
  else
    v = std::ldexp((float)(1024 + man), exp - 25);
  return sign ? -v : v;
}

// fp32 value -> the bit pattern of `t` (zero-extended), and back.
inline uint32_t to_bits(tw::DType t, float v) {
  switch (t) {
    case tw::DType::kFloat32:
      return f32_bits(v);
    case tw::DType::kFloat16:
      return f32_to_f16(v);
    case tw::DType::kBFloat16:
      return f32_to_bf16(v);
  }
  return 0;
}
inline double from_bits(tw::DType t, uint32_t b) {
  switch (t) {
    case tw::DType::kFloat32:
      return bits_f32(b);
    case tw::DType::kFloat16:
      return f16_to_f32((uint16_t)b);
    case tw::DType::kBFloat16:
      return bf16_to_f32((uint16_t)b);
  }
  return 0;
}

// ------------------------------------------------------------------------- host buffers
// Raw bytes of a device buffer; elements read by bit pattern.
using Bytes = std::vector<uint8_t>;

inline uint32_t elem(const Bytes& b, tw::DType t, size_t i) {
  if (tw::dtype_size(t) == 4) {
    uint32_t v;
    std::memcpy(&v, b.data() + 4 * i, 4);
    return v;
  }
  uint16_t v;
  std::memcpy(&v, b.data() + 2 * i, 2);
  return v;
}
inline void set_elem(Bytes& b, tw::DType t, size_t i, uint32_t v) {
  if (tw::dtype_size(t) == 4)
    std::memcpy(b.data() + 4 * i, &v, 4);
  else {
    uint16_t h = (uint16_t)v;
    std::memcpy(b.data() + 2 * i, &h, 2);
  }
}

// Inputs of `rank` as the device fill produces them, as bits of `t`.
inline Bytes host_inputs(Fill f, tw::DType t, size_t n, uint64_t seed, int rank, uint64_t first = 0) {
  Bytes b(n * tw::dtype_size(t));
  for (size_t i = 0; i < n; ++i) set_elem(b, t, i, to_bits(t, input_value(f, seed, rank, first + i, t)));
  return b;
}

// Exact all-reduce of small-integer inputs over `nranks`: element i = sum_r small_int(seed, r, first + i).
inline Bytes exact_sum(tw::DType t, size_t n, uint64_t seed, int nranks, uint64_t first = 0) {
  Bytes b(n * tw::dtype_size(t));
  for (size_t i = 0; i < n; ++i) {
    int s = 0;
    for (int r = 0; r < nranks; ++r) s += small_int(seed, r, first + i);
    set_elem(b, t, i, to_bits(t, (float)s));
  }
  return b;
}

inline std::string hex(uint32_t v) {
  char s[16];
  std::snprintf(s, sizeof s, "0x%x", v);
  return s;
}

// "" when the first n elements of got and want are bit-identical, else where and how they differ.
inline std::string compare_exact(const Bytes& got, const Bytes& want, tw::DType t, size_t n) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < n; ++i)
    if (elem(got, t, i) != elem(want, t, i) && bad++ == 0) first = i;
  if (bad == 0) return "";
  return std::to_string(bad) + " of " + std::to_string(n) + " elements differ; first at " + std::to_string(first) +
         ": got " + hex(elem(got, t, first)) + " (" + std::to_string(from_bits(t, elem(got, t, first))) + "), want " +
         hex(elem(want, t, first)) + " (" + std::to_string(from_bits(t, elem(want, t, first))) + ")";
}

// "" when bytes [from, to) of b all equal `byte`.
inline std::string check_fill(const Bytes& b, size_t from, size_t to, uint8_t byte, const char* what) {
  for (size_t i = from; i < to; ++i)
    if (b[i] != byte)
      return std::string(what) + ": byte " + std::to_string(i) + " is " + hex(b[i]) + ", expected untouched " +
             hex(byte);
  return "";
}

// Unit in the last place of |x| for a type with `p` significand bits (leading one included).
inline double ulp(double x, int p) {
  if (x == 0) return 0;
  int e = 0;
  std::frexp(std::fabs(x), &e);  // |x| = m * 2^e, m in [0.5, 1)
  return std::ldexp(1.0, e - p);
}

}  // namespace tw_test
