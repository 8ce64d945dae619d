// with_rewrites(): a Backend decorator that adds rewritten candidates and builds their plans.
#include <cudnn.h>

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "convplan/environment.h"
#include "convplan/rewrite.h"
#include "rewrites/rewrite_internal.h"
#include "rewrites/transform_kernels.h"

namespace convplan {
namespace {

// Inner candidates kept per rewrite and source: the rewritten problems' best few. Each one costs
// a validation run and timing in the tuner; the heuristics' later choices rarely win.
constexpr size_t kCandidatesPerRewrite = 3;

// A plan's JSON as the rewriting backend writes it: the rewrite's name and the inner plan's JSON.
constexpr const char* kJsonRewriteKey = "convplan_rewrite";
constexpr const char* kJsonPlanKey = "inner_plan";

// pre-transforms -> inner plan -> post-transform, all on the handle's stream. Scratch lives in the
// workspace after the inner plan's part, so nothing is allocated when it runs.
class RewrittenPlan final : public Plan {
 public:
  RewrittenPlan(Rewrite rewrite, std::unique_ptr<Plan> inner)
      : rewrite_(std::move(rewrite)), inner_(std::move(inner)) {
    config_ = inner_->config();
    config_.rewrite = rewrite_.name();
    inner_bytes_ = (inner_->workspace_bytes() + rewrites::kScratchAlign - 1) /
                   rewrites::kScratchAlign * rewrites::kScratchAlign;
  }
  cudnnHandle_t handle() const override { return inner_->handle(); }
  const EngineConfig& config() const override { return config_; }
  NoteSet notes() const override { return inner_->notes(); }
  int64_t workspace_bytes() const override { return inner_bytes_ + rewrite_.scratch_bytes(); }
  size_t host_bytes() const override { return inner_->host_bytes() + sizeof(*this); }
  Status execute(cudnnHandle_t handle, const TensorPointers& tensors, void* workspace) override;
  StatusOr<std::string> to_json() const override;

 private:
  void* scratch(void* workspace, TensorRole tensor) const {
    return static_cast<char*>(workspace) + inner_bytes_ +
           rewrites::scratch_offset(rewrite_, tensor);
  }
  Status launch(const rewrites::Step& step, const TensorPointers& user, void* workspace,
                cudaStream_t stream) const;

  Rewrite rewrite_;
  std::unique_ptr<Plan> inner_;
  EngineConfig config_;
  int64_t inner_bytes_ = 0;
};

Status RewrittenPlan::launch(const rewrites::Step& step, const TensorPointers& user,
                             void* workspace, cudaStream_t stream) const {
  const ConvProblem& p = rewrite_.original;
  const rewrites::TransformDesc t =
      rewrites::transform_desc(rewrite_, step.tensor, step.to_rewritten,
                               step.to_rewritten ? 1.0 : p.alpha, step.to_rewritten ? 0.0 : p.beta);
  void* original = by_role(step.tensor, user.x, user.w, user.y);
  void* copy = scratch(workspace, step.tensor);
  const int rc = rewrites::launch_transform(t, step.to_rewritten ? original : copy,
                                            step.to_rewritten ? copy : original, stream);
  if (rc != 0) {
    return Status(StatusCode::kCudaError, "rewrite " + rewrite_.name() + " transform of " +
                                              to_string(step.tensor) + ": CUDA error " +
                                              std::to_string(rc));
  }
  return ok_status();
}

Status RewrittenPlan::execute(cudnnHandle_t handle, const TensorPointers& tensors,
                              void* workspace) {
  if (handle != inner_->handle()) {
    return Status(StatusCode::kWrongHandle, "rewritten plan " + config_.to_string() +
                                                " asked to execute with a foreign handle");
  }
  cudaStream_t stream = nullptr;
  if (cudnnGetStream(handle, &stream) != CUDNN_STATUS_SUCCESS) {
    return Status(StatusCode::kCudnnError,
                  "cudnnGetStream failed for rewritten plan " + config_.to_string());
  }
  for (const rewrites::Step& s : rewrites::pre_steps(rewrite_)) {
    CONVPLAN_RETURN_IF_ERROR(launch(s, tensors, workspace, stream));
  }
  TensorPointers inner = tensors;
  for (TensorRole t : kTensorRoles) {
    if (rewrite_.transforms(t)) by_role(t, inner.x, inner.w, inner.y) = scratch(workspace, t);
  }
  CONVPLAN_RETURN_IF_ERROR(inner_->execute(handle, inner, inner_bytes_ > 0 ? workspace : nullptr));
  for (const rewrites::Step& s : rewrites::post_steps(rewrite_)) {
    CONVPLAN_RETURN_IF_ERROR(launch(s, tensors, workspace, stream));
  }
  return ok_status();
}

StatusOr<std::string> RewrittenPlan::to_json() const {
  CONVPLAN_ASSIGN_OR_RETURN(std::string inner, inner_->to_json());
  nlohmann::json j = {{kJsonRewriteKey, rewrite_.name()}, {kJsonPlanKey, std::move(inner)}};
  return j.dump();
}

bool rewrites_enabled_by_environment() {
  // The shared boolean reader (every usual spelling); a malformed value is reported by
  // TunePolicy::from_environment, which reads the same variable, so here it leaves rewrites on.
  StatusOr<bool> enabled = env_bool("CONVPLAN_REWRITES", true);
  return !enabled.ok() || *enabled;
}

class RewritingBackend final : public Backend {
 public:
  RewritingBackend(std::shared_ptr<Backend> inner, bool enabled)
      : inner_(std::move(inner)), enabled_(enabled) {}

  std::string name() const override { return inner_->name() + "+rewrites"; }
  StatusOr<DeviceInfo> device_of(cudnnHandle_t handle) override {
    return inner_->device_of(handle);
  }
  StatusOr<std::vector<Candidate>> candidates(cudnnHandle_t handle, const ConvProblem& problem,
                                              CandidateSource source) override {
    return gather(handle, problem, source, nullptr);
  }
  StatusOr<std::vector<Candidate>> candidates_for_rewrites(
      cudnnHandle_t handle, const ConvProblem& problem, CandidateSource source,
      const std::vector<std::string>& rewrites) override {
    return gather(handle, problem, source, &rewrites);
  }
  StatusOr<std::vector<KnobInfo>> knobs(cudnnHandle_t handle, const ConvProblem& problem,
                                        int64_t engine_id) override {
    return inner_->knobs(handle, problem, engine_id);
  }
  StatusOr<std::unique_ptr<Plan>> build(cudnnHandle_t handle, const ConvProblem& problem,
                                        const EngineConfig& config) override;
  StatusOr<std::unique_ptr<Plan>> build_from_json(cudnnHandle_t handle, const ConvProblem& problem,
                                                  std::string_view json) override;
  DeviceAllocator& default_allocator(cudnnHandle_t handle) override {
    return inner_->default_allocator(handle);
  }
  Status copy_to_device(cudnnHandle_t handle, void* dst, const void* src, size_t bytes) override {
    return inner_->copy_to_device(handle, dst, src, bytes);
  }
  Status copy_to_host(cudnnHandle_t handle, void* dst, const void* src, size_t bytes) override {
    return inner_->copy_to_host(handle, dst, src, bytes);
  }
  Status fill(cudnnHandle_t handle, void* dst, uint8_t byte, size_t bytes) override {
    return inner_->fill(handle, dst, byte, bytes);
  }
  // Forwarded, or the tuner's inputs would be made on the host and background mode would tune in
  // the foreground (the base class's defaults).
  Status fill_hashed(cudnnHandle_t handle, void* dst, DataType type, int64_t elements,
                     uint64_t seed) override {
    return inner_->fill_hashed(handle, dst, type, elements, seed);
  }
  StatusOr<std::unique_ptr<OwnedHandle>> create_handle(int ordinal) override {
    return inner_->create_handle(ordinal);
  }
  StatusOr<int64_t> read_output(cudnnHandle_t handle, const void* src, const TensorShape& shape,
                                int64_t elem_bytes, bool scan_poison,
                                const std::vector<int64_t>& offsets, void* dst) override {
    return inner_->read_output(handle, src, shape, elem_bytes, scan_poison, offsets, dst);
  }
  StatusOr<std::vector<float>> time(Plan& plan, const TensorPointers& tensors, void* workspace,
                                    int warmup, int runs, bool flush_l2, float cutoff_ms) override {
    // The inner backend times through Plan::execute, so a rewritten plan is timed end to end.
    return inner_->time(plan, tensors, workspace, warmup, runs, flush_l2, cutoff_ms);
  }

 private:
  // The problem's candidates, then those of each rewrite that applies; when `only` is given, of
  // those it names ("" for the problem itself).
  StatusOr<std::vector<Candidate>> gather(cudnnHandle_t handle, const ConvProblem& problem,
                                          CandidateSource source,
                                          const std::vector<std::string>* only);

  std::shared_ptr<Backend> inner_;
  const bool enabled_;
};

StatusOr<std::vector<Candidate>> RewritingBackend::gather(cudnnHandle_t handle,
                                                          const ConvProblem& problem,
                                                          CandidateSource source,
                                                          const std::vector<std::string>* only) {
  auto named = [only](const std::string& name) {
    return only == nullptr || std::find(only->begin(), only->end(), name) != only->end();
  };
  std::vector<Candidate> out;
  if (named("")) {
    CONVPLAN_ASSIGN_OR_RETURN(out, inner_->candidates(handle, problem, source));
  }
  // The fallback is asked for when nothing else worked: the problem itself, nothing clever.
  if (!enabled_ || source == CandidateSource::kFallback) return out;
  for (const Rewrite& r : applicable_rewrites(problem)) {
    if (!named(r.name())) continue;
    StatusOr<std::vector<Candidate>> inner = inner_->candidates(handle, r.rewritten, source);
    if (!inner.ok()) continue;  // the rewritten problem is not supported: no candidates from it
    for (size_t i = 0; i < inner->size() && i < kCandidatesPerRewrite; ++i) {
      Candidate c = (*inner)[i];
      c.config.rewrite = r.name();
      c.rank = static_cast<int>(out.size());
      out.push_back(std::move(c));
    }
  }
  return out;
}

StatusOr<std::unique_ptr<Plan>> RewritingBackend::build(cudnnHandle_t handle,
                                                        const ConvProblem& problem,
                                                        const EngineConfig& config) {
  if (config.rewrite.empty()) return inner_->build(handle, problem, config);
  CONVPLAN_ASSIGN_OR_RETURN(RewriteSpec spec, RewriteSpec::parse(config.rewrite));
  CONVPLAN_ASSIGN_OR_RETURN(Rewrite r, make_rewrite(problem, spec));
  EngineConfig inner_config = config;
  inner_config.rewrite.clear();
  CONVPLAN_ASSIGN_OR_RETURN(std::unique_ptr<Plan> inner,
                            inner_->build(handle, r.rewritten, inner_config));
  return std::unique_ptr<Plan>(new RewrittenPlan(std::move(r), std::move(inner)));
}

StatusOr<std::unique_ptr<Plan>> RewritingBackend::build_from_json(cudnnHandle_t handle,
                                                                  const ConvProblem& problem,
                                                                  std::string_view json) {
  nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains(kJsonRewriteKey))
    return inner_->build_from_json(handle, problem, json);
  if (!j[kJsonRewriteKey].is_string() || !j.contains(kJsonPlanKey) ||
      !j[kJsonPlanKey].is_string()) {
    return Status(StatusCode::kCorruptData, std::string("rewritten plan JSON: \"") +
                                                kJsonRewriteKey + "\" and \"" + kJsonPlanKey +
                                                "\" must be strings");
  }
  CONVPLAN_ASSIGN_OR_RETURN(RewriteSpec spec,
                            RewriteSpec::parse(j[kJsonRewriteKey].get<std::string>()));
  CONVPLAN_ASSIGN_OR_RETURN(Rewrite r, make_rewrite(problem, spec));
  CONVPLAN_ASSIGN_OR_RETURN(
      std::unique_ptr<Plan> inner,
      inner_->build_from_json(handle, r.rewritten, j[kJsonPlanKey].get<std::string>()));
  return std::unique_ptr<Plan>(new RewrittenPlan(std::move(r), std::move(inner)));
}

}  // namespace

std::shared_ptr<Backend> with_rewrites(std::shared_ptr<Backend> inner) {
  return std::make_shared<RewritingBackend>(std::move(inner), rewrites_enabled_by_environment());
}

}  // namespace convplan
