#include "cudnn/epilogue_plan.h"

#include <cudnn.h>

#include <utility>

#include "cudnn/check.h"
#include "epilogues/epilogue.h"
#include "epilogues/epilogue_kernels.h"

namespace convplan::cudnn_detail {
namespace {

epilogue_detail::EpilogueType epilogue_type(DataType t) {
  switch (t) {
    case DataType::kFloat: return epilogue_detail::EpilogueType::kFloat;
    case DataType::kHalf: return epilogue_detail::EpilogueType::kHalf;
    case DataType::kBFloat16: return epilogue_detail::EpilogueType::kBFloat16;
    case DataType::kDouble: return epilogue_detail::EpilogueType::kDouble;
  }
  return epilogue_detail::EpilogueType::kFloat;
}

Status check_unfused(const ConvProblem& problem, const EngineConfig& config) {
  if (!config.unfused) {
    return invalid_argument(config.to_string() + " is not an unfused configuration");
  }
  if (problem.post_ops.empty()) {
    return invalid_argument(config.to_string() + " needs a problem with a post-op chain; " +
                            problem.to_string() + " has none");
  }
  return problem.validate();
}

}  // namespace

UnfusedPlan::UnfusedPlan(const ConvProblem& problem, std::unique_ptr<CudnnPlan> conv)
    : problem_(problem),
      config_(conv->config()),
      conv_(std::move(conv)),
      params_(epilogue_detail::epilogue_params(problem)),
      type_(static_cast<int>(epilogue_type(problem.data_type))) {
  config_.unfused = true;
}

Status UnfusedPlan::execute(cudnnHandle_t handle, const TensorPointers& tensors, void* workspace) {
  // A foreign handle: the convolution's kWrongHandle, nothing run. Then the chain's tensors are
  // checked before the convolution runs, so that a missing bias leaves y untouched.
  if (handle != conv_->handle()) return conv_->execute(handle, tensors, workspace);
  if (!any_checked_ || !(tensors == checked_)) {
    CONVPLAN_RETURN_IF_ERROR(
        check_pointers(tensors, workspace, conv_->workspace_bytes(), problem_.post_ops));
    checked_ = tensors;
    any_checked_ = true;
  }
  CONVPLAN_RETURN_IF_ERROR(conv_->execute(handle, tensors, workspace));
  cudaStream_t stream = nullptr;
  CONVPLAN_CUDNN_CHECK(cudnnGetStream(handle, &stream));
  const cudaError_t e =
      epilogue_detail::enqueue_epilogue(stream, static_cast<epilogue_detail::EpilogueType>(type_),
                                        params_, tensors.y, tensors.bias, tensors.residual);
  if (e != cudaSuccess) {
    return Status(StatusCode::kCudaError, std::string("epilogue after ") + config_.to_string() +
                                              ": " + cudaGetErrorString(e));
  }
  return ok_status();
}

StatusOr<std::string> UnfusedPlan::to_json() const {
  CONVPLAN_ASSIGN_OR_RETURN(std::string json, conv_->to_json());
  return std::string(kUnfusedJsonPrefix) + json;
}

StatusOr<std::unique_ptr<Plan>> build_unfused_plan(cudnnHandle_t handle, const ConvProblem& problem,
                                                   const EngineConfig& config,
                                                   KernelCaches* kernel_caches) {
  CONVPLAN_RETURN_IF_ERROR(check_unfused(problem, config));
  EngineConfig plain = config;
  plain.unfused = false;
  CONVPLAN_ASSIGN_OR_RETURN(std::unique_ptr<CudnnPlan> conv,
                            build_plan(handle, problem.without_post_ops(), plain, kernel_caches));
  return std::unique_ptr<Plan>(std::make_unique<UnfusedPlan>(problem, std::move(conv)));
}

StatusOr<std::unique_ptr<Plan>> unfused_plan_from_json(cudnnHandle_t handle,
                                                       const ConvProblem& problem,
                                                       std::string_view json) {
  if (json.substr(0, kUnfusedJsonPrefix.size()) != kUnfusedJsonPrefix) {
    return invalid_argument("an unfused plan's JSON starts with '" +
                            std::string(kUnfusedJsonPrefix) + "'");
  }
  if (problem.post_ops.empty()) {
    return invalid_argument("an unfused plan's JSON needs a problem with a post-op chain; " +
                            problem.to_string() + " has none");
  }
  json.remove_prefix(kUnfusedJsonPrefix.size());
  CONVPLAN_ASSIGN_OR_RETURN(std::unique_ptr<CudnnPlan> conv,
                            plan_from_json(handle, problem.without_post_ops(), json));
  return std::unique_ptr<Plan>(std::make_unique<UnfusedPlan>(problem, std::move(conv)));
}

}  // namespace convplan::cudnn_detail
