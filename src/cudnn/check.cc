#include "cudnn/check.h"

#include <cstring>
#include <string>

namespace convplan::cudnn_detail {

StatusCode status_code_for(cudnnStatus_t status) {
  if (status == CUDNN_STATUS_SUCCESS) return StatusCode::kOk;
  if (CUDNN_STATUS_CATEGORY(status) == CUDNN_STATUS_NOT_SUPPORTED) return StatusCode::kNotSupported;
  if (status == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
      status == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED) {
    return StatusCode::kOutOfMemory;
  }
  return StatusCode::kCudnnError;
}

StatusCode status_code_for(cudaError_t error) {
  if (error == cudaSuccess) return StatusCode::kOk;
  if (error == cudaErrorMemoryAllocation) return StatusCode::kOutOfMemory;
  return StatusCode::kCudaError;
}

const char* short_file_name(const char* file) {
  if (file == nullptr) return "?";
  // The last "src/" or "tests/" component marks the project root; else the base name.
  const char* best = nullptr;
  for (const char* marker : {"/src/", "/tests/"}) {
    for (const char* p = std::strstr(file, marker); p != nullptr; p = std::strstr(p + 1, marker)) {
      if (best == nullptr || p > best) best = p;
    }
  }
  if (best != nullptr) return best + 1;
  const char* slash = std::strrchr(file, '/');
  return slash != nullptr ? slash + 1 : file;
}

Status cudnn_failure(cudnnStatus_t status, const char* expression, const char* file, int line) {
  char last[1024] = {0};
  cudnnGetLastErrorString(last, sizeof(last));  // also clears it, so a later failure starts clean
  const char* name = cudnnGetErrorString(status);
  std::string message = std::string(expression) + " failed with " + (name != nullptr ? name : "?") +
                        " (" + std::to_string(static_cast<int>(status)) + ") at " +
                        short_file_name(file) + ":" + std::to_string(line);
  if (last[0] != '\0') message += std::string(": ") + last;
  return Status(status_code_for(status), std::move(message));
}

Status cuda_failure(cudaError_t error, const char* expression, const char* file, int line) {
  // Resets the runtime's last-error state for non-sticky errors (a sticky one stays).
  (void)cudaGetLastError();
  const char* name = cudaGetErrorName(error);
  const char* words = cudaGetErrorString(error);
  std::string message = std::string(expression) + " failed with " + (name != nullptr ? name : "?") +
                        " (" + std::to_string(static_cast<int>(error)) + ") at " +
                        short_file_name(file) + ":" + std::to_string(line);
  if (words != nullptr && words[0] != '\0') message += std::string(": ") + words;
  return Status(status_code_for(error), std::move(message));
}

}  // namespace convplan::cudnn_detail
