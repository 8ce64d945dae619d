// The production Backend on cuDNN's backend (graph) API, and the small CUDA pieces a caller needs
// to use it: a cuDNN handle with its own stream, device memory, and what the machine has.
//
// make_cudnn_backend() is thread-safe and one instance serves every thread and device.
// CudnnContext is move-only and used by one thread at a time, like the handle it owns.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "convplan/backend.h"
#include "convplan/export.h"
#include "convplan/status.h"

typedef struct CUstream_st* cudaStream_t;

namespace convplan {

// ok when a CUDA device can be used; else kNoDevice with the reason (no driver, no device).
CONVPLAN_EXPORT Status gpu_available();
CONVPLAN_EXPORT int cuda_device_count();  // 0 where gpu_available() is not ok
// The cuDNN library actually loaded, e.g. 91900 (cudnnGetVersion()), and the CUDA runtime's.
CONVPLAN_EXPORT int64_t cudnn_runtime_version();
CONVPLAN_EXPORT int cuda_runtime_version();

// How the cuDNN backend builds plans.
struct CONVPLAN_EXPORT CudnnBackendOptions {
  // Plans of runtime-compiled forward engines share their compiled kernels across the shapes of
  // one graph topology (types, layout, dense/grouped/depthwise, post-op chain) through cuDNN's
  // kernel cache, one per device and topology (cuDNN 9.5 or later; such plans are built on a
  // dynamic-shape graph). A new shape of a known topology then need not compile again. On by
  // default: on the H200 it cut the limited tuning of MobileNetV2's forward at b256 from 11.3 s
  // to 3.5 s in a fresh process (each depthwise layer's engine 5 compiled once, ~1 s, instead
  // of once per shape), with plans as fast (README, "Tuning cost"). Backward convolutions compile
  // as before: with a cache the tuner's check rejected some depthwise backward-filter plans and
  // served 3-8x slower ones (src/cudnn/kernel_cache.h). Plans with a cache finalize one at a
  // time: cuDNN 9.19 corrupted its heap when threads did so at once.
  bool kernel_cache = true;

  // The defaults with CONVPLAN_KERNEL_CACHE (1/0, true/false, yes/no, on/off) applied;
  // kInvalidArgument naming the variable and its value.
  static StatusOr<CudnnBackendOptions> from_environment();
};

// The backend with the default options; with `options`.
CONVPLAN_EXPORT std::shared_ptr<Backend> make_cudnn_backend();
CONVPLAN_EXPORT std::shared_ptr<Backend> make_cudnn_backend(const CudnnBackendOptions& options);

// A cuDNN handle on `device`, bound to a non-blocking stream that it owns, or (for_stream) to a
// stream that the caller owns, such as a framework's current stream. Move-only.
class CONVPLAN_EXPORT CudnnContext {
 public:
  static StatusOr<CudnnContext> create(int device = 0);
  // The handle is bound to `stream` (null: the legacy default stream), which the context never
  // destroys. REQUIRES: `stream` belongs to `device` and outlives every use of the handle.
  static StatusOr<CudnnContext> for_stream(int device, cudaStream_t stream);
  // Binds the handle to another caller-owned stream of its device (cudnnSetStream, a host-side
  // setter, safe during CUDA graph capture): a framework's thread moves between streams this
  // way, as PyTorch does with its per-thread handles. kInvalidArgument on a context that owns
  // its stream.
  Status set_stream(cudaStream_t stream);
  CudnnContext(CudnnContext&& other) noexcept;
  CudnnContext& operator=(CudnnContext&& other) noexcept;
  CudnnContext(const CudnnContext&) = delete;
  CudnnContext& operator=(const CudnnContext&) = delete;
  ~CudnnContext();

  cudnnHandle_t handle() const { return handle_; }
  cudaStream_t stream() const { return stream_; }
  int device() const { return device_; }
  Status synchronize() const;

 private:
  CudnnContext() = default;
  void release() noexcept;
  cudnnHandle_t handle_ = nullptr;
  cudaStream_t stream_ = nullptr;
  int device_ = -1;
  bool owns_stream_ = true;
};

// cudaMalloc/cudaFree on the current device; kOutOfMemory when cudaMalloc says so.
CONVPLAN_EXPORT DeviceAllocator& cuda_allocator();

// One engine index's answer for a problem, for `convplan engines`.
struct CONVPLAN_EXPORT EngineReport {
  int64_t engine_id = -1;
  Status status;  // ok when a plan with default knobs finalized
  NoteSet notes = 0;
  std::vector<KnobInfo> knobs;
  int64_t workspace_bytes = 0;  // with default knobs, when it finalized
};
// Every global engine index of the problem's operation, in order.
CONVPLAN_EXPORT StatusOr<std::vector<EngineReport>> inspect_engines(cudnnHandle_t handle,
                                                                    const ConvProblem& problem);

}  // namespace convplan
