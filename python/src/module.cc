// convplan._C: the nanobind module under the convplan package. It binds the public C++ API
// only: the problem and its text form, the devices, convplan.Error, and Context (context.h).
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <memory>
#include <string>

#include "context.h"
#include "convplan/cudnn_backend.h"
#include "convplan/problem.h"
#include "convplan/tuning_db.h"
#include "convplan/tuning_record.h"
#include "errors.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace convplan::python {
namespace {

nb::tuple spatial(const ConvProblem& p, const SpatialDims& dims) {
  nb::list out;
  for (int d = 0; d < p.spatial_dims; ++d) out.append(dims[d]);
  return nb::tuple(out);
}

nb::list devices() {
  nb::list out;
  if (!gpu_available().ok()) return out;
  static const std::shared_ptr<Backend> backend = make_cudnn_backend();
  for (int i = 0; i < cuda_device_count(); ++i) {
    StatusOr<CudnnContext> ctx = CudnnContext::create(i);
    if (!ctx.ok()) continue;  // a device this process cannot use is not offered
    StatusOr<DeviceInfo> d = backend->device_of(ctx->handle());
    if (!d.ok()) continue;
    nb::dict info;
    info["ordinal"] = d->ordinal;
    info["name"] = d->name;
    info["uuid"] = d->uuid;
    info["compute_capability"] = nb::make_tuple(d->cc_major, d->cc_minor);
    info["sm_count"] = d->sm_count;
    info["l2_bytes"] = d->l2_bytes;
    info["memory_bytes"] = d->memory_bytes;
    info["cudnn_version"] = d->cudnn_version;
    info["model_key"] = d->model_key();
    out.append(info);
  }
  return out;
}

ConvProblem parse(const std::string& text) {
  StatusOr<ConvProblem> p = parse_problem(text);
  if (!p.ok()) throw nb::value_error(p.status().message().c_str());
  Status valid = p->validate();
  if (!valid.ok()) throw nb::value_error(valid.message().c_str());
  return *p;
}

nb::dict stats_dict(const Context& ctx) {
  const CacheStats s = ctx.stats();
  nb::dict d;
  d["hits"] = s.hits;
  d["misses"] = s.misses;
  d["tunes"] = s.tunes;
  d["clones"] = s.clones;
  d["json_clones"] = s.json_clones;
  d["db_hits"] = s.db_hits;
  d["evictions"] = s.evictions;
  d["failures"] = s.failures;
  d["tune_ms"] = s.tune_ms;
  d["clone_ms"] = s.clone_ms;
  d["plans"] = s.plans;
  d["records"] = s.records;
  d["plan_host_bytes"] = s.plan_host_bytes;
  d["handles"] = ctx.handle_count();
  d["db"] = ctx.db_path();
  d["tune"] = to_string(ctx.policy().mode);
  d["workspace_limit"] = ctx.policy().workspace_limit;
  return d;
}

nb::dict plan_info_dict(Context& ctx, const ConvProblem& problem, int device, uintptr_t stream) {
  const Context::PlanInfo info = ctx.plan_info(problem, device, stream);
  nb::dict d;
  d["config"] = info.config;
  d["kind"] = problem.post_ops.empty() ? "plain" : (info.unfused ? "unfused" : "fused");
  d["workspace_bytes"] = info.workspace_bytes;
  d["time_ms"] = info.time_ms;
  d["best_fused_ms"] = info.best_fused_ms;
  d["best_unfused_ms"] = info.best_unfused_ms;
  d["candidates"] = info.candidates;
  return d;
}

void bind_problem(nb::module_& m) {
  nb::class_<ConvProblem>(m, "Problem",
                          "A convolution problem in convplan's text form (benchdnn's descriptor "
                          "with an optional prefix of flags), parsed by the C++ parser. Immutable.")
      .def(
          "__init__",
          [](ConvProblem* self, const std::string& text) { new (self) ConvProblem(parse(text)); },
          "text"_a)
      .def("__str__", &ConvProblem::to_string)
      .def("__repr__",
           [](const ConvProblem& p) { return "convplan.Problem('" + p.to_string() + "')"; })
      .def(
          "__eq__", [](const ConvProblem& a, const ConvProblem& b) { return a == b; },
          nb::is_operator())
      .def("__hash__", [](const ConvProblem& p) { return static_cast<int64_t>(p.hash() >> 1); })
      .def_prop_ro("direction", [](const ConvProblem& p) { return to_string(p.direction); })
      .def_prop_ro("dtype", [](const ConvProblem& p) { return to_string(p.data_type); })
      .def_prop_ro("compute_type", [](const ConvProblem& p) { return to_string(p.compute_type); })
      .def_prop_ro("layout", [](const ConvProblem& p) { return to_string(p.layout); })
      .def_prop_ro("tensor_cores", [](const ConvProblem& p) { return p.allow_tensor_cores; })
      .def_prop_ro("spatial_dims", [](const ConvProblem& p) { return p.spatial_dims; })
      .def_prop_ro("n", [](const ConvProblem& p) { return p.n; })
      .def_prop_ro("c", [](const ConvProblem& p) { return p.c; })
      .def_prop_ro("k", [](const ConvProblem& p) { return p.k; })
      .def_prop_ro("groups", [](const ConvProblem& p) { return p.groups; })
      .def_prop_ro("input", [](const ConvProblem& p) { return spatial(p, p.input); })
      .def_prop_ro("output", [](const ConvProblem& p) { return spatial(p, p.output()); })
      .def_prop_ro("filter", [](const ConvProblem& p) { return spatial(p, p.filter); })
      .def_prop_ro("stride", [](const ConvProblem& p) { return spatial(p, p.stride); })
      .def_prop_ro("padding_before", [](const ConvProblem& p) { return spatial(p, p.pad_before); })
      .def_prop_ro("padding_after", [](const ConvProblem& p) { return spatial(p, p.pad_after); })
      .def_prop_ro("dilation", [](const ConvProblem& p) { return spatial(p, p.dilation); })
      .def_prop_ro("alpha", [](const ConvProblem& p) { return p.alpha; })
      .def_prop_ro("beta", [](const ConvProblem& p) { return p.beta; })
      .def_prop_ro("post_ops", [](const ConvProblem& p) { return p.post_ops.to_string(); })
      .def("without_post_ops", &ConvProblem::without_post_ops)
      .def_prop_ro("flops", &ConvProblem::flops);
}

void bind_context(nb::module_& m) {
  nb::class_<Context>(m, "Context")
      .def(
          "__init__",
          [](Context* self, const std::string& db, std::optional<std::string> tune,
             std::optional<int64_t> workspace_limit, std::optional<size_t> capacity) {
            new (self) Context(ContextOptions{db, std::move(tune), workspace_limit, capacity});
          },
          "db"_a = "", "tune"_a = nb::none(), "workspace_limit"_a = nb::none(),
          "capacity"_a = nb::none())
      .def("prepare", &Context::prepare, "problem"_a, "device"_a, "stream"_a)
      .def("prepare_all", &Context::prepare_all, "problems"_a, "device"_a = 0, "threads"_a = 4)
      .def("launch", &Context::launch, "problem"_a, "device"_a, "stream"_a, "x"_a, "w"_a, "y"_a,
           "workspace"_a, "workspace_bytes"_a, "bias"_a = 0, "residual"_a = 0)
      .def("run", &Context::run, "problem"_a, "x"_a, "w"_a, "y"_a, "device"_a = 0, "stream"_a = 0,
           "bias"_a = 0, "residual"_a = 0)
      .def("plan_info", &plan_info_dict, "problem"_a, "device"_a = 0, "stream"_a = 0)
      .def("stats", &stats_dict)
      .def_prop_ro("db", &Context::db_path);
}

}  // namespace
}  // namespace convplan::python

NB_MODULE(_C, m) {
  using namespace convplan;
  using namespace convplan::python;
  // The default context lives as long as the module; at exit it is left to the process (see
  // ~Context), which nanobind would otherwise report as a leak.
  nb::set_leak_warnings(false);
  register_error_type(m);
  m.attr("__version__") = convplan_version();
  m.def(
      "cudnn_version", [] { return cudnn_runtime_version(); },
      "The cuDNN library loaded in this process, e.g. 91900.");
  m.def("cuda_runtime_version", [] { return cuda_runtime_version(); });
  m.def("devices", &devices, "The usable GPUs as dicts; [] where there is none.");
  m.def(
      "gpu_status",
      [] {
        Status s = gpu_available();
        return s.ok() ? std::string() : s.message();
      },
      "'' when a GPU can be used, else why not.");
  m.def("default_db_path", &TuningDatabase::default_path);
  bind_problem(m);
  bind_context(m);
}
