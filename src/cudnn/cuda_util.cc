#include "cudnn/cuda_util.h"

#include <cudnn.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

#include "convplan/cudnn_backend.h"
#include "cudnn/check.h"

namespace convplan::cudnn_detail {

DeviceGuard::DeviceGuard(int device) {
  status_ = [&]() -> Status {
    CONVPLAN_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) {
      CONVPLAN_CUDA_CHECK(cudaSetDevice(device));
      switched_ = true;
    }
    return ok_status();
  }();
}

DeviceGuard::~DeviceGuard() {
  if (switched_) (void)cudaSetDevice(previous_);
}

namespace {
std::string seconds_text(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", s);
  return text;
}
}  // namespace

Status wait_for_event(const CudaEvent& event, double deadline_s) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  for (int polls = 0;; ++polls) {
    const cudaError_t e = cudaEventQuery(event.get());
    if (e == cudaSuccess) return ok_status();
    if (e != cudaErrorNotReady) CONVPLAN_CUDA_CHECK(e);
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (waited > deadline_s) {
      return Status(StatusCode::kDeadlineExceeded,
                    "the GPU work before an event did not finish within " +
                        seconds_text(deadline_s) +
                        " s; it may never finish, and this process's later work on the device "
                        "waits behind it");
    }
    // Spin for the short runs that most timing is made of, then sleep: a run of a second costs
    // the host no core, and reports at most 0.1 ms late (the time itself comes from events).
    if (polls < 2000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
}

Status synchronize_stream(cudaStream_t stream, double deadline_s) {
  CONVPLAN_ASSIGN_OR_RETURN(CudaEvent done, CudaEvent::create());
  CONVPLAN_CUDA_CHECK(cudaEventRecord(done.get(), stream));
  return wait_for_event(done, deadline_s);
}

StatusOr<CudaEvent> CudaEvent::create() {
  cudaEvent_t e = nullptr;
  CONVPLAN_CUDA_CHECK(cudaEventCreate(&e));
  return CudaEvent(e);
}

CudaEvent& CudaEvent::operator=(CudaEvent&& other) noexcept {
  if (this != &other) {
    reset();
    event_ = other.event_;
    other.event_ = nullptr;
  }
  return *this;
}

void CudaEvent::reset() noexcept {
  if (event_ != nullptr) {
    (void)cudaEventDestroy(event_);
    event_ = nullptr;
  }
}

StatusOr<void*> CudaDeviceAllocator::allocate(size_t bytes) {
  if (bytes == 0) return static_cast<void*>(nullptr);
  void* p = nullptr;
  auto run = [&]() -> Status {
    CONVPLAN_CUDA_CHECK(cudaMalloc(&p, bytes));
    return ok_status();
  };
  Status s;
  if (device_ >= 0) {
    DeviceGuard guard(device_);
    CONVPLAN_RETURN_IF_ERROR(guard.status());
    s = run();
  } else {
    s = run();
  }
  if (!s.ok()) return s.with_context("allocating " + std::to_string(bytes) + " bytes");
  return p;
}

void CudaDeviceAllocator::deallocate(void* ptr, size_t /*bytes*/) {
  if (ptr == nullptr) return;
  // cudaFree needs no particular current device for a pointer of a known allocation.
  (void)cudaFree(ptr);
}

StatusOr<int> device_of_stream(cudaStream_t stream) {
  int device = -1;
  CONVPLAN_CUDA_CHECK(cudaStreamGetDevice(stream, &device));
  return device;
}

std::string uuid_text(const cudaUUID_t& uuid) {
  const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
  char buf[64];
  std::snprintf(buf, sizeof(buf),
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return buf;
}

StatusOr<DeviceInfo> query_device(int device) {
  cudaDeviceProp props{};
  CONVPLAN_CUDA_CHECK(cudaGetDeviceProperties(&props, device));
  DeviceInfo d;
  d.ordinal = device;
  d.uuid = uuid_text(props.uuid);
  d.name = props.name;
  d.cc_major = props.major;
  d.cc_minor = props.minor;
  d.sm_count = props.multiProcessorCount;
  d.l2_bytes = props.l2CacheSize;
  d.memory_bytes = static_cast<int64_t>(props.totalGlobalMem);
  d.cudnn_version = static_cast<int64_t>(cudnnGetVersion());
  return d;
}

}  // namespace convplan::cudnn_detail

namespace convplan {

using cudnn_detail::DeviceGuard;

namespace {

struct DeviceCount {
  Status status;
  int count = 0;
};

// Asked once, on first use (never at static initialization).
const DeviceCount& device_count() {
  static const DeviceCount result = [] {
    DeviceCount r;
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      r.status =
          Status(StatusCode::kNoDevice, std::string("cudaGetDeviceCount failed with ") +
                                            cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
    } else if (n <= 0) {
      r.status = Status(StatusCode::kNoDevice, "cudaGetDeviceCount reports 0 devices");
    } else {
      r.count = n;
    }
    return r;
  }();
  return result;
}

}  // namespace

Status gpu_available() { return device_count().status; }
int cuda_device_count() { return device_count().count; }
int64_t cudnn_runtime_version() { return static_cast<int64_t>(cudnnGetVersion()); }
int cuda_runtime_version() {
  int v = 0;
  if (cudaRuntimeGetVersion(&v) != cudaSuccess) return 0;
  return v;
}

DeviceAllocator& cuda_allocator() {
  static cudnn_detail::CudaDeviceAllocator* allocator = new cudnn_detail::CudaDeviceAllocator(-1);
  return *allocator;
}

namespace {
Status check_device(int device) {
  CONVPLAN_RETURN_IF_ERROR(gpu_available());
  if (device < 0 || device >= cuda_device_count()) {
    return invalid_argument("device=" + std::to_string(device) + " is not in [0, " +
                            std::to_string(cuda_device_count()) + ")");
  }
  return ok_status();
}
}  // namespace

StatusOr<CudnnContext> CudnnContext::create(int device) {
  CONVPLAN_RETURN_IF_ERROR(check_device(device));
  DeviceGuard guard(device);
  CONVPLAN_RETURN_IF_ERROR(guard.status());
  CudnnContext ctx;  // releases whatever was made if a later step fails
  ctx.device_ = device;
  CONVPLAN_CUDA_CHECK(cudaStreamCreateWithFlags(&ctx.stream_, cudaStreamNonBlocking));
  CONVPLAN_CUDNN_CHECK(cudnnCreate(&ctx.handle_));
  CONVPLAN_CUDNN_CHECK(cudnnSetStream(ctx.handle_, ctx.stream_));
  return ctx;
}

StatusOr<CudnnContext> CudnnContext::for_stream(int device, cudaStream_t stream) {
  CONVPLAN_RETURN_IF_ERROR(check_device(device));
  DeviceGuard guard(device);
  CONVPLAN_RETURN_IF_ERROR(guard.status());
  CudnnContext ctx;
  ctx.device_ = device;
  ctx.owns_stream_ = false;
  ctx.stream_ = stream;
  CONVPLAN_CUDNN_CHECK(cudnnCreate(&ctx.handle_));
  CONVPLAN_CUDNN_CHECK(cudnnSetStream(ctx.handle_, ctx.stream_));
  return ctx;
}

Status CudnnContext::set_stream(cudaStream_t stream) {
  if (owns_stream_ || handle_ == nullptr) {
    return invalid_argument("set_stream: the context owns its stream (made by create) or is empty");
  }
  CONVPLAN_CUDNN_CHECK(cudnnSetStream(handle_, stream));
  stream_ = stream;
  return ok_status();
}

CudnnContext::CudnnContext(CudnnContext&& other) noexcept
    : handle_(other.handle_),
      stream_(other.stream_),
      device_(other.device_),
      owns_stream_(other.owns_stream_) {
  other.handle_ = nullptr;
  other.stream_ = nullptr;
  other.device_ = -1;
  other.owns_stream_ = true;
}

CudnnContext& CudnnContext::operator=(CudnnContext&& other) noexcept {
  if (this != &other) {
    release();
    handle_ = other.handle_;
    stream_ = other.stream_;
    device_ = other.device_;
    owns_stream_ = other.owns_stream_;
    other.handle_ = nullptr;
    other.stream_ = nullptr;
    other.device_ = -1;
    other.owns_stream_ = true;
  }
  return *this;
}

CudnnContext::~CudnnContext() { release(); }

void CudnnContext::release() noexcept {
  if (handle_ == nullptr && stream_ == nullptr) return;
  DeviceGuard guard(device_ >= 0 ? device_ : 0);
  if (handle_ != nullptr) (void)cudnnDestroy(handle_);
  if (stream_ != nullptr && owns_stream_) (void)cudaStreamDestroy(stream_);
  handle_ = nullptr;
  stream_ = nullptr;
}

Status CudnnContext::synchronize() const {
  if (stream_ == nullptr) return invalid_argument("the context holds no stream (moved from?)");
  CONVPLAN_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return ok_status();
}

}  // namespace convplan
