// The narrow seam between convplan's policy code (the tuner and the plan cache) and whatever
// runs convolutions: the cuDNN backend in production, a scripted backend in CI.
//
// A Backend is shared by every thread and must be thread-safe. A Plan is a live object bound to
// one device and the handle it was built with; it is used by one thread at a time (cuDNN plans
// are not safe to share across threads, pytorch/pytorch #103793) and never executes with another
// handle: execute() with a foreign handle returns kWrongHandle and touches nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "convplan/device.h"
#include "convplan/engine_config.h"
#include "convplan/export.h"
#include "convplan/problem.h"
#include "convplan/status.h"

// The same typedef as cudnn.h's, so that public headers need not include cuDNN.
struct cudnnContext;
typedef struct cudnnContext* cudnnHandle_t;

namespace convplan {

// Device pointers of the three logical tensors (see problem.h); the direction says which one
// is written. Every pointer must be valid for the problem's span of its tensor. A problem with a
// post-op chain also reads bias (bias_shape()) and residual (residual_shape()) where the chain
// has bias and add; they are ignored otherwise, and may stay null then.
struct CONVPLAN_EXPORT TensorPointers {
  void* x = nullptr;
  void* w = nullptr;
  void* y = nullptr;
  const void* bias = nullptr;
  const void* residual = nullptr;
  bool operator==(const TensorPointers&) const = default;
};

// Device memory for workspaces and tuning buffers. Frameworks supply their own (a caching
// allocator); backends supply a default. Must be thread-safe.
class CONVPLAN_EXPORT DeviceAllocator {
 public:
  virtual ~DeviceAllocator() = default;
  // Returns kOutOfMemory (not a crash) when the memory is not there. bytes == 0 gives nullptr.
  virtual StatusOr<void*> allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr, size_t bytes) = 0;
};

// RAII ownership of one allocation from a DeviceAllocator. Move-only. The allocator must outlive
// the buffer: one from a backend's default_allocator() must go before the backend.
class CONVPLAN_EXPORT DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceAllocator* allocator, void* ptr, size_t bytes)
      : allocator_(allocator), ptr_(ptr), bytes_(bytes) {}
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      reset();
      allocator_ = other.allocator_;
      ptr_ = other.ptr_;
      bytes_ = other.bytes_;
      other.allocator_ = nullptr;
      other.ptr_ = nullptr;
      other.bytes_ = 0;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { reset(); }

  static StatusOr<DeviceBuffer> allocate(DeviceAllocator& allocator, size_t bytes) {
    auto p = allocator.allocate(bytes);
    if (!p.ok()) return p.status();
    return DeviceBuffer(&allocator, *p, bytes);
  }
  void reset() {
    if (allocator_ != nullptr && ptr_ != nullptr) allocator_->deallocate(ptr_, bytes_);
    allocator_ = nullptr;
    ptr_ = nullptr;
    bytes_ = 0;
  }
  void* get() const { return ptr_; }
  size_t size() const { return bytes_; }

 private:
  DeviceAllocator* allocator_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

class CONVPLAN_EXPORT Plan {
 public:
  virtual ~Plan() = default;
  virtual cudnnHandle_t handle() const = 0;  // the handle it was built with
  virtual const EngineConfig& config() const = 0;
  virtual NoteSet notes() const = 0;
  virtual int64_t workspace_bytes() const = 0;
  virtual size_t host_bytes() const = 0;  // host memory the plan holds, approximately
  // Enqueues the convolution on `handle`'s stream. Returns kWrongHandle, doing nothing, when
  // handle != this->handle(). REQUIRES: workspace holds workspace_bytes() (may be null if 0).
  // Allocates nothing and synchronizes nothing when called again with the same pointers, so it
  // may run inside CUDA stream capture.
  virtual Status execute(cudnnHandle_t handle, const TensorPointers& tensors, void* workspace) = 0;
  // The plan's serialized form (CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION); kNotSupported
  // where the backend has none.
  virtual StatusOr<std::string> to_json() const = 0;
};

// Where a candidate came from.
enum class CandidateSource {
  kHeuristicInstant,  // CUDNN_HEUR_MODE_INSTANT
  kHeuristicA,        // CUDNN_HEUR_MODE_A
  kHeuristicB,        // CUDNN_HEUR_MODE_B
  kFallback,          // CUDNN_HEUR_MODE_FALLBACK
  kAllEngines,        // every global engine index that supports the problem, default knobs
};
CONVPLAN_EXPORT const char* to_string(CandidateSource s);

struct CONVPLAN_EXPORT Candidate {
  EngineConfig config;
  NoteSet notes = 0;
  int rank = 0;  // position in the source's order, 0 = the source's first choice
};

// A handle with a stream of its own, owned: destroying it destroys both. For work that must not
// use a caller's handle (the cache's background tuning). Not thread-safe: one user at a time.
class CONVPLAN_EXPORT OwnedHandle {
 public:
  virtual ~OwnedHandle() = default;
  virtual cudnnHandle_t get() const = 0;
};

class CONVPLAN_EXPORT Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // The device `handle` runs on (its stream's device).
  virtual StatusOr<DeviceInfo> device_of(cudnnHandle_t handle) = 0;
  // A new handle with a stream of its own on device `ordinal` (DeviceInfo::ordinal). Default:
  // kNotSupported (then the cache tunes background-mode keys in the foreground).
  virtual StatusOr<std::unique_ptr<OwnedHandle>> create_handle(int ordinal);

  // Engine configurations for the problem, best first as the source orders them. Configs that
  // cannot support the problem are left out; an empty list is ok.
  virtual StatusOr<std::vector<Candidate>> candidates(cudnnHandle_t handle,
                                                      const ConvProblem& problem,
                                                      CandidateSource source) = 0;
  // candidates(), where only the problem's rewrites (convplan/rewrite.h) named in `rewrites` add
  // theirs, and the problem its own only when `rewrites` names it as "" (as errata rules do).
  // Limited mode asks heuristics B this way for the problem and the rewrites that came close in
  // mode A: a mode-B query took ~25 ms per rewritten stem problem on the H200. Default: for a
  // backend that does not rewrite, candidates() when `rewrites` holds "", else none.
  virtual StatusOr<std::vector<Candidate>> candidates_for_rewrites(
      cudnnHandle_t handle, const ConvProblem& problem, CandidateSource source,
      const std::vector<std::string>& rewrites);
  // The knobs an engine offers for the problem, for exhaustive search.
  virtual StatusOr<std::vector<KnobInfo>> knobs(cudnnHandle_t handle, const ConvProblem& problem,
                                                int64_t engine_id) = 0;

  // A finalized plan for exactly `config` on `handle`. kNotSupported when the engine or a knob
  // value does not support the problem.
  virtual StatusOr<std::unique_ptr<Plan>> build(cudnnHandle_t handle, const ConvProblem& problem,
                                                const EngineConfig& config) = 0;
  // Re-creates a plan from Plan::to_json() on another handle (much cheaper than build for
  // runtime-compiled engines).
  virtual StatusOr<std::unique_ptr<Plan>> build_from_json(cudnnHandle_t handle,
                                                          const ConvProblem& problem,
                                                          std::string_view json) = 0;

  // What the tuner needs to run candidates: memory, copies and event timing, all on `handle`'s
  // stream. The copies and fill() complete before they return. The allocator lives as long as
  // the backend.
  virtual DeviceAllocator& default_allocator(cudnnHandle_t handle) = 0;
  virtual Status copy_to_device(cudnnHandle_t handle, void* dst, const void* src, size_t bytes) = 0;
  virtual Status copy_to_host(cudnnHandle_t handle, void* dst, const void* src, size_t bytes) = 0;
  virtual Status fill(cudnnHandle_t handle, void* dst, uint8_t byte, size_t bytes) = 0;
  // What the tuner checks of a candidate's output at `src` (a tensor of `shape`, `elem_bytes` per
  // element): copies the elements at `offsets` (element offsets) to dst, in order, and, when
  // scan_poison, returns the smallest offset of an element whose bytes are all 0xFF (the poison
  // of unwritten output; the gaps of a strided layout are not elements), else -1. Completes
  // before it returns. The default copies the whole span to the host and checks it there.
  virtual StatusOr<int64_t> read_output(cudnnHandle_t handle, const void* src,
                                        const TensorShape& shape, int64_t elem_bytes,
                                        bool scan_poison, const std::vector<int64_t>& offsets,
                                        void* dst);
  // The tuner's input data: writes hashed_input_value(seed, i) (reference.h) as `type` for every
  // i in [0, elements) at dst, on `handle`'s stream; completes before it returns. The default
  // makes the values on the host (split across threads) and copies them; the cuDNN backend runs
  // a kernel, so no host copy of a tensor is needed.
  virtual Status fill_hashed(cudnnHandle_t handle, void* dst, DataType type, int64_t elements,
                             uint64_t seed);
  // Runs plan.execute `warmup` times, then `runs` times, each timed with device events on the
  // handle's stream; returns the milliseconds of each timed run. With flush_l2 the L2 cache is
  // flushed before each timed run (its time is not counted). Stops early, returning the times so
  // far, once a run exceeds cutoff_ms (<= 0: no cutoff). A backend may also time the first
  // warm-up run and, when a lower bound of its time is past the cutoff, return that bound alone.
  virtual StatusOr<std::vector<float>> time(Plan& plan, const TensorPointers& tensors,
                                            void* workspace, int warmup, int runs, bool flush_l2,
                                            float cutoff_ms) = 0;
};

}  // namespace convplan
