// Backend's default implementation of read_output: the whole span copied to the host and checked
// there. Backends with a device-side check override it (cudnn_backend.cc).
#include "convplan/backend.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "core/hashed_values.h"
#include "core/tensor_offsets.h"

namespace convplan {

namespace detail {

// Word-wise: the scan runs over every output element of every candidate.
int64_t first_poisoned(const uint8_t* data, int64_t count, int64_t elem) {
  auto scan = [&](auto word) -> int64_t {
    using Word = decltype(word);
    const Word poison = static_cast<Word>(~Word{0});
    for (int64_t i = 0; i < count; ++i) {
      Word w;
      std::memcpy(&w, data + i * static_cast<int64_t>(sizeof(Word)), sizeof(Word));
      if (w == poison) return i;
    }
    return -1;
  };
  switch (elem) {
    case 2: return scan(uint16_t{});
    case 4: return scan(uint32_t{});
    case 8: return scan(uint64_t{});
    default:
      for (int64_t i = 0; i < count; ++i) {
        if (std::all_of(data + i * elem, data + (i + 1) * elem,
                        [](uint8_t b) { return b == 0xFF; })) {
          return i;
        }
      }
      return -1;
  }
}

}  // namespace detail

StatusOr<int64_t> Backend::read_output(cudnnHandle_t handle, const void* src,
                                       const TensorShape& shape, int64_t elem_bytes,
                                       bool scan_poison, const std::vector<int64_t>& offsets,
                                       void* dst) {
  std::vector<uint8_t> bytes(static_cast<size_t>(shape.span_elements() * elem_bytes));
  CONVPLAN_RETURN_IF_ERROR(copy_to_host(handle, bytes.data(), src, bytes.size()));
  int64_t poisoned = -1;
  if (scan_poison) {
    if (shape.span_elements() == shape.elements()) {
      poisoned = detail::first_poisoned(bytes.data(), shape.span_elements(), elem_bytes);
    } else {
      detail::for_each_offset(shape, [&](int64_t off) {
        if (detail::first_poisoned(bytes.data() + off * elem_bytes, 1, elem_bytes) == 0 &&
            (poisoned < 0 || off < poisoned)) {
          poisoned = off;
        }
      });
    }
  }
  auto* out = static_cast<uint8_t*>(dst);
  for (size_t i = 0; i < offsets.size(); ++i) {
    std::memcpy(out + i * elem_bytes, bytes.data() + offsets[i] * elem_bytes,
                static_cast<size_t>(elem_bytes));
  }
  return poisoned;
}

static_assert(static_cast<int>(DataType::kFloat) == detail::kHashedFloat &&
                  static_cast<int>(DataType::kHalf) == detail::kHashedHalf &&
                  static_cast<int>(DataType::kBFloat16) == detail::kHashedBFloat16 &&
                  static_cast<int>(DataType::kDouble) == detail::kHashedDouble,
              "the hashed stores' type codes follow DataType");

StatusOr<std::vector<Candidate>> Backend::candidates_for_rewrites(
    cudnnHandle_t handle, const ConvProblem& problem, CandidateSource source,
    const std::vector<std::string>& rewrites) {
  if (std::find(rewrites.begin(), rewrites.end(), "") == rewrites.end()) {
    return std::vector<Candidate>{};
  }
  return candidates(handle, problem, source);
}

StatusOr<std::unique_ptr<OwnedHandle>> Backend::create_handle(int ordinal) {
  return Status(StatusCode::kNotSupported, "backend '" + name() +
                                               "' cannot create a handle (for "
                                               "device " +
                                               std::to_string(ordinal) + ")");
}

Status Backend::fill_hashed(cudnnHandle_t handle, void* dst, DataType type, int64_t elements,
                            uint64_t seed) {
  if (elements <= 0) return ok_status();
  std::vector<uint8_t> host(static_cast<size_t>(elements * size_of(type)));
  // In parts across threads: large inputs took most of a tune on one (issue 21's measurements).
  const int64_t cores = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 16);
  const int64_t parts = std::clamp<int64_t>(elements / (int64_t{1} << 18), 1, cores);
  auto fill_part = [&](int64_t p) {
    for (int64_t i = elements * p / parts; i < elements * (p + 1) / parts; ++i) {
      detail::store_hashed(host.data(), static_cast<int>(type), i, seed);
    }
  };
  std::vector<std::thread> threads;
  for (int64_t p = 1; p < parts; ++p) threads.emplace_back(fill_part, p);
  fill_part(0);
  for (std::thread& t : threads) t.join();
  return copy_to_device(handle, dst, host.data(), host.size());
}

}  // namespace convplan
