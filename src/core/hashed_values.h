// The tuner's input data as a function of (seed, element offset): a splitmix64 counter hash
// mapped to a multiple of 1/128 in [-1, 1], exact in every floating type (bf16 keeps 8
// significant bits). The same inline function runs on the host and in the device fill kernel
// (src/cudnn/input_fill_kernels.cu), so a sampled reference can compute the few input values it
// reads instead of keeping a host copy of every input tensor.
//
// C++17 and nvcc-compatible on purpose: included by a CUDA translation unit.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define CONVPLAN_HOST_DEVICE __host__ __device__
#else
#define CONVPLAN_HOST_DEVICE
#endif

namespace convplan::detail {

// The integer in [-128, 128] behind hashed_value (so that a kernel can convert it exactly).
CONVPLAN_HOST_DEVICE inline int hashed_level(uint64_t seed, int64_t offset) {
  uint64_t z = seed + static_cast<uint64_t>(offset) * 0x9E3779B97F4A7C15ull;  // splitmix64
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<int>(z % 257) - 128;
}

CONVPLAN_HOST_DEVICE inline double hashed_value(uint64_t seed, int64_t offset) {
  return hashed_level(seed, offset) / 128.0;
}

// Type codes of the element stores below, in DataType's order (checked in core/backend.cc):
// nvcc never sees problem.h (C++20).
enum HashedType : int { kHashedFloat = 0, kHashedHalf = 1, kHashedBFloat16 = 2, kHashedDouble = 3 };

// The bits of level / 128 in a binary floating type with `mantissa` explicit bits and exponent
// bias `bias`, built from integers: the value is exact in every type, so no rounding is needed
// and the host and the device agree bit for bit.
CONVPLAN_HOST_DEVICE inline uint64_t hashed_bits(int level, int mantissa, int bias, int width) {
  if (level == 0) return 0;
  const uint64_t sign = level < 0 ? 1 : 0;
  const uint64_t a = static_cast<uint64_t>(level < 0 ? -level : level);  // 1..128
  int p = 0;
  while ((a >> (p + 1)) != 0) ++p;  // a = 2^p (1 + f)
  const uint64_t exponent = static_cast<uint64_t>(p - 7 + bias);
  const uint64_t fraction = (a - (uint64_t{1} << p)) << (mantissa - p);
  return (sign << (width - 1)) | (exponent << mantissa) | fraction;
}

// Writes element `index` of a tensor of type `type` at `dst`, filled from `seed`.
CONVPLAN_HOST_DEVICE inline void store_hashed(void* dst, int type, int64_t index, uint64_t seed) {
  const int level = hashed_level(seed, index);
  switch (type) {
    case kHashedFloat:
      static_cast<uint32_t*>(dst)[index] = static_cast<uint32_t>(hashed_bits(level, 23, 127, 32));
      break;
    case kHashedHalf:
      static_cast<uint16_t*>(dst)[index] = static_cast<uint16_t>(hashed_bits(level, 10, 15, 16));
      break;
    case kHashedBFloat16:
      static_cast<uint16_t*>(dst)[index] = static_cast<uint16_t>(hashed_bits(level, 7, 127, 16));
      break;
    default: static_cast<double*>(dst)[index] = level / 128.0; break;
  }
}

}  // namespace convplan::detail
