// Backend::read_output on the device, for the cuDNN backend (see output_check.h).
#include "cudnn/output_check.h"

#include <algorithm>
#include <limits>
#include <string>

#include "cudnn/check.h"
#include "cudnn/cuda_util.h"
#include "cudnn/output_check_kernels.h"

namespace convplan::cudnn_detail {

static_assert(kCheckMaxRank == kMaxTensorRank);

StatusOr<int64_t> read_output_on_device(cudaStream_t stream, const void* src,
                                        const TensorShape& shape, int64_t elem_bytes,
                                        bool scan_poison, const std::vector<int64_t>& offsets,
                                        void* dst) {
  CheckShape s;
  s.rank = shape.rank;
  std::copy(shape.dims.begin(), shape.dims.end(), s.dims);
  std::copy(shape.strides.begin(), shape.strides.end(), s.strides);
  s.elements = shape.elements();
  const int elem = static_cast<int>(elem_bytes);
  void* scratch = nullptr;
  CONVPLAN_CUDA_CHECK(
      cudaMallocAsync(&scratch, output_check_scratch_bytes(offsets.size(), elem), stream));
  constexpr unsigned long long kNone = std::numeric_limits<unsigned long long>::max();
  unsigned long long found = kNone;
  const cudaError_t enqueued = enqueue_output_check(
      stream, src, s, elem, scan_poison, offsets.data(), offsets.size(), scratch, dst, &found);
  const cudaError_t freed = cudaFreeAsync(scratch, stream);
  const Status synced = synchronize_stream(stream);  // found and dst are read after it
  CONVPLAN_CUDA_CHECK(enqueued);
  CONVPLAN_CUDA_CHECK(freed);
  CONVPLAN_RETURN_IF_ERROR(synced);
  return found == kNone ? int64_t{-1} : static_cast<int64_t>(found);
}

std::string unsupported_architecture_message(int device, const std::string& name, int major,
                                             int minor, const std::string& built) {
  const std::string cc = std::to_string(major) + std::to_string(minor);
  return "GPU " + std::to_string(device) + " (" + name + ") has compute capability " +
         std::to_string(major) + "." + std::to_string(minor) +
         ", but this convplan was built for the CUDA architectures " + built +
         " only (CMAKE_CUDA_ARCHITECTURES), none of which runs on it: rebuild with " + cc +
         " added to CMAKE_CUDA_ARCHITECTURES (e.g. -DCMAKE_CUDA_ARCHITECTURES=" + cc + ")";
}

Status check_device_architecture(int device) {
  DeviceGuard guard(device);
  CONVPLAN_RETURN_IF_ERROR(guard.status());
  const cudaError_t e = output_check_kernels_loadable();
  if (e == cudaSuccess) return Status();
  if (e != cudaErrorNoKernelImageForDevice && e != cudaErrorInvalidDeviceFunction) {
    CONVPLAN_CUDA_CHECK(e);
  }
  (void)cudaGetLastError();  // the failed query must not fail the next launch's check
  cudaDeviceProp prop{};
  CONVPLAN_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return not_supported(unsupported_architecture_message(device, prop.name, prop.major, prop.minor,
                                                        CONVPLAN_CUDA_ARCHITECTURES));
}

}  // namespace convplan::cudnn_detail
