// Problem builders that the tests share.
#pragma once

#include <cstdint>

#include "convplan/problem.h"

namespace convplan::testing {

// A 2-d convolution: size x size input, filter x filter, the same stride and padding on both
// axes; compute type from the data type.
inline ConvProblem conv2d(Direction dir, int64_t n, int64_t c, int64_t k, int64_t groups,
                          int64_t size, int64_t filter, int64_t stride, int64_t padding,
                          DataType type, Layout layout) {
  ConvProblem p;
  p.direction = dir;
  p.spatial_dims = 2;
  p.n = n;
  p.c = c;
  p.k = k;
  p.groups = groups;
  p.input = {size, size, 1};
  p.filter = {filter, filter, 1};
  p.stride = {stride, stride, 1};
  p.pad_before = {padding, padding, 0};
  p.pad_after = {padding, padding, 0};
  p = ConvProblem::with_data_type(p, type);
  p.layout = layout;
  return p;
}

}  // namespace convplan::testing
