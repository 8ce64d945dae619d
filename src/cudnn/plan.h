// CudnnPlan: a finalized cuDNN execution plan bound to the handle it was built with, plus the
// last variant pack it executed with, so that a repeated call with the same pointers costs one
// cudnnBackendExecute. Used by one thread at a time (see backend.h). Internal to src/cudnn.
#pragma once

#include <cudnn.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "convplan/backend.h"
#include "cudnn/descriptor.h"
#include "cudnn/graph.h"

namespace convplan::cudnn_detail {

struct KernelCache;
class KernelCaches;

class CudnnPlan final : public Plan {
 public:
  // REQUIRES: plan is a finalized execution plan for the graph of `problem` on `handle`; the
  // descriptors in `keep_alive` (graph, engine, configuration) are those it was made from.
  // `chain`: the post-op chain of the graph's problem (fused into the plan), whose bias and
  // residual the variant pack then carries; empty for a plain convolution.
  CudnnPlan(cudnnHandle_t handle, EngineConfig config, NoteSet notes, int64_t workspace_bytes,
            BackendDescriptor plan, std::vector<BackendDescriptor> keep_alive, PostOps chain = {});

  cudnnHandle_t handle() const override { return handle_; }
  const EngineConfig& config() const override { return config_; }
  NoteSet notes() const override { return notes_; }
  int64_t workspace_bytes() const override { return workspace_bytes_; }
  // sizeof(*this) + ~1 KiB per descriptor held + the size of the plan's JSON form, which is the
  // best available measure of cuDNN's own per-plan state (1.6-68 KB seen on 9.19); 64 KiB when
  // the JSON is not available. The JSON is measured once, on the first call.
  size_t host_bytes() const override;
  Status execute(cudnnHandle_t handle, const TensorPointers& tensors, void* workspace) override;
  StatusOr<std::string> to_json() const override;

  // For tests and benchmarks: the raw plan, and the variant pack of the last execute (null before
  // the first).
  cudnnBackendDescriptor_t raw_plan() const { return plan_.get(); }
  // Keeps the kernel cache the plan was finalized with as long as the plan (null: none).
  void keep_kernel_cache(std::shared_ptr<const KernelCache> cache) {
    kernel_cache_ = std::move(cache);
  }
  bool uses_kernel_cache() const { return kernel_cache_ != nullptr; }
  cudnnBackendDescriptor_t raw_variant_pack() const { return variant_pack_.get(); }

 private:
  Status make_variant_pack(const TensorPointers& tensors, void* workspace);

  cudnnHandle_t handle_;
  EngineConfig config_;
  NoteSet notes_;
  int64_t workspace_bytes_;
  BackendDescriptor plan_;
  std::vector<BackendDescriptor> keep_alive_;
  std::shared_ptr<const KernelCache> kernel_cache_;
  // The last variant pack and the pointers it holds.
  BackendDescriptor variant_pack_;
  TensorPointers pack_tensors_;
  void* pack_workspace_ = nullptr;
  mutable std::optional<size_t> json_bytes_;
  PostOps chain_;
};

// kInvalidArgument naming the tensor when a pointer is not kTensorAlignment-aligned, or when
// workspace is null though workspace_bytes > 0. With a chain, bias and residual too where the
// chain has bias and add.
Status check_pointers(const TensorPointers& tensors, void* workspace, int64_t workspace_bytes,
                      const PostOps& chain = {});

// A fresh graph on `handle`, the engine by index, a configuration with the knob choices, the plan
// finalized. kNotSupported when the engine, its notes or a knob value does not fit the problem.
// With `kernel_caches` (those of the handle's device), a runtime-compiled engine's plan is built
// on a dynamic-shape graph with its topology's kernel cache, so that it reuses a kernel compiled
// for another shape; an engine that cannot be built so is built as without.
StatusOr<std::unique_ptr<CudnnPlan>> build_plan(cudnnHandle_t handle, const ConvProblem& problem,
                                                const EngineConfig& config,
                                                KernelCaches* kernel_caches = nullptr);
// A plan re-created on `handle` from its JSON form; config and notes are read back from it (the
// knob choices as far as cuDNN reports them for the deserialized configuration).
StatusOr<std::unique_ptr<CudnnPlan>> plan_from_json(cudnnHandle_t handle,
                                                    const ConvProblem& problem,
                                                    std::string_view json);
// The JSON form of a finalized plan.
StatusOr<std::string> plan_json(const BackendDescriptor& plan);

}  // namespace convplan::cudnn_detail
