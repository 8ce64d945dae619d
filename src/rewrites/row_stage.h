// The row-staged fast path of the channels-last transforms, as index functions shared by the CUDA
// kernel and its host emulation (emulate_row_staged(), which the CPU tests check element by element
// against source_offset()).
//
// In channels-last, a destination row (its last spatial dim times its channels, Ld elements) is
// contiguous, and so is a source row (Ls elements). Space-to-depth (to_rewritten) builds one
// rewritten row from S = prod(window) over the outer dims original rows (one per outer offset;
// an unfolded last dimension stays within the row); depth-to-space
// builds one original row from one rewritten row. A thread block stages the source rows of R
// consecutive destination rows into shared memory with 16-byte loads (zeros for rows that fall
// outside the source), then writes the R destination rows (contiguous in memory) with 16-byte
// stores. Within a row, the staged element of destination column i is column_source(i) plus the
// row's addend: the column map is the same for every row, so the block computes it once into
// shared memory.
//
// C++17 and free of convplan's C++20 headers, so that nvcc compiles it.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "rewrites/transform.h"

namespace convplan::rewrites {

inline constexpr int32_t kStageThreads = 256;
inline constexpr int32_t kStageBudgetBytes = 16 * 1024;  // staged source rows per block
inline constexpr int32_t kMaxStageColumns = 8192;        // Ld: the column map is 32 KB at most
// Dynamic shared memory a launch may take without opting in.
inline constexpr int32_t kMaxStageSmemBytes = 48 * 1024;

struct RowPlan {
  int32_t rows = 0;           // destination rows: d0 times the outer spatial dims
  int32_t dst_len = 0;        // Ld
  int32_t src_len = 0;        // Ls
  int32_t staged = 1;         // S: source rows per destination row
  int32_t rows_per_tile = 1;  // R
  int32_t vec = 1;            // V: elements per 16 bytes
  int32_t load_unit = 1;      // bytes per staging load: 16, or elem_bytes
  // Shared memory: the column map (int32, Ld), the addends (int32, R), the source offsets
  // (int64, R*S) and the staged rows (R*S*Ls elements, 16-byte aligned).
  int32_t addend_at = 0, source_at = 0, stage_at = 0, smem_bytes = 0;
  FastDiv outer_div[2];  // the destination's outer spatial dims (D-1 of them)
  FastDiv dst_len_div;   // Ld
  FastDiv load_div;      // source row loads per row: Ls * elem_bytes / load_unit
};

inline int32_t round_up(int32_t v, int32_t m) { return (v + m - 1) / m * m; }

// The plan of `t` (prepare_fast() done) for a destination at dst_addr and a source at src_addr, or
// false where the fast path does not apply: not channels-last, alpha/beta, 64-bit offsets, a row
// that does not split into 16-byte vectors, a misaligned destination, or rows too long to stage.
// min_tiles: fewer rows per tile where the rows would otherwise make fewer tiles (the launch
// passes twice the multiprocessors, so that a small tensor, a filter, still spreads over the GPU).
inline bool make_row_plan(const TransformDesc& t, uintptr_t src_addr, uintptr_t dst_addr,
                          RowPlan* p, int32_t min_tiles = 1) {
  const int rank = t.spatial_dims + 2;
  if (t.spatial_dims < 1 || t.dst_mem_to_logical[rank - 1] != 1 || t.scaled()) return false;
  if (t.elem_bytes != 2 && t.elem_bytes != 4 && t.elem_bytes != 8) return false;
  const int64_t limit = int64_t{1} << 31;
  int64_t a = 1, b = 1;
  for (int i = 0; i < kMaxRank; ++i) {
    a *= t.a_dims[i];
    b *= t.b_dims[i];
  }
  if (a >= limit || b >= limit || t.dst_elements >= limit) return false;
  const int64_t* dd = t.to_rewritten ? t.b_dims : t.a_dims;
  const int64_t* sd = t.to_rewritten ? t.a_dims : t.b_dims;
  const int64_t* ss = t.to_rewritten ? t.a_strides : t.b_strides;
  const int last = 2 + t.spatial_dims - 1;
  // Packed channels-last: a row is contiguous and the outer dims step over whole rows.
  if (ss[1] != 1 || ss[last] != sd[1]) return false;
  const int64_t ld = dd[last] * dd[1], ls = sd[last] * sd[1];
  const int32_t e = t.elem_bytes;
  p->vec = 16 / e;
  if (ld > kMaxStageColumns || ld % p->vec != 0 || dst_addr % 16 != 0) return false;
  p->staged = 1;
  if (t.to_rewritten) {
    for (int d = 0; d + 1 < t.spatial_dims; ++d) p->staged *= t.window[d];
  }
  const int64_t row_bytes = int64_t{p->staged} * ls * e;
  if (row_bytes > kStageBudgetBytes) return false;
  p->rows = static_cast<int32_t>(dd[0]);
  for (int d = 0; d + 1 < t.spatial_dims; ++d) {
    p->rows *= static_cast<int32_t>(dd[2 + d]);
    p->outer_div[d] = make_fast_div(static_cast<uint32_t>(dd[2 + d]));
  }
  p->dst_len = static_cast<int32_t>(ld);
  p->src_len = static_cast<int32_t>(ls);
  int64_t r = kStageBudgetBytes / (row_bytes > 0 ? row_bytes : 1);
  if (r * p->staged > kStageThreads) r = kStageThreads / p->staged;
  if (r > p->rows) r = p->rows;
  if (min_tiles > 1) {
    const int64_t spread = (int64_t{p->rows} + min_tiles - 1) / min_tiles;
    if (r > spread) r = spread;
  }
  p->rows_per_tile = static_cast<int32_t>(r < 1 ? 1 : r);
  // 16-byte loads where the source and every row start are 16-byte aligned.
  bool aligned = src_addr % 16 == 0 && (ls * e) % 16 == 0 && (ss[0] * e) % 16 == 0;
  for (int d = 0; d + 1 < t.spatial_dims; ++d) aligned = aligned && (ss[2 + d] * e) % 16 == 0;
  p->load_unit = aligned ? 16 : e;
  p->dst_len_div = make_fast_div(static_cast<uint32_t>(ld));
  p->load_div = make_fast_div(static_cast<uint32_t>(ls * e / p->load_unit));
  const int32_t rs = p->rows_per_tile * p->staged;
  p->addend_at = round_up(p->dst_len * 4, 16);
  p->source_at = round_up(p->addend_at + p->rows_per_tile * 4, 16);
  p->stage_at = round_up(p->source_at + rs * 8, 16);
  p->smem_bytes = p->stage_at + round_up(rs * p->src_len * e, 16);
  return p->smem_bytes <= kMaxStageSmemBytes;
}

// The pipelined kernel (transform_kernels.cu) over a RowPlan: the column map once per block, then
// two buffers of (addends, source offsets, staged rows), each laid out as the staged kernel's, so
// that the next tile's rows are copied in (cp.async, 16 bytes each) while this tile's are written.
// It needs 16-byte loads, and both buffers and the map in the default 48 KB of shared memory.

struct PipeLayout {
  int32_t buffer_at = 0, buffer_bytes = 0;             // buffer b at buffer_at + b * buffer_bytes
  int32_t addend_at = 0, source_at = 0, stage_at = 0;  // within a buffer
  int32_t smem_bytes = 0;
};

// The layout for plan p of elements of elem_bytes, or false where the pipelined kernel does not
// apply (then the staged kernel runs).
inline bool make_pipe_layout(const RowPlan& p, int32_t elem_bytes, PipeLayout* l) {
  if (p.load_unit != 16) return false;
  const int32_t rs = p.rows_per_tile * p.staged;
  l->buffer_at = round_up(p.dst_len * 4, 16);
  l->addend_at = 0;
  l->source_at = round_up(p.rows_per_tile * 4, 16);
  l->stage_at = round_up(l->source_at + rs * 8, 16);
  l->buffer_bytes = l->stage_at + round_up(rs * p.src_len * elem_bytes, 16);
  l->smem_bytes = l->buffer_at + 2 * l->buffer_bytes;
  return l->smem_bytes <= kMaxStageSmemBytes;
}

// Destination column i's element within its row's staged source rows, before the row's addend;
// -1 where it is a zero (a padding channel, or a position outside the source).
CONVPLAN_HD int32_t column_source(const TransformDesc& t, const RowPlan& p, uint32_t i) {
  const int last = 2 + t.spatial_dims - 1;
  const FastDiv& window = t.window_div[last - 2];
  const uint32_t block = t.step_div[last - 2].divisor;
  const uint32_t a_channels = t.channel_div.divisor;
  if (t.to_rewritten) {
    const uint32_t b_channels = static_cast<uint32_t>(t.b_dims[1]);
    const uint32_t j = i / b_channels;
    const uint32_t cc = i - j * b_channels;
    const uint32_t m = fast_div(t.channel_div, cc);
    const uint32_t c = cc - m * a_channels;
    const uint32_t mo = fast_div(window, m);
    if (mo >= static_cast<uint32_t>(p.staged)) return -1;
    const int64_t w =
        static_cast<int64_t>(j * block + (m - mo * window.divisor)) - t.offset[last - 2];
    if (w < 0 || w >= t.a_dims[last]) return -1;
    return static_cast<int32_t>(mo * static_cast<uint32_t>(p.src_len) +
                                static_cast<uint32_t>(w) * a_channels + c);
  }
  const uint32_t w = fast_div(t.channel_div, i);
  const uint32_t c = i - w * a_channels;
  const uint32_t pos = w + static_cast<uint32_t>(t.offset[last - 2]);
  const uint32_t j = fast_div(t.step_div[last - 2], pos);
  if (j >= static_cast<uint32_t>(t.b_dims[last])) return -1;  // cropped
  return static_cast<int32_t>(j * static_cast<uint32_t>(t.b_dims[1]) +
                              (pos - j * block) * a_channels + c);
}

// The source element offset of staged row k (< S) of destination row `row`, or -1 where that
// source row is all zeros; *addend: what the row adds to column_source().
CONVPLAN_HD int64_t staged_row_source(const TransformDesc& t, const RowPlan& p, uint32_t row,
                                      uint32_t k, int32_t* addend) {
  const int outer = t.spatial_dims - 1;
  uint32_t coord[2] = {0, 0};
  for (int d = outer - 1; d >= 0; --d) {
    const uint32_t q = fast_div(p.outer_div[d], row);
    coord[d] = row - q * p.outer_div[d].divisor;
    row = q;
  }
  *addend = 0;
  if (t.to_rewritten) {
    if (row >= static_cast<uint32_t>(t.a_dims[0])) return -1;  // a padded filter's K
    int64_t src = static_cast<int64_t>(row) * t.a_strides[0];
    for (int d = outer - 1; d >= 0; --d) {
      const uint32_t q = fast_div(t.window_div[d], k);
      const int64_t h = static_cast<int64_t>(coord[d] * t.step_div[d].divisor +
                                             (k - q * t.window_div[d].divisor)) -
                        t.offset[d];
      k = q;
      if (h < 0 || h >= t.a_dims[2 + d]) return -1;
      src += h * t.a_strides[2 + d];
    }
    return src;
  }
  uint32_t mo = 0;
  int64_t src = static_cast<int64_t>(row) * t.b_strides[0];
  for (int d = 0; d < outer; ++d) {
    const uint32_t block = t.step_div[d].divisor;  // == window[d]: depth-to-space
    const uint32_t pos = coord[d] + static_cast<uint32_t>(t.offset[d]);
    const uint32_t j = fast_div(t.step_div[d], pos);
    if (j >= static_cast<uint32_t>(t.b_dims[2 + d])) return -1;  // cropped: the row is zeros
    mo = mo * block + (pos - j * block);
    src += static_cast<int64_t>(j) * t.b_strides[2 + d];
  }
  *addend = static_cast<int32_t>(mo * t.window_div[outer].divisor * t.channel_div.divisor);
  return src;
}

// The kernel's tiles on the host, through the same functions and in the same steps (the staged
// rows, then V-element destination vectors), moving raw bytes: what the CPU tests check.
inline void emulate_row_staged(const TransformDesc& t, const RowPlan& p, const unsigned char* src,
                               unsigned char* dst) {
  const size_t e = static_cast<size_t>(t.elem_bytes);
  std::vector<int32_t> columns(static_cast<size_t>(p.dst_len));
  for (uint32_t i = 0; i < static_cast<uint32_t>(p.dst_len); ++i)
    columns[i] = column_source(t, p, i);
  const int32_t rs = p.rows_per_tile * p.staged;
  std::vector<unsigned char> stage(static_cast<size_t>(rs) * p.src_len * e);
  std::vector<int32_t> addend(static_cast<size_t>(p.rows_per_tile));
  for (int32_t row0 = 0; row0 < p.rows; row0 += p.rows_per_tile) {
    const int32_t n = p.rows - row0 < p.rows_per_tile ? p.rows - row0 : p.rows_per_tile;
    for (int32_t u = 0; u < n * p.staged; ++u) {
      const int32_t r = u / p.staged;
      const int64_t from = staged_row_source(t, p, static_cast<uint32_t>(row0 + r),
                                             static_cast<uint32_t>(u - r * p.staged), &addend[r]);
      unsigned char* to = stage.data() + static_cast<size_t>(u) * p.src_len * e;
      if (from < 0)
        std::memset(to, 0, p.src_len * e);
      else
        std::memcpy(to, src + from * e, p.src_len * e);
    }
    for (uint32_t v = 0; v < static_cast<uint32_t>(n * p.dst_len / p.vec); ++v) {
      const uint32_t at = v * static_cast<uint32_t>(p.vec);
      const uint32_t r = fast_div(p.dst_len_div, at);
      const uint32_t i = at - r * static_cast<uint32_t>(p.dst_len);
      for (int32_t j = 0; j < p.vec; ++j) {
        unsigned char* out = dst + (static_cast<size_t>(row0) * p.dst_len + at + j) * e;
        const int32_t col = columns[i + j];
        const size_t staged = static_cast<size_t>(r) * p.staged * p.src_len + col + addend[r];
        if (col < 0)
          std::memset(out, 0, e);
        else
          std::memcpy(out, stage.data() + staged * e, e);
      }
    }
  }
}

}  // namespace convplan::rewrites
