// UnfusedPlan: a problem with a post-op chain run as two steps on the handle's stream: a cuDNN
// plan of the plain convolution (problem.without_post_ops()), then convplan's epilogue kernel over
// the output (src/epilogues). Its EngineConfig is the convolution's with unfused = true; its JSON
// form is kUnfusedJsonPrefix followed by the convolution plan's JSON. Used by one thread at a
// time, like every Plan. Internal to src/cudnn.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "convplan/backend.h"
#include "cudnn/plan.h"
#include "epilogues/epilogue_math.h"

namespace convplan::cudnn_detail {

inline constexpr std::string_view kUnfusedJsonPrefix = "convplan-unfused:";

class UnfusedPlan final : public Plan {
 public:
  // REQUIRES: conv was built for problem.without_post_ops() on its handle; problem has a chain.
  UnfusedPlan(const ConvProblem& problem, std::unique_ptr<CudnnPlan> conv);

  cudnnHandle_t handle() const override { return conv_->handle(); }
  const EngineConfig& config() const override { return config_; }
  NoteSet notes() const override { return conv_->notes(); }
  int64_t workspace_bytes() const override { return conv_->workspace_bytes(); }
  size_t host_bytes() const override { return sizeof(*this) + conv_->host_bytes(); }
  // The convolution, then the epilogue, both enqueued on the handle's stream; kWrongHandle (doing
  // nothing) for a foreign handle. Nothing allocated or synchronized: capture-safe.
  Status execute(cudnnHandle_t handle, const TensorPointers& tensors, void* workspace) override;
  StatusOr<std::string> to_json() const override;

 private:
  ConvProblem problem_;
  EngineConfig config_;
  std::unique_ptr<CudnnPlan> conv_;
  epilogue_detail::EpilogueParams params_;
  int type_ = 0;            // epilogue_detail::EpilogueType
  TensorPointers checked_;  // the last pointers that passed the checks
  bool any_checked_ = false;
};

// The unfused plan of `config` (unfused = true) for a problem with a chain: kInvalidArgument
// when either is missing, else build_plan's answer for the plain convolution (with
// `kernel_caches`, as there).
StatusOr<std::unique_ptr<Plan>> build_unfused_plan(cudnnHandle_t handle, const ConvProblem& problem,
                                                   const EngineConfig& config,
                                                   KernelCaches* kernel_caches = nullptr);
// The same from UnfusedPlan::to_json() (kInvalidArgument without the prefix).
StatusOr<std::unique_ptr<Plan>> unfused_plan_from_json(cudnnHandle_t handle,
                                                       const ConvProblem& problem,
                                                       std::string_view json);

}  // namespace convplan::cudnn_detail
