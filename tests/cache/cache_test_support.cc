#include "cache/cache_test_support.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>

#include "convplan/reference.h"

namespace convplan::testing {

ConvProblem small_problem(int i) {
  ConvProblem p;
  const Direction directions[] = {Direction::kForward, Direction::kBackwardData,
                                  Direction::kBackwardFilter};
  p.direction = directions[i % 3];
  p.spatial_dims = i % 7 == 6 ? 3 : i % 5 == 4 ? 1 : 2;
  p.n = 1 + i % 2;
  p.groups = i % 4 == 3 ? 2 : 1;
  p.c = 2 * p.groups * (1 + i % 2);
  p.k = 2 * p.groups * (1 + (i / 2) % 2);
  for (int d = 0; d < p.spatial_dims; ++d) {
    p.input[d] = p.spatial_dims == 3 ? 4 : 5 + (i + d) % 3;
    p.filter[d] = 1 + (i + d) % 3;
    p.pad_before[d] = (i / 5) % 2;
    p.pad_after[d] = (i / 5) % 2;
    p.stride[d] = 1 + (i / 7) % 2;
    p.dilation[d] = 1;
  }
  p.layout = i % 2 == 0 ? Layout::kChannelsFirst : Layout::kChannelsLast;
  p.alpha = 1.0;
  p.beta = i % 6 == 5 ? 0.5 : 0.0;
  // Problems repeat their geometry every few indices; the batch size keeps them distinct.
  p.n += i / 12;
  return p;
}

std::vector<ConvProblem> small_problems(int count) {
  std::vector<ConvProblem> out;
  for (int i = 0; static_cast<int>(out.size()) < count; ++i) {
    ConvProblem p = small_problem(i);
    if (!p.validate().ok()) continue;
    bool seen = false;
    for (const ConvProblem& q : out) seen = seen || q == p;
    if (!seen) out.push_back(p);
  }
  return out;
}

namespace {

std::vector<unsigned char> random_tensor(const ConvProblem& p, const TensorShape& s,
                                         std::mt19937& rng) {
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> values(static_cast<size_t>(s.span_elements()));
  for (double& v : values) v = dist(rng);
  std::vector<unsigned char> bytes(values.size() * static_cast<size_t>(size_of(p.data_type)));
  to_data_type(p.data_type, values.data(), bytes.data(), s.span_elements());
  return bytes;
}

std::vector<double> as_doubles(const ConvProblem& p, const std::vector<unsigned char>& bytes) {
  const int64_t count = static_cast<int64_t>(bytes.size()) / size_of(p.data_type);
  std::vector<double> v(static_cast<size_t>(count));
  from_data_type(p.data_type, bytes.data(), v.data(), count);
  return v;
}

}  // namespace

ProblemBuffers::ProblemBuffers(const ConvProblem& problem, uint32_t seed) : problem_(problem) {
  std::mt19937 rng(seed);
  x_ = random_tensor(problem_, problem_.x_shape(), rng);
  w_ = random_tensor(problem_, problem_.w_shape(), rng);
  y_ = random_tensor(problem_, problem_.y_shape(), rng);
  if (problem_.beta != 0.0) {
    initial_output_ = as_doubles(problem_, output());
  } else {
    poison_output();
  }
}

std::vector<unsigned char>& ProblemBuffers::output() {
  const TensorRole o = problem_.output_tensor();
  return by_role(o, x_, w_, y_);
}

void ProblemBuffers::poison_output() {
  if (problem_.beta != 0.0) {
    // The old output is an input here: restore it rather than poison it.
    to_data_type(problem_.data_type, initial_output_.data(), output().data(),
                 static_cast<int64_t>(initial_output_.size()));
    return;
  }
  std::memset(output().data(), 0xff, output().size());  // NaN in every float type
}

double ProblemBuffers::output_error() const {
  std::vector<double> x = as_doubles(problem_, x_), w = as_doubles(problem_, w_),
                      y = as_doubles(problem_, y_);
  const TensorRole o = problem_.output_tensor();
  std::vector<double>& out = by_role(o, x, w, y);
  const std::vector<double> got = out;
  if (problem_.beta != 0.0) {
    out = initial_output_;
  } else {
    std::fill(out.begin(), out.end(), 0.0);
  }
  Status s = reference_convolution(problem_, x, w, y);
  if (!s.ok()) {
    ADD_FAILURE() << "reference failed: " << s.to_string();
    return std::numeric_limits<double>::infinity();
  }
  return relative_l2_error(got, out);
}

std::unique_ptr<PlanCache> make_cache(std::shared_ptr<ScriptedBackend> backend, size_t capacity,
                                      std::shared_ptr<TuningDatabase> database) {
  PlanCacheOptions options;
  options.backend = std::move(backend);
  options.capacity = capacity;
  options.policy = TunePolicy{};
  options.database = std::move(database);
  StatusOr<std::unique_ptr<PlanCache>> cache = PlanCache::create(std::move(options));
  EXPECT_TRUE(cache.ok()) << cache.status().to_string();
  return cache.ok() ? std::move(cache).value() : nullptr;
}

std::string scripted_key(const ConvProblem& problem, const TunePolicy& policy) {
  return record_key(ScriptedBackend::default_device(0), problem, policy).to_string();
}

int64_t heuristic_queries_per_tune(const std::vector<ScriptedEngine>& engines,
                                   const ConvProblem& problem, const TunePolicy& policy) {
  auto backend = std::make_shared<ScriptedBackend>(engines);
  Tuner tuner(backend);
  StatusOr<TuningRecord> r = tuner.tune(scripted_handle(99), problem, policy);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return backend->heuristic_queries.load();
}

StatusOr<void*> CountingAllocator::allocate(size_t bytes) {
  if (bytes == 0) return static_cast<void*>(nullptr);
  void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (p == nullptr) return out_of_memory("host allocation failed");
  ++allocations;
  ++live;
  return p;
}

void CountingAllocator::deallocate(void* ptr, size_t) {
  if (ptr == nullptr) return;
  --live;
  std::free(ptr);
}

}  // namespace convplan::testing
