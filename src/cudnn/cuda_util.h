// Small CUDA pieces for the cuDNN backend: a scoped current device, events, a per-device
// allocator, and the identity of a device. Internal to src/cudnn.
#pragma once

#include <cuda_runtime_api.h>

#include "convplan/backend.h"
#include "convplan/device.h"
#include "convplan/status.h"

namespace convplan::cudnn_detail {

// Makes `device` current for its lifetime and restores the previous one after. A failed switch is
// reported by status(); the destructor never throws and ignores a failed restore.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  ~DeviceGuard();
  const Status& status() const { return status_; }

 private:
  int previous_ = -1;
  bool switched_ = false;
  Status status_;
};

// One CUDA event (timing enabled), on the device current at create(). Move-only.
class CudaEvent {
 public:
  CudaEvent() = default;
  static StatusOr<CudaEvent> create();
  CudaEvent(CudaEvent&& other) noexcept : event_(other.event_) { other.event_ = nullptr; }
  CudaEvent& operator=(CudaEvent&& other) noexcept;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  ~CudaEvent() { reset(); }
  void reset() noexcept;
  cudaEvent_t get() const { return event_; }

 private:
  explicit CudaEvent(cudaEvent_t e) : event_(e) {}
  cudaEvent_t event_ = nullptr;
};

// cudaMalloc/cudaFree on `device`, or on the current device when device < 0. Thread-safe.
class CudaDeviceAllocator final : public DeviceAllocator {
 public:
  explicit CudaDeviceAllocator(int device) : device_(device) {}
  StatusOr<void*> allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) override;

 private:
  int device_;
};

// How long the tuner waits for the device before kDeadlineExceeded. The slowest candidates that
// finished took about 1 s a run (engine 0, ResNet-50's backward-filter at batch 256 on an H100);
// the exhaustive budget is 10 s a problem. cuDNN 9.19's engine 77 ran backward-data kernels that
// never finished (issue 21), and a tune that synchronized on them never returned.
constexpr double kDeviceDeadlineSeconds = 60;

// Waits for `event` like cudaEventSynchronize, but at most `deadline_s` seconds: kDeadlineExceeded
// after that, the work before the event still running.
Status wait_for_event(const CudaEvent& event, double deadline_s);
// cudaStreamSynchronize through an event and wait_for_event.
Status synchronize_stream(cudaStream_t stream, double deadline_s = kDeviceDeadlineSeconds);

// The device the stream runs on (cudaStreamGetDevice).
StatusOr<int> device_of_stream(cudaStream_t stream);
// Name, UUID, compute capability, SMs, L2 and memory of a device, and cudnnGetVersion().
// Costs a cudaGetDeviceProperties (~ms); callers cache it.
StatusOr<DeviceInfo> query_device(int device);
// "GPU-8f0c1a2b-...", as nvidia-smi prints it.
std::string uuid_text(const cudaUUID_t& uuid);

}  // namespace convplan::cudnn_detail
