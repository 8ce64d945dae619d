// Uses convplan through its installed headers and package only: parses a problem, runs it through
// the float64 reference, opens an in-memory tuning database and a plan cache over the cuDNN
// backend, and, where a GPU is there, asks the backend about the device. Exits 0 without a GPU
// too, so that CI can run it.
#include <cstdio>
#include <vector>

#include "convplan/cudnn_backend.h"
#include "convplan/plan_cache.h"
#include "convplan/problem.h"
#include "convplan/reference.h"
#include "convplan/tuning_db.h"
#include "convplan/tuning_record.h"
#include "convplan/version.h"

int main() {
  std::printf("convplan headers %s, library %s\n", CONVPLAN_VERSION, convplan::convplan_version());
  convplan::StatusOr<convplan::ConvProblem> problem =
      convplan::parse_problem("mb1ic2ih5iw5oc3kh3kw3ph1pw1");
  if (!problem.ok()) {
    std::fprintf(stderr, "%s\n", problem.status().to_string().c_str());
    return 1;
  }
  std::printf("problem %s\n", problem->to_string().c_str());
  // All ones: each output element is the number of input elements under the 3x3 window.
  std::vector<double> x(problem->x_shape().span_elements(), 1.0);
  std::vector<double> w(problem->w_shape().span_elements(), 1.0);
  std::vector<double> y(problem->y_shape().span_elements(), 0.0);
  if (convplan::Status s = convplan::reference_convolution(*problem, x, w, y); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.to_string().c_str());
    return 1;
  }
  std::printf("reference: y[0] = %g (want 8: 2 channels x 4 taps in the corner)\n", y[0]);
  if (y[0] != 8.0) return 1;

  convplan::StatusOr<std::unique_ptr<convplan::TuningDatabase>> db =
      convplan::TuningDatabase::open(":memory:");
  if (!db.ok()) {
    std::fprintf(stderr, "%s\n", db.status().to_string().c_str());
    return 1;
  }
  convplan::PlanCacheOptions options;
  options.backend = convplan::make_cudnn_backend();
  options.database = std::move(db).value();
  convplan::StatusOr<std::unique_ptr<convplan::PlanCache>> cache =
      convplan::PlanCache::create(std::move(options));
  if (!cache.ok()) {
    std::fprintf(stderr, "%s\n", cache.status().to_string().c_str());
    return 1;
  }
  if (convplan::Status s = convplan::gpu_available(); !s.ok()) {
    std::printf("no GPU: %s\n", s.message().c_str());
    return 0;
  }
  convplan::StatusOr<convplan::CudnnContext> ctx = convplan::CudnnContext::create(0);
  if (!ctx.ok()) {
    std::fprintf(stderr, "%s\n", ctx.status().to_string().c_str());
    return 1;
  }
  convplan::StatusOr<convplan::DeviceInfo> device =
      convplan::make_cudnn_backend()->device_of(ctx->handle());
  if (!device.ok()) {
    std::fprintf(stderr, "%s\n", device.status().to_string().c_str());
    return 1;
  }
  std::printf("GPU 0: %s\n", device->name.c_str());
  return 0;
}
