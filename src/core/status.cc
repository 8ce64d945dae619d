#include "convplan/status.h"

namespace convplan {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kNotSupported: return "not supported";
    case StatusCode::kOutOfMemory: return "out of memory";
    case StatusCode::kCudnnError: return "cuDNN error";
    case StatusCode::kCudaError: return "CUDA error";
    case StatusCode::kCorruptData: return "corrupt data";
    case StatusCode::kNotFound: return "not found";
    case StatusCode::kWrongHandle: return "wrong handle";
    case StatusCode::kNoDevice: return "no device";
    case StatusCode::kIoError: return "I/O error";
    case StatusCode::kInternal: return "internal error";
    case StatusCode::kCancelled: return "cancelled";
    case StatusCode::kDeadlineExceeded: return "deadline exceeded";
  }
  return "unknown status";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return std::string(status_code_name(code_)) + ": " + message_;
}

Status Status::with_context(const std::string& context) const {
  if (ok()) return *this;
  return Status(code_, context + ": " + message_);
}

}  // namespace convplan
