// Walking a tensor's elements and finding the tuner's poison in them: shared by the tuner and
// Backend::read_output's host implementation. Internal to convplan.
#pragma once

#include <cstdint>

#include "convplan/problem.h"

namespace convplan::detail {

// Calls f(offset) for every element of the tensor (not the strided gaps), last dim fastest.
template <typename F>
void for_each_offset(const TensorShape& s, F&& f) {
  int64_t idx[kMaxTensorRank] = {0, 0, 0, 0, 0};
  const int64_t total = s.elements();
  for (int64_t e = 0; e < total; ++e) {
    int64_t off = 0;
    for (int d = 0; d < s.rank; ++d) off += idx[d] * s.strides[d];
    f(off);
    for (int d = s.rank - 1; d >= 0; --d) {
      if (++idx[d] < s.dims[d]) break;
      idx[d] = 0;
    }
  }
}

// The first of `count` elements of `elem` bytes whose bytes are all 0xFF (the poison), or -1.
int64_t first_poisoned(const uint8_t* data, int64_t count, int64_t elem);

}  // namespace convplan::detail
