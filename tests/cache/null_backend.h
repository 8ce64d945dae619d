// NullBackend: a Backend whose plans do nothing (and allocate nothing), for measuring and
// checking the cache's own hit path: the microbench's timings and the zero-allocation test.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "convplan/backend.h"

namespace convplan {

inline cudnnHandle_t fake_handle(int i) {
  return reinterpret_cast<cudnnHandle_t>(static_cast<uintptr_t>(0x7f0000001000 + 0x1230 * i));
}

class NullPlan final : public Plan {
 public:
  NullPlan(cudnnHandle_t handle, EngineConfig config)
      : handle_(handle), config_(std::move(config)) {}
  cudnnHandle_t handle() const override { return handle_; }
  const EngineConfig& config() const override { return config_; }
  NoteSet notes() const override { return 0; }
  int64_t workspace_bytes() const override { return 4096; }
  size_t host_bytes() const override { return 64; }
  Status execute(cudnnHandle_t handle, const TensorPointers& tensors, void* workspace) override {
    if (handle != handle_) return {StatusCode::kWrongHandle, "foreign handle"};
    // Something the compiler cannot drop.
    sink_.store(reinterpret_cast<uintptr_t>(tensors.y) ^ reinterpret_cast<uintptr_t>(workspace),
                std::memory_order_relaxed);
    return ok_status();
  }
  StatusOr<std::string> to_json() const override { return not_supported("no JSON"); }

 private:
  cudnnHandle_t handle_;
  EngineConfig config_;
  std::atomic<uintptr_t> sink_{0};
};

class HostAllocator final : public DeviceAllocator {
 public:
  StatusOr<void*> allocate(size_t bytes) override {
    if (bytes == 0) return static_cast<void*>(nullptr);
    return std::malloc(bytes);
  }
  void deallocate(void* ptr, size_t) override { std::free(ptr); }
};

class NullBackend final : public Backend {
 public:
  std::string name() const override { return "null"; }
  StatusOr<DeviceInfo> device_of(cudnnHandle_t) override {
    DeviceInfo d;
    d.ordinal = 0;
    d.name = "Null GPU";
    d.cc_major = 9;
    d.sm_count = 1;
    return d;
  }
  StatusOr<std::vector<Candidate>> candidates(cudnnHandle_t, const ConvProblem&,
                                              CandidateSource) override {
    Candidate c;
    c.config.engine_id = 0;
    return std::vector<Candidate>{c};
  }
  StatusOr<std::vector<KnobInfo>> knobs(cudnnHandle_t, const ConvProblem&, int64_t) override {
    return std::vector<KnobInfo>{};
  }
  StatusOr<std::unique_ptr<Plan>> build(cudnnHandle_t handle, const ConvProblem&,
                                        const EngineConfig& config) override {
    return std::unique_ptr<Plan>(std::make_unique<NullPlan>(handle, config));
  }
  StatusOr<std::unique_ptr<Plan>> build_from_json(cudnnHandle_t, const ConvProblem&,
                                                  std::string_view) override {
    return not_supported("no JSON");
  }
  DeviceAllocator& default_allocator(cudnnHandle_t) override { return allocator_; }
  Status copy_to_device(cudnnHandle_t, void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
    return ok_status();
  }
  Status copy_to_host(cudnnHandle_t, void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
    return ok_status();
  }
  Status fill(cudnnHandle_t, void* dst, uint8_t byte, size_t bytes) override {
    std::memset(dst, byte, bytes);
    return ok_status();
  }
  StatusOr<std::vector<float>> time(Plan&, const TensorPointers&, void*, int, int runs, bool,
                                    float) override {
    return std::vector<float>(static_cast<size_t>(runs), 1.0f);
  }

 private:
  HostAllocator allocator_;
};

}  // namespace convplan
