#include "cudnn/plan.h"

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "cudnn/check.h"
#include "cudnn/engines.h"
#include "cudnn/kernel_cache.h"

namespace convplan::cudnn_detail {
namespace {

bool aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(kTensorAlignment) == 0;
}

std::string pointer_text(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%p", p);
  return buf;
}

StatusOr<int64_t> plan_workspace(const BackendDescriptor& plan) {
  int64_t bytes = 0;
  CONVPLAN_CUDNN_CHECK(plan.get_int64(CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, &bytes));
  return bytes;
}

// Checks each knob choice against the engine's offered knobs.
Status check_knobs(const EngineConfig& config, const std::vector<KnobInfo>& offered) {
  for (const KnobChoice& k : config.knobs) {
    const KnobInfo* info = nullptr;
    for (const KnobInfo& o : offered) {
      if (o.type == k.type) info = &o;
    }
    if (info == nullptr) {
      return not_supported("engine " + std::to_string(config.engine_id) + " has no knob " +
                           knob_type_name(k.type) + " (type " + std::to_string(k.type) + ")");
    }
    if (k.value < info->min_value || k.value > info->max_value) {
      return not_supported("engine " + std::to_string(config.engine_id) + " knob " + info->name +
                           "=" + std::to_string(k.value) + " is outside [" +
                           std::to_string(info->min_value) + ", " +
                           std::to_string(info->max_value) + "]");
    }
  }
  return ok_status();
}

}  // namespace

Status check_pointers(const TensorPointers& t, void* workspace, int64_t workspace_bytes,
                      const PostOps& chain) {
  std::vector<std::pair<const char*, const void*>> tensors{{"x", t.x}, {"w", t.w}, {"y", t.y}};
  if (chain.has(PostOpKind::kBias)) tensors.emplace_back("bias", t.bias);
  if (chain.has(PostOpKind::kAdd)) tensors.emplace_back("residual", t.residual);
  for (const auto& [name, p] : tensors) {
    if (p == nullptr) {
      return invalid_argument(std::string("tensor ") + name + " is null" +
                              (chain.empty() ? "" : "; post:" + chain.to_string() + " reads it"));
    }
    if (!aligned(p)) {
      return invalid_argument(std::string("tensor ") + name + " at " + pointer_text(p) +
                              " is not " + std::to_string(kTensorAlignment) + "-byte aligned");
    }
  }
  if (workspace_bytes > 0 && workspace == nullptr) {
    return invalid_argument("workspace is null; the plan needs " + std::to_string(workspace_bytes) +
                            " bytes");
  }
  if (workspace != nullptr && !aligned(workspace)) {
    return invalid_argument("workspace at " + pointer_text(workspace) + " is not " +
                            std::to_string(kTensorAlignment) + "-byte aligned");
  }
  return ok_status();
}

CudnnPlan::CudnnPlan(cudnnHandle_t handle, EngineConfig config, NoteSet notes,
                     int64_t workspace_bytes, BackendDescriptor plan,
                     std::vector<BackendDescriptor> keep_alive, PostOps chain)
    : handle_(handle),
      config_(std::move(config)),
      notes_(notes),
      workspace_bytes_(workspace_bytes),
      plan_(std::move(plan)),
      keep_alive_(std::move(keep_alive)),
      chain_(chain) {}

size_t CudnnPlan::host_bytes() const {
  if (!json_bytes_.has_value()) {
    StatusOr<std::string> json = plan_json(plan_);
    json_bytes_ = json.ok() ? json->size() : size_t{64} << 10;
  }
  const size_t descriptors = keep_alive_.size() + 1 + (variant_pack_ ? 1 : 0);
  return sizeof(*this) + descriptors * 1024 + config_.knobs.size() * sizeof(KnobChoice) +
         *json_bytes_;
}

Status CudnnPlan::make_variant_pack(const TensorPointers& t, void* workspace) {
  variant_pack_.reset();  // a failure below leaves no stale pack behind
  CONVPLAN_ASSIGN_OR_RETURN(BackendDescriptor pack,
                            BackendDescriptor::create(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR));
  std::vector<int64_t> uids{kUidX, kUidW, kUidY};
  std::vector<void*> pointers{t.x, t.w, t.y};
  // cuDNN takes void* for every tensor; the chain's inputs are only read.
  if (chain_.has(PostOpKind::kBias)) {
    uids.push_back(kUidBias);
    pointers.push_back(const_cast<void*>(t.bias));
  }
  if (chain_.has(PostOpKind::kAdd)) {
    uids.push_back(kUidResidual);
    pointers.push_back(const_cast<void*>(t.residual));
  }
  CONVPLAN_CUDNN_CHECK(pack.set_int64s(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, uids));
  CONVPLAN_CUDNN_CHECK(pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                                static_cast<int64_t>(pointers.size()), pointers.data()));
  CONVPLAN_CUDNN_CHECK(
      pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace));
  CONVPLAN_CUDNN_CHECK(pack.finalize());
  variant_pack_ = std::move(pack);
  pack_tensors_ = t;
  pack_workspace_ = workspace;
  return ok_status();
}

Status CudnnPlan::execute(cudnnHandle_t handle, const TensorPointers& tensors, void* workspace) {
  if (handle != handle_) {
    return Status(StatusCode::kWrongHandle, "plan for " + config_.to_string() +
                                                " was built with handle " + pointer_text(handle_) +
                                                ", not " + pointer_text(handle));
  }
  if (!variant_pack_ || !(tensors == pack_tensors_) || workspace != pack_workspace_) {
    CONVPLAN_RETURN_IF_ERROR(check_pointers(tensors, workspace, workspace_bytes_, chain_));
    CONVPLAN_RETURN_IF_ERROR(make_variant_pack(tensors, workspace));
  }
  CONVPLAN_CUDNN_CHECK(cudnnBackendExecute(handle_, plan_.get(), variant_pack_.get()));
  return ok_status();
}

StatusOr<std::string> CudnnPlan::to_json() const { return plan_json(plan_); }

StatusOr<std::string> plan_json(const BackendDescriptor& plan) {
  int64_t count = 0;
  CONVPLAN_CUDNN_CHECK(
      plan.get_count(CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, &count));
  std::string text(static_cast<size_t>(count > 0 ? count : 0), '\0');
  CONVPLAN_CUDNN_CHECK(plan.get(CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION, CUDNN_TYPE_CHAR,
                                count, &count, text.data()));
  text.resize(static_cast<size_t>(count > 0 ? count : 0));
  while (!text.empty() && text.back() == '\0') text.pop_back();
  if (text.empty()) return not_supported("the plan has no JSON representation");
  return text;
}

namespace {

// A plan's engine configuration on its graph, and the descriptors it was made from.
struct ConfiguredGraph {
  ConvGraph graph;
  BackendDescriptor engine;
  BackendDescriptor engine_config;
  NoteSet notes = 0;

  // The descriptors a plan made from this must keep alive, in the order they are released.
  std::vector<BackendDescriptor> release() && {
    std::vector<BackendDescriptor> out;
    out.push_back(std::move(engine_config));
    out.push_back(std::move(engine));
    for (BackendDescriptor* d :
         {&graph.graph, &graph.operation, &graph.conv, &graph.x, &graph.w, &graph.y}) {
      out.push_back(std::move(*d));
    }
    for (BackendDescriptor& d : graph.post) out.push_back(std::move(d));
    return out;
  }
};

// The graph of `problem` (dynamic-shape or not), the engine by index and a configuration with
// the knob choices; kNotSupported when the engine, its notes or a knob value does not fit.
StatusOr<ConfiguredGraph> configure(cudnnHandle_t handle, const ConvProblem& problem,
                                    const EngineConfig& config, bool dynamic_shape) {
  ConfiguredGraph out;
  CONVPLAN_ASSIGN_OR_RETURN(out.graph, build_conv_graph(handle, problem, dynamic_shape));
  StatusOr<BackendDescriptor> engine = make_engine(out.graph.graph, config.engine_id);
  if (!engine.ok()) {
    return engine.status().with_context("engine " + std::to_string(config.engine_id));
  }
  out.engine = std::move(engine).value();
  CONVPLAN_ASSIGN_OR_RETURN(out.notes, engine_notes(out.engine));
  CONVPLAN_RETURN_IF_ERROR(check_notes_allowed(problem, config.engine_id, out.notes));
  if (!config.knobs.empty()) {
    CONVPLAN_ASSIGN_OR_RETURN(std::vector<KnobInfo> offered, engine_knob_ranges(out.engine));
    CONVPLAN_RETURN_IF_ERROR(check_knobs(config, offered));
  }
  StatusOr<BackendDescriptor> engine_config = make_engine_config(out.engine, config.knobs);
  if (!engine_config.ok()) return engine_config.status().with_context(config.to_string());
  out.engine_config = std::move(engine_config).value();
  return out;
}

// A finalized execution plan of `configured` on `handle`, given `kernel_cache` when not null.
StatusOr<BackendDescriptor> finalize_plan(cudnnHandle_t handle, const ConfiguredGraph& configured,
                                          const EngineConfig& config,
                                          const BackendDescriptor* kernel_cache) {
  CONVPLAN_ASSIGN_OR_RETURN(BackendDescriptor plan,
                            BackendDescriptor::create(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR));
  CONVPLAN_CUDNN_CHECK(plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle));
  CONVPLAN_CUDNN_CHECK(
      plan.set_descriptor(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, configured.engine_config));
  if (kernel_cache != nullptr) {
    CONVPLAN_CUDNN_CHECK(
        plan.set_descriptor(CUDNN_ATTR_EXECUTION_PLAN_KERNEL_CACHE, *kernel_cache));
  }
  const cudnnStatus_t s = plan.finalize();
  if (s != CUDNN_STATUS_SUCCESS) {
    return cudnn_failure(s, "cudnnBackendFinalize(plan)", __FILE__, __LINE__)
        .with_context(config.to_string());
  }
  return plan;
}

StatusOr<std::unique_ptr<CudnnPlan>> make_plan(cudnnHandle_t handle, const ConvProblem& problem,
                                               const EngineConfig& config,
                                               ConfiguredGraph configured, BackendDescriptor plan,
                                               std::shared_ptr<const KernelCache> cache) {
  CONVPLAN_ASSIGN_OR_RETURN(int64_t workspace, plan_workspace(plan));
  const NoteSet notes = configured.notes;
  auto out = std::make_unique<CudnnPlan>(handle, config, notes, workspace, std::move(plan),
                                         std::move(configured).release(), problem.post_ops);
  out->keep_kernel_cache(std::move(cache));
  return out;
}

// The plan of a runtime-compiled engine on a dynamic-shape graph with the topology's kernel
// cache; cuDNN's refusal (an engine without dynamic-shape support) when it cannot be built so.
StatusOr<std::unique_ptr<CudnnPlan>> build_cached_plan(cudnnHandle_t handle,
                                                       const ConvProblem& problem,
                                                       const EngineConfig& config,
                                                       KernelCaches& caches) {
  CONVPLAN_ASSIGN_OR_RETURN(ConfiguredGraph configured, configure(handle, problem, config, true));
  CONVPLAN_ASSIGN_OR_RETURN(std::shared_ptr<const KernelCache> cache, caches.get(problem));
  BackendDescriptor plan;
  {
    MutexLock lock(kernel_cache_finalize_mutex());  // one at a time (kernel_cache.h)
    CONVPLAN_ASSIGN_OR_RETURN(plan, finalize_plan(handle, configured, config, &cache->descriptor));
  }
  return make_plan(handle, problem, config, std::move(configured), std::move(plan),
                   std::move(cache));
}

}  // namespace

StatusOr<std::unique_ptr<CudnnPlan>> build_plan(cudnnHandle_t handle, const ConvProblem& problem,
                                                const EngineConfig& config,
                                                KernelCaches* kernel_caches) {
  if (handle == nullptr) return invalid_argument("handle is null");
  if (config.unfused) {
    return invalid_argument(config.to_string() +
                            " is an unfused configuration; it is built by "
                            "build_unfused_plan (cudnn/epilogue_plan.h)");
  }
  CONVPLAN_ASSIGN_OR_RETURN(ConfiguredGraph configured, configure(handle, problem, config, false));
  if (kernel_caches != nullptr && (configured.notes & kNoteRuntimeCompilation) != 0 &&
      kernel_cache_applies(problem)) {
    StatusOr<std::unique_ptr<CudnnPlan>> cached =
        build_cached_plan(handle, problem, config, *kernel_caches);
    // An engine that cannot run a dynamic-shape graph is built as before (a real failure, such
    // as memory, fails that build too).
    if (cached.ok()) return cached;
  }
  CONVPLAN_ASSIGN_OR_RETURN(BackendDescriptor plan,
                            finalize_plan(handle, configured, config, nullptr));
  return make_plan(handle, problem, config, std::move(configured), std::move(plan), nullptr);
}

StatusOr<std::unique_ptr<CudnnPlan>> plan_from_json(cudnnHandle_t handle,
                                                    const ConvProblem& problem,
                                                    std::string_view json) {
  if (handle == nullptr) return invalid_argument("handle is null");
  if (json.empty()) return invalid_argument("plan JSON is empty");
  CONVPLAN_ASSIGN_OR_RETURN(BackendDescriptor plan,
                            BackendDescriptor::create(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR));
  CONVPLAN_CUDNN_CHECK(plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle));
  CONVPLAN_CUDNN_CHECK(plan.set(CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION, CUDNN_TYPE_CHAR,
                                static_cast<int64_t>(json.size()), json.data()));
  CONVPLAN_CUDNN_CHECK(plan.finalize());
  // What the JSON held: the engine configuration, its engine, index, knobs and notes.
  CONVPLAN_ASSIGN_OR_RETURN(BackendDescriptor config_desc,
                            BackendDescriptor::create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
  {
    std::vector<BackendDescriptor> one;
    one.push_back(std::move(config_desc));
    int64_t count = 0;
    CONVPLAN_CUDNN_CHECK(
        plan.get_descriptors(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, one, &count));
    config_desc = std::move(one.front());
  }
  CONVPLAN_ASSIGN_OR_RETURN(BackendDescriptor engine, engine_of_config(config_desc));
  EngineConfig config;
  CONVPLAN_ASSIGN_OR_RETURN(config.engine_id, engine_global_index(engine));
  // The knob choices, where cuDNN reports them for a deserialized configuration; else none.
  StatusOr<std::vector<KnobChoice>> knobs = engine_config_knobs(config_desc);
  if (knobs.ok()) config.knobs = std::move(knobs).value();
  CONVPLAN_ASSIGN_OR_RETURN(NoteSet notes, engine_notes(engine));
  CONVPLAN_RETURN_IF_ERROR(check_notes_allowed(problem, config.engine_id, notes));
  CONVPLAN_ASSIGN_OR_RETURN(int64_t workspace, plan_workspace(plan));
  std::vector<BackendDescriptor> keep_alive;
  keep_alive.push_back(std::move(config_desc));
  keep_alive.push_back(std::move(engine));
  return std::make_unique<CudnnPlan>(handle, std::move(config), notes, workspace, std::move(plan),
                                     std::move(keep_alive), problem.post_ops);
}

}  // namespace convplan::cudnn_detail
