// Tuner: gathers candidates for the policy's mode, filters them, times each survivor on scratch
// buffers fenced by guard bytes (a few runs each; only the close ones get the policy's full
// count: early stopping), then checks the finalists against the float64 reference in order of
// speed until one passes, and records everything in a TuningRecord. Checking only finalists
// (issue 21): a candidate's check cost about as much as its timing, and the losers on time can
// never be served. Heuristic mode times nothing and checks in rank order.
//
// One tune is one TuneRun object on the caller's stack: no state is shared between tunes, so
// several threads may tune different problems at once (the backend is thread-safe by contract).
//
// Scratch buffers: each of x, w, y and the workspace is one allocation laid out as
//   [kGuardBytes of guard pattern][payload][kGuardBytes of guard pattern]
// The inputs hold fresh pseudo-random multiples of 1/128 in [-1, 1] (hashed_input_value of a
// seed drawn from std::random_device each tune; the backend fills them on the device and the
// reference computes the values it reads from the seed); the output holds 0xFF bytes (NaN in
// every float type) before each validation run, or, when beta != 0, the same hashed values each
// time so that accumulation is checked. The output and every guard are written again before each
// candidate runs, and the inputs too after a candidate that did not pass, so a candidate that
// damaged a buffer cannot make the next one look wrong. The caller's tensors are never touched.
#include "convplan/tuner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <future>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include "convplan/log.h"
#include "convplan/reference.h"
#include "core/mutex.h"
#include "core/tensor_offsets.h"
#include "tune/post_op_inputs.h"

namespace convplan {
namespace tune_detail {

// The compile pool's handles, per device ordinal, kept across tunes (a cudnnCreate costs more
// than it is worth per wave). A wave takes what it needs and gives them back; several tunes at
// once each get their own (new ones are made while the free list is empty).
class CompileHandles {
 public:
  explicit CompileHandles(Backend& backend) : backend_(backend) {}

  // Up to `n` handles on device `ordinal`; fewer when the backend cannot make more.
  std::vector<std::unique_ptr<OwnedHandle>> take(int ordinal, size_t n) {
    std::vector<std::unique_ptr<OwnedHandle>> out;
    {
      MutexLock lock(mu_);
      std::vector<std::unique_ptr<OwnedHandle>>& free = free_[ordinal];
      while (out.size() < n && !free.empty()) {
        out.push_back(std::move(free.back()));
        free.pop_back();
      }
    }
    while (out.size() < n) {
      StatusOr<std::unique_ptr<OwnedHandle>> h = backend_.create_handle(ordinal);
      if (!h.ok() || *h == nullptr) break;
      out.push_back(std::move(h).value());
    }
    return out;
  }

  void give_back(int ordinal, std::vector<std::unique_ptr<OwnedHandle>> handles) {
    MutexLock lock(mu_);
    for (auto& h : handles) free_[ordinal].push_back(std::move(h));
  }

 private:
  Backend& backend_;
  Mutex mu_;
  std::map<int, std::vector<std::unique_ptr<OwnedHandle>>> free_ GUARDED_BY(mu_);
};

}  // namespace tune_detail

namespace {

constexpr size_t kGuardBytes = 256;
// Exhaustive search: knob combinations tried per engine, and values taken from one knob's range.
constexpr size_t kMaxKnobCombinationsPerEngine = 64;
constexpr size_t kMaxValuesPerKnob = 16;
// An engine compiled at run time gets fewer: each combination costs 0.6-1.05 s to compile on an
// H200, so 64 of them made one fused engine a minute of exhaustive tuning (issue 21).
constexpr size_t kMaxKnobCombinationsPerRuntimeCompiledEngine = 8;
// Exhaustive search times an engine's knob combinations only while the engine's best timed
// configuration is within this factor of the best of every configuration that is not such a
// combination (the heuristics' and each engine's own; an engine none of whose configurations has
// been timed yet gets its combinations). Builds and compilation took 84% of an exhaustive tune of
// ResNet-50's forward layers at b32 on the H200 (22.4 s), most of it for the combinations of
// engines far behind; with this rule and the wave stop below it took 15.7 s, its choices as fast
// (issue 21). The combinations of runtime-compiled engines (split-K slices of eng71/72 there,
// 3-4x slower than the default) stop after a wave that did not improve, as in limited mode.
constexpr double kKnobVariantFactor = 1.5;
// Runtime-compiled candidates are compiled in waves of this many, in rank order (the heuristics'
// best first), the compile pool's threads sharing a wave. Limited mode stops after a wave that
// did not improve on the best median, and compiles at most kMaxRuntimeCompiledLimited per
// problem. The wave does not depend on the thread count, so neither does the choice.
constexpr size_t kCompileWave = 4;
constexpr size_t kMaxRuntimeCompiledLimited = 8;
// Limited mode times the first this many of each heuristics list (of each kind, fused and
// unfused), the rest wait for the last resort. The winners of ResNet-50's 23 forward layers at
// b256 were all within the first 8 of heuristics A (H200, cuDNN 9.19); the candidates past them
// cost about half of the tuning, more where they are slow: MobileNetV2's depthwise layers spent
// 0.5-1.5 s timing precompiled engines at 7-57 ms a run against the 0.03-0.3 ms of the one
// that won, rank 0 (issue 21). Past them, the first configuration of a precompiled engine that
// has none before it is timed after the lists (limited mode's other engines), when the problem's
// own best comes within kSecondListRewriteFactor of the best: the first 8 of A for MobileNetV2's
// features.1.conv.1 at b256 were eng62's and eng22's knob variants (0.1455 ms at best), and eng58
// at ranks 9 and 10 took 0.092 ms (H200; PyTorch, which times the whole list, chose 0.126 ms). On
// the stems, where a rewrite wins by 3-6x, the plain problem's other engines are not worth a run.
constexpr int kLimitedPerSource = 8;
// Limited mode asks heuristics B about the rewrites (convplan/rewrite.h) whose best candidate of
// A's came within this factor of the best median, and about the problem itself only when its own
// best did: a B query took ~25 ms per rewritten problem on the H200, 120-207 ms per stem with all
// of a stem's five rewrites asked, more than the stems' tuning could afford (issue 21: a
// convolution under 0.1 ms, the AlexNet stem, tuned in at most 0.2 s). On the 3-D stem the plain
// problem's B candidate then took 26 ms to time, at 13 ms a run against uc32's 0.875.
constexpr double kSecondListRewriteFactor = 1.25;
// The compile pool's default size (TunePolicy::compile_threads = 0), at most the hardware's.
constexpr int kDefaultCompileThreads = 4;
// A timed candidate stops once a run exceeds this multiple of the best median so far.
constexpr double kCutoffFactor = 4.0;
// The exhaustive list's candidates run first on this fraction of the batch (rounded up), and stop
// there when that run is past the cutoff: engine 0, which no heuristic lists, took 85 ms a run on
// ResNet-50's layers at batch 256, 3.9 s of an exhaustive tune's 7.9 s of timing on an H100, and
// the 440 candidates past 4x the best 6.35 s (issue 21: exhaustive tuning at 5.5x PyTorch's first
// calls, against a goal of 3x).
constexpr int64_t kProbeBatchDivisor = 8;
// Limited mode times the first candidate of each rewrite before the rest of any, then the rest
// of a rewrite only where its best so far came within this factor of the best; the same for the
// problem's own list after the rewrites. On the stems, the choices stayed the same with 17-21
// candidates timed instead of 23-35, 39-205 ms a stem's tune instead of 67-274 (H200, serial):
// the plain candidates of the 3-D stem had taken 4.6-14 ms against the uc32 rewrite's 0.875, 190
// of its 380 ms of timing (issue 21: the stems' tuning at 1.76x PyTorch's first calls).
constexpr double kFarGroupFactor = 2.0;
// Candidates within this fraction of the fastest median count as tied; the best rank wins.
constexpr double kTieFraction = 0.02;
// Early stopping of timing. Every candidate gets kFirstTimedRuns runs (or the policy's, if
// fewer); only those whose fastest run is within a confidence margin of the best median get the
// rest of the policy's runs. The margin is at least kStopMargin and at least twice the best's own
// relative spread (max - min over median), so noisier timings stop fewer candidates. With
// multiplicative noise of at most +-d per run, the true fastest is never stopped while
// (1 + d) <= (1 - d) (1 + margin): d <= 4.7% at the floor, more as the spread widens.
constexpr int kFirstTimedRuns = 3;
constexpr double kStopMargin = 0.10;
// Plans of candidates this much slower than the best so far are released after timing (host
// and module memory in exhaustive mode); validation builds one again if ever it is needed.
constexpr double kKeepPlanFactor = 1.5;
// Limited mode compiles candidates at run time only when the best precompiled one takes at least
// this long (a compilation costs 0.2-1.2 s, which a faster kernel of a short convolution never
// pays back; issue 21 caps tuning a convolution under 0.1 ms at 0.2 s), and, when a roofline floor
// is known, is further than this factor from it. Exhaustive mode applies the floor's rule to the
// runtime-compiled candidates that no heuristic ranks (the exhaustive list's): on ResNet-50's
// backward-filter at b256 engines 19, 69 and 70 compiled on every layer, 0.5-2.2 s each alone and
// 4-8 s each with 8 problems at once (the compilations largely serialized: the process used 3 of
// 16 cores), and ran 1-1350 ms against the winners' 0.05-0.56 ms; the tuning took 3.1x PyTorch's
// first calls (H100, issue 21). Forward's engine 72, unranked too, won layers whose precompiled
// best was further from the floor.
constexpr double kRuntimeCompileMinMs = 0.1;
constexpr double kNearRooflineFactor = 1.25;
// Problems checked on a sample of output elements: multiply-adds the sample may cost on the
// host (about 0.1-0.3 s), and the bounds on its size.
constexpr double kSampledReferenceWork = 2e7;
constexpr int64_t kMaxSampledElements = 2048;
constexpr int64_t kMinSampledElements = 32;

using Clock = std::chrono::steady_clock;
using detail::for_each_offset;

// One tune at a time runs its work on a device: a candidate's timing must not share the GPU with
// another tune's kernels when several threads tune distinct keys at once (PlanCache::prepare,
// the background thread, callers' threads), while what needs no GPU (heuristics, building and
// compiling plans, the host reference) overlaps. Never destroyed: a background tune may hold a
// turn while the process exits.
Mutex& device_turn(int ordinal) {
  static Mutex* const registry_mu = new Mutex;
  static auto* const turns = new std::map<int, std::unique_ptr<Mutex>>;
  MutexLock lock(*registry_mu);
  std::unique_ptr<Mutex>& turn = (*turns)[ordinal];
  if (turn == nullptr) turn = std::make_unique<Mutex>();
  return *turn;
}

// Runs fn(begin, end) over [0, n) split into contiguous parts, one per hardware thread (at most
// 16), parts no smaller than `grain`. The host-side input data and the sampled reference of a
// large problem took most of a tune on one thread (ResNet-50 at batch 256: 75-95%).
template <typename Fn>
void parallel_for(int64_t n, int64_t grain, Fn fn) {
  const int64_t cores = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 16);
  const int64_t parts = std::clamp<int64_t>(n / std::max<int64_t>(grain, 1), 1, cores);
  std::vector<std::thread> threads;
  for (int64_t p = 1; p < parts; ++p) {
    threads.emplace_back(fn, n * p / parts, n * (p + 1) / parts);
  }
  fn(int64_t{0}, n / parts);
  for (std::thread& t : threads) t.join();
}

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Adds the milliseconds of its scope to `sum`, whichever way the scope is left.
class ScopedMs {
 public:
  explicit ScopedMs(double& sum) : sum_(sum), start_(Clock::now()) {}
  ~ScopedMs() { sum_ += ms_since(start_); }
  ScopedMs(const ScopedMs&) = delete;
  ScopedMs& operator=(const ScopedMs&) = delete;

 private:
  double& sum_;
  const Clock::time_point start_;
};

// Not one repeated byte, so that a run of any single byte written over it is seen.
uint8_t guard_byte(size_t i) { return static_cast<uint8_t>((i * 37 + 11) ^ 0xA5); }

std::string format_ms(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", ms);
  return buf;
}

std::string format_g(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

const char* disabled_variable(Direction d) {
  switch (d) {
    case Direction::kForward: return "CONVPLAN_DISABLED_FWD_ENGINES";
    case Direction::kBackwardData: return "CONVPLAN_DISABLED_BWD_DATA_ENGINES";
    case Direction::kBackwardFilter: return "CONVPLAN_DISABLED_BWD_FILTER_ENGINES";
  }
  return "?";
}

std::string engine_rule_text(const EngineRule& r) {
  EngineConfig c;
  c.engine_id = r.engine_id;
  c.knobs = r.knobs;
  return c.to_string();
}

int64_t random_offset(const TensorShape& s, std::mt19937_64& gen) {
  int64_t off = 0;
  for (int d = 0; d < s.rank; ++d) {
    std::uniform_int_distribution<int64_t> dist(0, s.dims[d] - 1);
    off += dist(gen) * s.strides[d];
  }
  return off;
}

// Knob combinations of one engine for exhaustive search, all defaults first, then each knob
// varied alone, then the rest of the cartesian product; at most `cap`.
std::vector<EngineConfig> knob_combinations(int64_t engine_id, std::vector<KnobInfo> knobs,
                                            size_t cap) {
  std::sort(knobs.begin(), knobs.end(),
            [](const KnobInfo& a, const KnobInfo& b) { return a.type < b.type; });
  std::vector<std::vector<int64_t>> values;  // per knob, the default first
  for (const KnobInfo& k : knobs) {
    std::vector<int64_t> all;
    const int64_t stride = k.stride > 0 ? k.stride : 1;
    for (int64_t v = k.min_value; v <= k.max_value; v += stride) {
      all.push_back(v);
      if (all.size() > 4096) break;  // an absurd range: the sample below takes from its start
    }
    std::vector<int64_t> picked{k.default_value};
    if (all.size() <= kMaxValuesPerKnob) {
      for (int64_t v : all) picked.push_back(v);
    } else {
      for (size_t i = 0; i < kMaxValuesPerKnob; ++i) {
        picked.push_back(all[i * (all.size() - 1) / (kMaxValuesPerKnob - 1)]);
      }
    }
    std::vector<int64_t> unique;
    for (int64_t v : picked) {
      if (std::find(unique.begin(), unique.end(), v) == unique.end()) unique.push_back(v);
    }
    values.push_back(std::move(unique));
  }
  std::vector<EngineConfig> out;
  std::set<std::vector<size_t>> seen;
  auto add = [&](const std::vector<size_t>& choice) {
    if (out.size() >= cap || !seen.insert(choice).second) return;
    EngineConfig c;
    c.engine_id = engine_id;
    for (size_t i = 0; i < knobs.size(); ++i)
      c.knobs.push_back({knobs[i].type, values[i][choice[i]]});
    out.push_back(std::move(c));
  };
  std::vector<size_t> choice(knobs.size(), 0);
  add(choice);
  for (size_t i = 0; i < knobs.size(); ++i) {
    for (size_t v = 1; v < values[i].size(); ++v) {
      std::vector<size_t> one(knobs.size(), 0);
      one[i] = v;
      add(one);
    }
  }
  // Mixed-radix count over the product, the first knob fastest.
  while (out.size() < cap && !knobs.empty()) {
    size_t i = 0;
    while (i < knobs.size() && ++choice[i] == values[i].size()) choice[i++] = 0;
    if (i == knobs.size()) break;
    add(choice);
  }
  return out;
}

// A candidate's plan: built and owned by the tune, or the caller's (Tuner::check), never freed.
struct PlanRelease {
  bool owned = true;
  void operator()(Plan* plan) const {
    if (owned) delete plan;
  }
};
using PlanPtr = std::unique_ptr<Plan, PlanRelease>;

struct Entry {
  Candidate candidate;
  CandidateSource source = CandidateSource::kHeuristicA;
  CandidateResult result;
  bool evaluated = false;
  bool dropped = false;          // filtered, failed, or rejected by a check
  bool timed = false;            // has a median: a finalist, in order of speed
  bool validated = false;        // its output matched the reference
  std::string timing_stopped;    // why it has fewer runs than the policy's; "" when it has all
  bool timing_finished = false;  // early stopping has decided on it
  std::string deferred;          // why it was not tried (runtime compilation that would not pay)
  bool knob_variant = false;     // a knob combination listed by exhaustive search
  bool other_engine = false;     // limited mode: deferred, timed by time_other_engines
  // Kept from timing to validation, so that a finalist is not built twice; released for the
  // clearly slower ones (built again in the rare case they are needed).
  PlanPtr plan;
  std::string plan_json;
  // Built by the compile pool ahead of admit(): the plan, or why the build failed.
  bool prebuilt = false;
  std::unique_ptr<Plan> prebuilt_plan;
  Status prebuild_error;
};

// Whether a and b configure one engine of the problem: its index and its graph (unfused or not),
// not through a rewrite, whatever the knob choices.
bool same_plain_engine(const EngineConfig& a, const EngineConfig& b) {
  return a.engine_id == b.engine_id && a.unfused == b.unfused && a.rewrite.empty() &&
         b.rewrite.empty();
}

bool is_runtime_compiled(const Entry& e) {
  return (e.candidate.notes & kNoteRuntimeCompilation) != 0;
}

// "  <config> [<source> rank N": how CONVPLAN_VERBOSE's lines about a candidate begin.
std::string verbose_head(const Entry& e) {
  return "  " + e.candidate.config.to_string() + " [" + to_string(e.source) + " rank " +
         std::to_string(e.candidate.rank);
}

// Why candidates were dropped, counted by label in the order first seen, for the error message.
class DropSummary {
 public:
  void add(bool is_filter, const std::string& label) {
    for (Item& i : items_) {
      if (i.label == label && i.is_filter == is_filter) {
        ++i.count;
        return;
      }
    }
    items_.push_back({is_filter, label, 1});
  }
  // "3 filtered by X, 2 by Y, 1 rejected: wrong result"
  std::string to_string() const {
    std::string s;
    bool filter_seen = false;
    for (const Item& i : items_) {
      if (!s.empty()) s += ", ";
      s += std::to_string(i.count) + " ";
      if (i.is_filter) {
        s += filter_seen ? "by " : "filtered by ";
        filter_seen = true;
      }
      s += i.label;
    }
    return s;
  }
  bool empty() const { return items_.empty(); }

 private:
  struct Item {
    bool is_filter;
    std::string label;
    int count;
  };
  std::vector<Item> items_;
};

// A device allocation with guard bytes on both sides of its payload.
class GuardedBuffer {
 public:
  // Allocates room for `payload` bytes (and the guards), releasing what it held first.
  Status allocate(DeviceAllocator& allocator, size_t payload) {
    buffer_.reset();
    capacity_ = 0;
    auto b = DeviceBuffer::allocate(allocator, payload + 2 * kGuardBytes);
    if (!b.ok()) return b.status();
    buffer_ = std::move(b).value();
    capacity_ = payload;
    return ok_status();
  }
  size_t capacity() const { return capacity_; }
  char* base() const { return static_cast<char*>(buffer_.get()); }
  void* payload() const { return base() + kGuardBytes; }

 private:
  DeviceBuffer buffer_;
  size_t capacity_ = 0;
};

class TuneRun {
 public:
  TuneRun(Backend& backend, cudnnHandle_t handle, const ConvProblem& problem,
          const TunePolicy& policy, const TunerOptions& options, DeviceAllocator& allocator,
          tune_detail::CompileHandles* compile_handles = nullptr)
      : backend_(backend),
        handle_(handle),
        problem_(problem),
        policy_(policy),
        options_(options),
        allocator_(allocator),
        compile_handles_(compile_handles),
        start_(Clock::now()) {}

  // Both leave the tune's device state unfreed after a wait past its deadline (see
  // abandon_device_state).
  StatusOr<TuningRecord> run();
  // One validation run of the caller's plan, as a candidate's (Tuner::check).
  StatusOr<OutputCheck> check(Plan& plan);

 private:
  struct Tensor {
    TensorRole name;
    TensorShape shape;
    size_t payload_bytes = 0;
    GuardedBuffer buffer;
    uint64_t seed = 0;  // its data: hashed_input_value(seed, offset)
  };

  StatusOr<TuningRecord> run_steps();
  StatusOr<OutputCheck> check_steps(Plan& plan);
  template <typename T>
  StatusOr<T> abandon_if_stuck(StatusOr<T> result) {
    if (result.status().code() == StatusCode::kDeadlineExceeded) abandon_device_state();
    return result;
  }
  Status gather_candidates();
  // Heuristics B's candidates, timed, where limited mode left them for later; the new end.
  StatusOr<size_t> add_second_list(size_t end);
  // Limited mode: times the other engines (Entry::other_engine) of [begin, end) when the
  // problem's own best is near the best (rewrites_near_best), or nothing was timed.
  Status time_other_engines(size_t begin, size_t end);
  // The backend's candidates from `source` (timed, at verbose level 2); of the rewrites, only
  // those in `rewrites` when given.
  StatusOr<std::vector<Candidate>> ask(CandidateSource source,
                                       const std::vector<std::string>* rewrites = nullptr);
  // The rewrites whose best timed candidate is within kSecondListRewriteFactor of the best median,
  // and "" when the problem's own best is.
  std::vector<std::string> rewrites_near_best() const;
  // The best median of each rewrite's timed candidates ("" the problem's own).
  std::map<std::string, double> best_per_rewrite() const;
  void add_candidates(const std::vector<Candidate>& list, CandidateSource source);
  // The chosen candidate of entries_[begin, end), or null when none is left. Heuristic mode:
  // the first in rank order that passes validation. Timed modes: every candidate is timed
  // first, then the finalists are validated in order of speed until one passes.
  StatusOr<Entry*> choose_from(size_t begin, size_t end, bool budgeted);
  StatusOr<Entry*> first_valid_in_rank_order(size_t begin, size_t end);
  Status time_range(size_t begin, size_t end, bool budgeted);
  // Screens the candidates of [begin, end) not yet evaluated that are (or are not) compiled at
  // run time.
  Status screen_where(size_t begin, size_t end, bool budgeted, bool runtime_compiled);
  // The runtime-compiled part of screen_where: waves of kCompileWave compiled by the pool, then
  // timed in rank order; limited mode's cap and its stop after a wave that did not improve.
  Status screen_runtime_compiled(size_t begin, size_t end, bool budgeted);
  // Over the budget (exhaustive): true when screening must stop before `next`. Once a timed
  // candidate passes its check; while none does, only the heuristics' candidates go on (a short
  // list), and the knob variants and other engines of the exhaustive list wait (Entry::deferred)
  // until nothing else passes. Applies from the first candidate, timed or not.
  StatusOr<bool> stop_for_budget(size_t begin, size_t end, const Entry& next);
  // Exhaustive: whether knob combination `e` waits because its engine is far behind the others
  // (kKnobVariantFactor); if so, marks it not tried and says why.
  bool defer_far_knob_variant(Entry& e);
  // Exhaustive: whether runtime-compiled `e`, which no heuristic ranks, waits because the best so
  // far is within kNearRooflineFactor of the roofline floor; if so, marks it not tried and says
  // why.
  bool defer_unranked_compile_near_roofline(Entry& e);
  // True when e is a knob combination and `wave` holds a configuration of its engine that is not
  // one: e waits for the next wave, so that defer_far_knob_variant judges it by that
  // configuration's time instead of it being compiled blind beside it. Engine 69's split-K
  // combinations, compiled beside its default once a rule had taken engine 19 out of that wave,
  // never finished (issue 21); its default, timed first, took 3.3 ms where engine 70 took 0.97.
  static bool shares_wave_with_its_engine(const Entry& e, const std::vector<Entry*>& wave);
  // Exhaustive: after `wave` (runtime-compiled, timed) held a knob combination and did not improve
  // on `best_before`, the combinations in todo[next..] are not compiled.
  void stop_knob_variants(const std::vector<Entry*>& todo, size_t next,
                          const std::vector<Entry*>& wave, double best_before);
  // One pass of screen_where over the precompiled candidates of [begin, end) that are (or are
  // not) rewritten; with `heads_only`, only the first of each group (rewrite) with none timed.
  Status screen_pass(size_t begin, size_t end, bool budgeted, bool rewritten, bool heads_only);
  // Limited mode: marks the candidates of [begin, end) not yet evaluated whose group's best is
  // beyond kFarGroupFactor times the best as not tried.
  void defer_far_groups(size_t begin, size_t end);
  // Marks the candidates of [begin, end) not yet evaluated (of one kind, or any) as not tried.
  void defer_rest(size_t begin, size_t end, const std::string& why, int runtime_compiled);
  // Builds the plans of `wave` at once on the compile pool (Entry::prebuilt).
  void compile_wave(const std::vector<Entry*>& wave);
  int compile_threads() const;
  std::string budget_reason() const {
    return last_resort_ ? "an earlier candidate passed"
                        : "budget of " + format_ms(policy_.budget_ms) + " ms spent";
  }
  // Limited mode: whether compiling candidates at run time can pay for itself, given the best
  // precompiled median (and the roofline floor, when TunerOptions gives one); else `why` not.
  bool runtime_compilation_pays(std::string& why);
  // When the best median so far is within kNearRooflineFactor of the problem's roofline floor:
  // "takes X ms, within 1.25x of the roofline floor of Y ms"; else "" (also when no floor is
  // known). The floor is asked of TunerOptions once per tune (the CLI's may read the tuning
  // database).
  std::string near_roofline_floor();
  // The phases of one candidate. Each may drop it (Entry::dropped), which is not an error; an
  // error Status means the tune itself cannot go on (the tensors could not be made, say).
  Status admit(Entry& e);        // filters, build, workspace limits: sets e.plan
  Status prepare_run(Entry& e);  // tuning buffers and the workspace for e's plan
  Status screen(Entry& e);       // admit, prepare, the first timed runs
  // prepare_and_time of e's plan, its times appended to e's and the median updated.
  Status time_runs(Entry& e, int runs, float cutoff_ms, bool first);
  // prepare_run, then backend_.time of `plan` (e's, or one for part of the batch) and the guards
  // checked after it, on the device's turn (device_turn); the first timing of a candidate
  // (`first`) marks the inputs clean, as screening needs no pristine ones. Empty when e was
  // dropped (no workspace, failed to time, wrote out of bounds).
  StatusOr<std::vector<float>> prepare_and_time(Entry& e, Plan& plan, int runs, float cutoff_ms,
                                                bool first);
  void add_times(Entry& e, const std::vector<float>& times);  // and the median
  static std::string cutoff_text(float cutoff_ms);
  // Candidates that no heuristic ranks (the exhaustive list), precompiled, run once on
  // 1/kProbeBatchDivisor of the batch before the whole of it; true when that run (or the
  // warm-up's bound) is already past the cutoff, and so is the whole batch's time: e keeps that
  // run's time and is not timed further. True as well when e was dropped. Assumes that no engine
  // runs the whole batch faster than a part of it (a GPU test checks this on ResNet-50 layers);
  // a rewrite's transforms, per image, add to that. Rewritten candidates are probed too: on the
  // ResNet-50 stem's backward-filter at b256, s2d2+eng0 ran 770 ms on the whole batch against a
  // best near 1 ms (H100).
  StatusOr<bool> past_cutoff_on_part_of_batch(Entry& e, float cutoff_ms);
  // After a run that did not finish (kDeadlineExceeded): hands this tune's device buffers and
  // plans to a holder that is never destroyed. cudaFree and the destruction of a plan wait for
  // the device, which is still running that run: freeing them would hang the caller at the point
  // where the deadline was meant to return it an error.
  void abandon_device_state();
  // Early stopping: candidates clearly slower than the fastest keep their first runs; the rest
  // are timed up to the policy's runs, for a stable median.
  Status finish_timing(size_t begin, size_t end);
  Status validate(Entry& e);  // one run against the reference: e.validated, or dropped
  StatusOr<Entry*> validate_in_order_of_speed(size_t begin, size_t end);
  void report(const Entry& e, const char* phase, double wall_ms) const;
  Status check_cancelled() const {
    if (options_.cancelled && options_.cancelled()) {
      return Status(StatusCode::kCancelled, "tuning of " + problem_.to_string() + " cancelled");
    }
    return ok_status();
  }
  TuningRecord make_record(Entry& chosen);
  int first_timing_runs() const;
  // The label and outcome of the first filter that removes (config, notes), if any.
  bool filtered(const EngineConfig& config, NoteSet notes, std::string& label,
                std::string& outcome) const;
  void drop(Entry& e, bool is_filter, const std::string& label, const std::string& outcome);
  Status prepare_buffers();
  void pick_check_offsets(bool full);
  // The reference values at the check offsets: started on a thread of its own once the inputs'
  // seeds exist (start_reference), waited for before the first check (await_reference).
  void start_reference();
  Status await_reference();
  Status compute_reference(bool full);  // every output element checked (else a sample)
  Status upload_buffers();
  Status prepare_workspace(size_t bytes);
  StatusOr<std::string> broken_guard();  // "" when every guard is intact
  // "" when the output is right, else the rejection, and its label through `label`.
  StatusOr<std::string> check_output(NoteSet notes, double& relative_error, std::string& label);
  Tensor& output() { return tensors_[static_cast<size_t>(problem_.output_tensor())]; }
  TensorPointers pointers() const {
    TensorPointers t{tensors_[0].buffer.payload(), tensors_[1].buffer.payload(),
                     tensors_[2].buffer.payload()};
    post_inputs_.attach(t);
    return t;
  }
  void say(const std::string& line) const { log(LogLevel::kInfo, "tune: " + line); }

  Backend& backend_;
  cudnnHandle_t handle_;
  const ConvProblem& problem_;
  const TunePolicy& policy_;
  const TunerOptions& options_;
  DeviceAllocator& allocator_;
  tune_detail::CompileHandles* const compile_handles_;  // null: every build on handle_
  const Clock::time_point start_;
  DeviceInfo device_;

  std::vector<Entry> entries_;  // in rank order: the position is the rank
  std::set<EngineConfig> seen_;
  DropSummary summary_;
  bool any_timed_ = false;
  double best_median_ = -1;
  std::optional<double> roofline_floor_;  // near_roofline_floor's; -1: none known
  int64_t oom_floor_ = -1;                // smallest workspace whose allocation failed; -1: none
  bool flush_l2_ = false;

  bool buffers_ready_ = false;
  bool reference_ready_ = false;
  bool inputs_dirty_ = true;  // upload the inputs (not only the output) before the next run
  Tensor tensors_[3];
  GuardedBuffer workspace_;
  size_t workspace_bytes_ = 0;  // the current candidate's; its trailing guard sits there
  std::vector<uint8_t> guard_image_;
  std::mt19937_64 rng_;
  // The output elements compared, and the reference's values there.
  std::vector<int64_t> check_offsets_;
  std::vector<double> reference_values_;
  std::vector<uint8_t> output_copy_;       // the checked output elements, reused by every candidate
  tune_detail::PostOpInputs post_inputs_;  // bias and residual of a post-op chain
  std::unique_ptr<Plan> part_plan_;        // past_cutoff_on_part_of_batch's, while it runs
  // Where the tune's wall time went, for CONVPLAN_VERBOSE: heuristics and knob queries, input
  // data and reference, plan builds, validation runs with their checks, timed runs.
  struct Phases {
    double candidates = 0, data = 0, build = 0, compile = 0, check = 0, timing = 0;
  } phases_;
  size_t runtime_compiled_ = 0;  // runtime-compiled candidates built (screened) in this tune
  bool last_resort_ = false;     // deferred candidates get their turn: no cap, no wave stop
  std::set<std::pair<int64_t, bool>> listed_engines_;  // (engine, unfused) of the plain candidates
  bool second_list_pending_ = false;                   // limited mode: heuristics B not asked yet
  std::string compile_stop_;  // why limited mode compiles no more at run time ("" until then)
  int validation_runs_ = 0;
  // Declared last, so that its thread, which reads the members above, is joined before they go.
  std::future<Status> reference_;
};

void TuneRun::add_candidates(const std::vector<Candidate>& list, CandidateSource source) {
  // Positions in the source's own order, counted apart for the fused graph's engines and the
  // plain convolution's (a chain gets both lists, one after the other). Rewritten candidates
  // come capped by the rewriting backend already.
  int position[2] = {0, 0};
  const bool capped = policy_.mode == TuneMode::kLimited && source != CandidateSource::kAllEngines;
  for (const Candidate& c : list) {
    const bool plain = c.config.rewrite.empty();
    const int at = plain ? position[c.config.unfused ? 1 : 0]++ : 0;
    const bool engine_first =
        plain && listed_engines_.insert({c.config.engine_id, c.config.unfused}).second;
    if (!seen_.insert(c.config).second) continue;
    Entry e;
    e.candidate = c;
    e.source = source;
    e.candidate.rank = static_cast<int>(entries_.size());
    if (capped && plain && at >= kLimitedPerSource) {
      e.deferred = "past the first " + std::to_string(kLimitedPerSource) + " of " +
                   to_string(source) + "'s list (limited mode)";
      e.other_engine = engine_first && (c.notes & kNoteRuntimeCompilation) == 0;
    }
    entries_.push_back(std::move(e));
  }
}

StatusOr<std::vector<Candidate>> TuneRun::ask(CandidateSource source,
                                              const std::vector<std::string>* rewrites) {
  const Clock::time_point t0 = Clock::now();
  StatusOr<std::vector<Candidate>> list =
      rewrites == nullptr ? backend_.candidates(handle_, problem_, source)
                          : backend_.candidates_for_rewrites(handle_, problem_, source, *rewrites);
  if (policy_.verbose >= 2 && list.ok()) {
    say(std::string(to_string(source)) + ": " + std::to_string(list->size()) + " candidates in " +
        format_ms(ms_since(t0)) + " ms");
  }
  return list;
}

Status TuneRun::gather_candidates() {
  CONVPLAN_ASSIGN_OR_RETURN(std::vector<Candidate> a, ask(CandidateSource::kHeuristicA));
  add_candidates(a, CandidateSource::kHeuristicA);
  if (policy_.mode == TuneMode::kHeuristic && !entries_.empty()) return ok_status();
  if (policy_.mode == TuneMode::kLimited) {
    second_list_pending_ = true;  // asked after A's candidates are timed (add_second_list)
    return ok_status();
  }
  CONVPLAN_ASSIGN_OR_RETURN(std::vector<Candidate> b, ask(CandidateSource::kHeuristicB));
  add_candidates(b, CandidateSource::kHeuristicB);
  if (policy_.mode != TuneMode::kExhaustive) return ok_status();

  CONVPLAN_ASSIGN_OR_RETURN(std::vector<Candidate> all, ask(CandidateSource::kAllEngines));
  add_candidates(all, CandidateSource::kAllEngines);
  // Every engine seen so far, in order of first appearance, with the notes it came with. With a
  // post-op chain one index names two engines, one of the fused graph and one of the plain
  // convolution (unfused): they differ in knobs and notes (eng49 is precompiled unfused and
  // compiled at run time fused), so each is its own entry. Keyed by the index alone, the fused
  // engine's knob variants took the unfused one's notes and were timed as precompiled, and the
  // unfused engines got no variants of their own.
  struct Engine {
    int64_t id;
    bool unfused;
    NoteSet notes;
  };
  std::vector<Engine> engines;
  for (const Entry& e : entries_) {
    const EngineConfig& c = e.candidate.config;
    if (!c.rewrite.empty()) continue;  // a rewrite's engines belong to another problem
    bool known = false;
    for (const Engine& en : engines)
      known = known || (en.id == c.engine_id && en.unfused == c.unfused);
    if (!known) engines.push_back({c.engine_id, c.unfused, e.candidate.notes});
  }
  const ConvProblem plain = problem_.without_post_ops();
  for (size_t i = 0; i < engines.size(); ++i) {
    if (ms_since(start_) > policy_.budget_ms) {
      if (policy_.verbose >= 1) {
        say("budget of " + format_ms(policy_.budget_ms) + " ms spent while listing knobs; " +
            std::to_string(engines.size() - i) + " engines keep only their default knobs");
      }
      break;
    }
    const Engine& en = engines[i];
    const std::string name =
        std::string(en.unfused ? "unfused engine " : "engine ") + std::to_string(en.id);
    auto knobs = backend_.knobs(handle_, en.unfused ? plain : problem_, en.id);
    if (!knobs.ok()) {
      if (policy_.verbose >= 2) say("no knobs for " + name + ": " + knobs.status().message());
      continue;
    }
    const bool compiled = (en.notes & kNoteRuntimeCompilation) != 0;
    std::vector<EngineConfig> configs = knob_combinations(
        en.id, *knobs,
        compiled ? kMaxKnobCombinationsPerRuntimeCompiledEngine : kMaxKnobCombinationsPerEngine);
    // A candidate without knob choices already runs the engine's defaults, the first combination.
    EngineConfig bare{en.id, {}};
    bare.unfused = en.unfused;
    if (!knobs->empty() && !configs.empty() && seen_.count(bare) != 0)
      configs.erase(configs.begin());
    std::vector<Candidate> combos;
    for (EngineConfig& c : configs) {
      Candidate cand;
      cand.config = std::move(c);
      cand.config.unfused = en.unfused;
      cand.notes = en.notes;
      combos.push_back(std::move(cand));
    }
    const size_t before = entries_.size();
    add_candidates(combos, CandidateSource::kAllEngines);
    for (size_t j = before; j < entries_.size(); ++j) entries_[j].knob_variant = true;
    if (policy_.verbose >= 2) {
      say(name + (compiled ? " (compiled at run time)" : "") + ": " +
          std::to_string(entries_.size() - before) + " knob combinations added");
    }
  }
  return ok_status();
}

bool TuneRun::filtered(const EngineConfig& config, NoteSet notes, std::string& label,
                       std::string& outcome) const {
  const NoteSet tc = notes & (kNoteTensorCore | kNoteDownConvertInputs);
  if (problem_.data_type == DataType::kFloat && !problem_.allow_tensor_cores && tc != 0) {
    label = "tensor cores not allowed";
    outcome = "filtered: tensor cores (TF32) not allowed for this fp32 problem (notes " +
              notes_to_string(tc) + ")";
    return true;
  }
  if (policy_.deterministic && (notes & kNoteNonDeterministic) != 0) {
    label = "CONVPLAN_DETERMINISTIC";
    outcome = "filtered: non-deterministic, and determinism is required (CONVPLAN_DETERMINISTIC)";
    return true;
  }
  if ((notes & policy_.forbidden_notes) != 0) {
    label = "CONVPLAN_FORBIDDEN_NOTES";
    outcome = "filtered: notes " + notes_to_string(notes & policy_.forbidden_notes) +
              " forbidden (CONVPLAN_FORBIDDEN_NOTES)";
    return true;
  }
  if (!policy_.allow_runtime_compilation && (notes & kNoteRuntimeCompilation) != 0) {
    label = "runtime compilation not allowed";
    outcome = "filtered: runtime compilation not allowed (CONVPLAN_ALLOW_RUNTIME_COMPILATION=0)";
    return true;
  }
  if (!policy_.rewrites && !config.rewrite.empty()) {
    label = "CONVPLAN_REWRITES=off";
    outcome = "filtered: rewrite " + config.rewrite + " while rewrites are off (CONVPLAN_REWRITES)";
    return true;
  }
  for (const EngineRule& rule : policy_.disabled_for(problem_.direction)) {
    if (rule.matches(config)) {
      label = disabled_variable(problem_.direction);
      outcome = "filtered: engine " + std::to_string(config.engine_id) + " disabled by " + label +
                " (rule " + engine_rule_text(rule) + ")";
      return true;
    }
  }
  for (const auto& [rules, source] : {std::pair{&policy_.errata, "CONVPLAN_ERRATA_FILE"},
                                      std::pair{&known_fault_rules(), "a known fault"}}) {
    for (const ErrataRule& rule : *rules) {
      if (rule.matches(problem_, config)) {
        label = "errata rule '" + rule.id + "'";
        outcome = "filtered: errata rule '" + rule.id + "' (" + source + ")";
        return true;
      }
    }
  }
  return false;
}

void TuneRun::drop(Entry& e, bool is_filter, const std::string& label, const std::string& outcome) {
  e.result.outcome = outcome;
  e.dropped = true;
  e.plan.reset();
  summary_.add(is_filter, label);
}

Status TuneRun::prepare_buffers() {
  if (buffers_ready_) return ok_status();
  std::random_device rd;
  rng_.seed((static_cast<uint64_t>(rd()) << 32) ^ rd());
  guard_image_.resize(kGuardBytes);
  for (size_t i = 0; i < kGuardBytes; ++i) guard_image_[i] = guard_byte(i);

  const TensorShape shapes[3] = {problem_.x_shape(), problem_.w_shape(), problem_.y_shape()};
  const TensorRole names[3] = {TensorRole::kX, TensorRole::kW, TensorRole::kY};
  const int64_t elem = size_of(problem_.data_type);
  for (int t = 0; t < 3; ++t) {
    Tensor& tensor = tensors_[t];
    tensor.name = names[t];
    tensor.shape = shapes[t];
    tensor.payload_bytes = static_cast<size_t>(shapes[t].span_elements() * elem);
    // Fresh data for each tune: the seed of the counter hash (hashed_input_value) that the
    // backend fills the tensor from, on the device, and the reference computes values from.
    tensor.seed = rng_();
    Status s = tensor.buffer.allocate(allocator_, tensor.payload_bytes);
    if (!s.ok()) {
      return s.with_context(std::string("tuning buffer for ") + to_string(names[t]) + " of " +
                            problem_.to_string());
    }
  }
  CONVPLAN_RETURN_IF_ERROR(post_inputs_.prepare(backend_, handle_, allocator_, problem_, rng_()));
  buffers_ready_ = true;
  flush_l2_ = problem_.min_bytes() <= static_cast<double>(device_.l2_bytes);
  if (policy_.validate) start_reference();
  return ok_status();
}

// The output elements to compare: all of them when the full reference is affordable, else a
// random sample sized so that the sampled reference costs about kSampledReferenceWork.
void TuneRun::pick_check_offsets(bool full) {
  const TensorShape& os = output().shape;
  check_offsets_.clear();
  if (!full) {
    // Products that make one output element (see reference_convolution_at).
    double filter = 1, output_size = 1;
    const SpatialDims o = problem_.output();
    for (int d = 0; d < problem_.spatial_dims; ++d) {
      filter *= static_cast<double>(problem_.filter[d]);
      output_size *= static_cast<double>(o[d]);
    }
    double cost = 1;
    switch (problem_.direction) {
      case Direction::kForward:
        cost = static_cast<double>(problem_.c / problem_.groups) * filter;
        break;
      case Direction::kBackwardData:
        cost = static_cast<double>(problem_.k / problem_.groups) * filter;
        break;
      case Direction::kBackwardFilter: cost = static_cast<double>(problem_.n) * output_size; break;
    }
    int64_t samples = static_cast<int64_t>(kSampledReferenceWork / std::max(cost, 1.0));
    samples = std::clamp(samples, kMinSampledElements, kMaxSampledElements);
    if (samples < os.elements()) {
      std::unordered_set<int64_t> picked;
      while (static_cast<int64_t>(picked.size()) < samples) picked.insert(random_offset(os, rng_));
      check_offsets_.assign(picked.begin(), picked.end());
      std::sort(check_offsets_.begin(), check_offsets_.end());
      return;
    }
  }
  check_offsets_.reserve(static_cast<size_t>(os.elements()));
  for_each_offset(os, [&](int64_t off) { check_offsets_.push_back(off); });
}

// The host's part of a check (up to ~30 ms a problem: the sampled weight gradient of a ResNet-50
// layer at b256 took 29 ms on 16 threads) overlaps the timing of candidates, which waits on the
// GPU (issue 21). The offsets are drawn here, on the tune's thread, which owns rng_.
void TuneRun::start_reference() {
  if (reference_ready_ || reference_.valid()) return;
  int64_t elements = 0;
  for (TensorRole t : kTensorRoles) elements += problem_.shape_of(t).elements();
  const bool full = problem_.flops() <= options_.reference_max_flops &&
                    elements <= options_.reference_max_elements;
  pick_check_offsets(full);
  reference_ = std::async(std::launch::async, [this, full] { return compute_reference(full); });
}

Status TuneRun::await_reference() {
  if (reference_ready_) return ok_status();
  ScopedMs timer(phases_.data);
  start_reference();  // started already by prepare_buffers() (validation is on)
  CONVPLAN_RETURN_IF_ERROR(reference_.get());
  reference_ready_ = true;
  return ok_status();
}

Status TuneRun::compute_reference(bool full) {
  const Clock::time_point t0 = Clock::now();
  const TensorRole out = problem_.output_tensor();
  if (full) {
    std::vector<double> host[3];
    for (int t = 0; t < 3; ++t) {
      const int64_t span = tensors_[t].shape.span_elements();
      host[t].assign(static_cast<size_t>(span), 0.0);
      if (tensors_[t].name == out && problem_.beta == 0.0) continue;  // poisoned, never read
      for (int64_t i = 0; i < span; ++i) {
        host[t][static_cast<size_t>(i)] = hashed_input_value(tensors_[t].seed, i);
      }
    }
    // The plain convolution; post_inputs_ applies a chain below.
    Status s = reference_convolution(problem_.without_post_ops(), host[0], host[1], host[2]);
    if (!s.ok()) return s.with_context("reference for " + problem_.to_string());
    const std::vector<double>& ov = host[static_cast<size_t>(out)];
    reference_values_.clear();
    reference_values_.reserve(check_offsets_.size());
    for (int64_t off : check_offsets_) reference_values_.push_back(ov[static_cast<size_t>(off)]);
  } else {
    // Each sampled element on its own, its inputs computed from the seeds (no host copy of the
    // tensors): scattered reads over a whole batch made this 0.8-2.8 s on one thread for a
    // ResNet-50 weight gradient at batch 256, so the elements are split between threads.
    const HashedInputs seeds{tensors_[0].seed, tensors_[1].seed, tensors_[2].seed};
    const int64_t count = static_cast<int64_t>(check_offsets_.size());
    reference_values_.assign(check_offsets_.size(), 0.0);
    std::vector<Status> statuses(check_offsets_.size(), ok_status());
    parallel_for(count, 1, [&](int64_t begin, int64_t end) {
      const std::vector<int64_t> part(check_offsets_.begin() + begin, check_offsets_.begin() + end);
      std::vector<double> values;
      statuses[static_cast<size_t>(begin)] =
          reference_convolution_at_hashed(problem_.without_post_ops(), seeds, part, values);
      std::copy(values.begin(), values.end(), reference_values_.begin() + begin);
    });
    for (const Status& s : statuses) {
      if (!s.ok()) return s.with_context("sampled reference for " + problem_.to_string());
    }
  }
  post_inputs_.apply(problem_, check_offsets_, reference_values_);
  if (policy_.verbose >= 2) {
    say(std::string(full ? "full" : "sampled") + " reference over " +
        std::to_string(check_offsets_.size()) + " output elements in " + format_ms(ms_since(t0)) +
        " ms");
  }
  return ok_status();
}

Status TuneRun::upload_buffers() {
  const TensorRole out = problem_.output_tensor();
  for (Tensor& t : tensors_) {
    if (!inputs_dirty_ && t.name != out) continue;
    CONVPLAN_RETURN_IF_ERROR(
        backend_.copy_to_device(handle_, t.buffer.base(), guard_image_.data(), kGuardBytes));
    CONVPLAN_RETURN_IF_ERROR(
        backend_.copy_to_device(handle_, t.buffer.base() + kGuardBytes + t.payload_bytes,
                                guard_image_.data(), kGuardBytes));
    if (t.name == out && problem_.beta == 0.0) {  // the poison (NaN): unwritten elements show
      CONVPLAN_RETURN_IF_ERROR(backend_.fill(handle_, t.buffer.payload(), 0xFF, t.payload_bytes));
      continue;
    }
    CONVPLAN_RETURN_IF_ERROR(backend_.fill_hashed(handle_, t.buffer.payload(), problem_.data_type,
                                                  t.shape.span_elements(), t.seed));
  }
  return ok_status();
}

Status TuneRun::prepare_workspace(size_t bytes) {
  if (workspace_.base() == nullptr || workspace_.capacity() < bytes) {
    CONVPLAN_RETURN_IF_ERROR(workspace_.allocate(allocator_, bytes));
  }
  // The guards sit right before and right after the candidate's own workspace_bytes.
  CONVPLAN_RETURN_IF_ERROR(
      backend_.copy_to_device(handle_, workspace_.base(), guard_image_.data(), kGuardBytes));
  CONVPLAN_RETURN_IF_ERROR(backend_.copy_to_device(handle_, workspace_.base() + kGuardBytes + bytes,
                                                   guard_image_.data(), kGuardBytes));
  workspace_bytes_ = bytes;
  return ok_status();
}

StatusOr<std::string> TuneRun::broken_guard() {
  std::vector<uint8_t> seen(kGuardBytes);
  auto intact = [&](const char* where) -> StatusOr<bool> {
    CONVPLAN_RETURN_IF_ERROR(backend_.copy_to_host(handle_, seen.data(), where, kGuardBytes));
    return seen == guard_image_;
  };
  for (const Tensor& t : tensors_) {
    CONVPLAN_ASSIGN_OR_RETURN(bool before, intact(t.buffer.base()));
    if (!before) return std::string("guard bytes before ") + to_string(t.name) + " overwritten";
    CONVPLAN_ASSIGN_OR_RETURN(bool after, intact(t.buffer.base() + kGuardBytes + t.payload_bytes));
    if (!after) return std::string("guard bytes after ") + to_string(t.name) + " overwritten";
  }
  CONVPLAN_ASSIGN_OR_RETURN(bool before, intact(workspace_.base()));
  if (!before) return std::string("guard bytes before the workspace overwritten");
  CONVPLAN_ASSIGN_OR_RETURN(bool after, intact(workspace_.base() + kGuardBytes + workspace_bytes_));
  if (!after) {
    return "guard bytes after the workspace of " + std::to_string(workspace_bytes_) +
           " bytes overwritten";
  }
  return std::string();
}

StatusOr<std::string> TuneRun::check_output(NoteSet notes, double& relative_error,
                                            std::string& label) {
  Tensor& out = output();
  const DataType dt = problem_.data_type;
  const int64_t elem = size_of(dt);
  std::vector<uint8_t>& bytes = output_copy_;
  bytes.resize(check_offsets_.size() * static_cast<size_t>(elem));
  // Every element must have been written: none may still hold the poison, unless beta != 0 left
  // the old values there.
  CONVPLAN_ASSIGN_OR_RETURN(
      int64_t nan_offset, backend_.read_output(handle_, out.buffer.payload(), out.shape, elem,
                                               problem_.beta == 0.0, check_offsets_, bytes.data()));
  if (nan_offset >= 0) {
    label = "rejected: output not written (NaN)";
    return "rejected: output element " + std::to_string(nan_offset) + " of " + to_string(out.name) +
           " is NaN (not written)";
  }
  std::vector<double> got(check_offsets_.size());
  for (size_t i = 0; i < check_offsets_.size(); ++i) {
    from_data_type(dt, bytes.data() + i * elem, &got[i], 1);
  }
  relative_error = relative_l2_error(got, reference_values_);
  const double tolerance = relative_error_tolerance(problem_, notes);
  if (!(relative_error <= tolerance)) {
    label = "rejected: wrong result";
    return "rejected: relative error " + format_g(relative_error) + " > " + format_g(tolerance) +
           (check_offsets_.size() < static_cast<size_t>(out.shape.elements())
                ? " (on " + std::to_string(check_offsets_.size()) + " sampled elements)"
                : std::string());
  }
  return std::string();
}

Status TuneRun::admit(Entry& e) {
  e.evaluated = true;
  CandidateResult& r = e.result;
  r.config = e.candidate.config;
  r.notes = e.candidate.notes;
  r.rank = e.candidate.rank;
  std::string label, outcome;
  if (filtered(r.config, r.notes, label, outcome)) {
    drop(e, true, label, outcome);
    return ok_status();
  }
  auto built = [&]() -> StatusOr<std::unique_ptr<Plan>> {
    if (e.prebuilt) {  // by the compile pool
      e.prebuilt = false;
      if (!e.prebuild_error.ok()) return e.prebuild_error;
      return std::move(e.prebuilt_plan);
    }
    ScopedMs timer(is_runtime_compiled(e) ? phases_.compile : phases_.build);
    return backend_.build(handle_, problem_, r.config);
  }();
  if (!built.ok()) {
    drop(e, false, "failed to build", "failed to build: " + built.status().to_string());
    return ok_status();
  }
  e.plan = PlanPtr(std::move(built).value().release());
  r.notes = e.plan->notes();
  r.workspace_bytes = e.plan->workspace_bytes();
  if (r.notes != e.candidate.notes && filtered(r.config, r.notes, label, outcome)) {
    drop(e, true, label, outcome);
    return ok_status();
  }
  if (r.workspace_bytes > policy_.workspace_limit) {
    drop(e, true, "CONVPLAN_WORKSPACE_LIMIT",
         "filtered: workspace of " + std::to_string(r.workspace_bytes) + " bytes > the limit of " +
             std::to_string(policy_.workspace_limit) + " (CONVPLAN_WORKSPACE_LIMIT)");
    return ok_status();
  }
  if (oom_floor_ >= 0 && r.workspace_bytes >= oom_floor_) {
    drop(e, false, "out of memory for the workspace",
         "dropped: workspace of " + std::to_string(r.workspace_bytes) + " bytes; one of " +
             std::to_string(oom_floor_) + " bytes could not be allocated");
  }
  return ok_status();
}

Status TuneRun::prepare_run(Entry& e) {
  {
    ScopedMs timer(phases_.data);
    CONVPLAN_RETURN_IF_ERROR(prepare_buffers());
  }
  const int64_t bytes = e.result.workspace_bytes;
  Status ws = prepare_workspace(static_cast<size_t>(bytes));
  if (ws.code() == StatusCode::kOutOfMemory) {
    oom_floor_ = oom_floor_ < 0 ? bytes : std::min(oom_floor_, bytes);
    drop(e, false, "out of memory for the workspace",
         "dropped: workspace of " + std::to_string(bytes) +
             " bytes could not be allocated: " + ws.message());
    return ok_status();
  }
  CONVPLAN_RETURN_IF_ERROR(ws);
  return upload_buffers();
}

int TuneRun::first_timing_runs() const {
  return std::min(kFirstTimedRuns, std::max(policy_.timed_runs, 1));
}

StatusOr<std::vector<float>> TuneRun::prepare_and_time(Entry& e, Plan& plan, int runs,
                                                       float cutoff_ms, bool first) {
  // Held until the timing has synchronized and the guards are read back: nothing of this tune
  // is left running on the GPU when another takes its turn.
  MutexLock turn(device_turn(device_.ordinal));
  CONVPLAN_RETURN_IF_ERROR(prepare_run(e));
  if (e.dropped) return std::vector<float>();
  // Timing needs inputs, not pristine ones: they are made again before the first check.
  if (first) inputs_dirty_ = false;
  auto times = [&] {
    ScopedMs timer(phases_.timing);
    return backend_.time(plan, pointers(), workspace_.payload(), policy_.warmup_runs, runs,
                         flush_l2_, cutoff_ms);
  }();
  // A run that never finished holds the device: every later candidate would wait behind it (and
  // out its own deadline), so the tune ends here, naming the candidate for an errata rule.
  if (times.status().code() == StatusCode::kDeadlineExceeded) {
    return times.status().with_context("timing " + e.candidate.config.to_string() +
                                       " (CONVPLAN_ERRATA_FILE can leave it out)");
  }
  if (!times.ok()) {
    drop(e, false, "failed to time", "failed to time: " + times.status().to_string());
    return std::vector<float>();
  }
  if (times->empty()) {
    drop(e, false, "failed to time", "failed to time: the backend returned no runs");
    return std::vector<float>();
  }
  // Timing runs execute too: anything they wrote out of bounds counts as in validation.
  CONVPLAN_ASSIGN_OR_RETURN(std::string broken, broken_guard());
  if (!broken.empty()) {
    drop(e, false, "rejected: wrote past its output/workspace",
         "rejected: wrote past its output/workspace while timed (" + broken + ")");
    return std::vector<float>();
  }
  return times;
}

void TuneRun::add_times(Entry& e, const std::vector<float>& times) {
  CandidateResult& r = e.result;
  r.times_ms.insert(r.times_ms.end(), times.begin(), times.end());
  std::vector<float> sorted = r.times_ms;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  r.median_ms = n % 2 == 1 ? sorted[n / 2] : 0.5 * (double{sorted[n / 2 - 1]} + sorted[n / 2]);
}

std::string TuneRun::cutoff_text(float cutoff_ms) {
  return "the cutoff of " + format_ms(cutoff_ms) + " ms (" + format_ms(kCutoffFactor) +
         "x the best median)";
}

Status TuneRun::time_runs(Entry& e, int runs, float cutoff_ms, bool first) {
  CONVPLAN_ASSIGN_OR_RETURN(std::vector<float> times,
                            prepare_and_time(e, *e.plan, runs, cutoff_ms, first));
  if (e.dropped) return ok_status();
  add_times(e, times);
  if (cutoff_ms > 0 && times.size() < static_cast<size_t>(runs)) {
    e.timing_stopped = "a run exceeded " + cutoff_text(cutoff_ms);
  }
  return ok_status();
}

StatusOr<bool> TuneRun::past_cutoff_on_part_of_batch(Entry& e, float cutoff_ms) {
  ConvProblem part = problem_;
  part.n = (problem_.n + kProbeBatchDivisor - 1) / kProbeBatchDivisor;
  if (cutoff_ms <= 0 || part.n == problem_.n || e.source != CandidateSource::kAllEngines ||
      is_runtime_compiled(e)) {
    return false;
  }
  StatusOr<std::unique_ptr<Plan>> plan = [&] {
    ScopedMs timer(phases_.build);
    return backend_.build(handle_, part, e.result.config);
  }();
  // The whole batch's timing decides where the part's plan cannot be had.
  if (!plan.ok() || (*plan)->workspace_bytes() > e.result.workspace_bytes) return false;
  // One run: the warm-up's bound, or the run after it, decides.
  part_plan_ = std::move(plan).value();
  CONVPLAN_ASSIGN_OR_RETURN(std::vector<float> times,
                            prepare_and_time(e, *part_plan_, 1, cutoff_ms, true));
  part_plan_.reset();
  if (e.dropped) return true;
  if (times.back() <= cutoff_ms) return false;
  add_times(e, times);
  e.timing_stopped = "on " + std::to_string(part.n) + " of the batch's " +
                     std::to_string(problem_.n) + " images a run took " + format_ms(times.back()) +
                     " ms, past " + cutoff_text(cutoff_ms);
  return true;
}

void TuneRun::abandon_device_state() {
  struct Abandoned {
    std::vector<GuardedBuffer> buffers;
    tune_detail::PostOpInputs post_inputs;
    std::vector<PlanPtr> plans;
    std::vector<std::unique_ptr<Plan>> owned_plans;
  };
  static Mutex* const mu = new Mutex;
  static auto* const held = new std::vector<std::unique_ptr<Abandoned>>;  // reachable: no leak
  auto a = std::make_unique<Abandoned>();
  for (Tensor& t : tensors_) a->buffers.push_back(std::move(t.buffer));
  a->buffers.push_back(std::move(workspace_));
  a->post_inputs = std::move(post_inputs_);
  for (Entry& e : entries_) {
    a->plans.push_back(std::move(e.plan));
    a->owned_plans.push_back(std::move(e.prebuilt_plan));
  }
  a->owned_plans.push_back(std::move(part_plan_));
  buffers_ready_ = false;
  MutexLock lock(*mu);
  held->push_back(std::move(a));
}

Status TuneRun::screen(Entry& e) {
  // A candidate whose kernel never finishes (or whose build never returns) stops the tune with no
  // line of its own at level 2, which reports candidates when they are done: level 3 names it.
  if (policy_.verbose >= 3) say(verbose_head(e) + "]: starting");
  CONVPLAN_RETURN_IF_ERROR(admit(e));
  if (e.dropped) return ok_status();
  const float cutoff = best_median_ > 0 ? static_cast<float>(kCutoffFactor * best_median_) : 0.0f;
  CONVPLAN_ASSIGN_OR_RETURN(bool stopped, past_cutoff_on_part_of_batch(e, cutoff));
  if (!stopped) CONVPLAN_RETURN_IF_ERROR(time_runs(e, first_timing_runs(), cutoff, true));
  if (e.dropped) return ok_status();
  e.timed = true;
  any_timed_ = true;
  if (best_median_ < 0 || e.result.median_ms < best_median_) best_median_ = e.result.median_ms;
  if (e.result.median_ms > kKeepPlanFactor * best_median_) e.plan.reset();
  return ok_status();
}

Status TuneRun::screen_where(size_t begin, size_t end, bool budgeted, bool runtime_compiled) {
  if (runtime_compiled) return screen_runtime_compiled(begin, end, budgeted);
  // Rewritten candidates first: rewrites apply where cuDNN is weak (few channels), so they are
  // usually the fastest, and the plain ones after them stop at the cutoff after one run. On the
  // ResNet-50 stem the plain ones take 1.7-4 ms a run against the rewrites' 0.4-1 ms (issue 17:
  // what rewrites add to tuning). Ranks, and so ties, do not change.
  const bool heads_first = policy_.mode == TuneMode::kLimited && !last_resort_;
  for (const bool rewritten : {true, false}) {
    if (heads_first) {
      CONVPLAN_RETURN_IF_ERROR(screen_pass(begin, end, budgeted, rewritten, true));
      defer_far_groups(begin, end);
    }
    CONVPLAN_RETURN_IF_ERROR(screen_pass(begin, end, budgeted, rewritten, false));
  }
  return ok_status();
}

Status TuneRun::screen_pass(size_t begin, size_t end, bool budgeted, bool rewritten,
                            bool heads_only) {
  // The groups with a timed candidate: taken once, then kept up to date as candidates are timed.
  std::map<std::string, double> timed;
  if (heads_only) timed = best_per_rewrite();
  for (size_t i = begin; i < end; ++i) {
    Entry& e = entries_[i];
    if (e.evaluated || !e.deferred.empty() || is_runtime_compiled(e)) continue;
    const std::string& group = e.candidate.config.rewrite;
    if (group.empty() == rewritten) continue;
    if (heads_only && timed.count(group) != 0) continue;
    if (defer_far_knob_variant(e)) continue;
    if (budgeted) {
      CONVPLAN_ASSIGN_OR_RETURN(bool stop, stop_for_budget(begin, end, e));
      if (stop) {
        defer_rest(begin, end, budget_reason(), 0);
        return ok_status();
      }
    }
    CONVPLAN_RETURN_IF_ERROR(check_cancelled());
    const Clock::time_point t0 = Clock::now();
    CONVPLAN_RETURN_IF_ERROR(screen(e));
    report(e, "timed", ms_since(t0));
    if (e.timed) timed.emplace(group, e.result.median_ms);
  }
  return ok_status();
}

void TuneRun::defer_far_groups(size_t begin, size_t end) {
  if (best_median_ <= 0) return;
  const std::map<std::string, double> bests = best_per_rewrite();
  for (size_t i = begin; i < end; ++i) {
    Entry& e = entries_[i];
    if (e.evaluated || !e.deferred.empty()) continue;
    const std::string& group = e.candidate.config.rewrite;
    auto it = bests.find(group);
    if (it == bests.end() || it->second <= kFarGroupFactor * best_median_) continue;
    e.deferred = (group.empty() ? std::string("the problem's") : "rewrite " + group + "'s") +
                 " first candidate took " + format_ms(it->second) + " ms, over " +
                 format_ms(kFarGroupFactor) + "x the best, " + format_ms(best_median_) +
                 " ms (limited mode)";
  }
}

StatusOr<bool> TuneRun::stop_for_budget(size_t begin, size_t end, const Entry& next) {
  // The last resort (nothing passed within the limits) stops at the first candidate that passes.
  if (!last_resort_ && ms_since(start_) <= policy_.budget_ms) return false;
  if (any_timed_) {
    CONVPLAN_ASSIGN_OR_RETURN(Entry * passed, validate_in_order_of_speed(begin, end));
    if (passed != nullptr) {
      if (policy_.verbose >= 1 && !last_resort_) {
        say("budget of " + format_ms(policy_.budget_ms) + " ms spent for " + problem_.to_string() +
            "; candidates from rank " + std::to_string(next.candidate.rank) + " on of " +
            std::to_string(end - begin) + " not tried");
      }
      return true;
    }
  }
  // Nothing has passed yet: the heuristics' candidates go on, the exhaustive list waits.
  if (last_resort_ || next.source != CandidateSource::kAllEngines) return false;
  if (policy_.verbose >= 1) {
    say("budget of " + format_ms(policy_.budget_ms) + " ms spent for " + problem_.to_string() +
        " before a candidate passed; the exhaustive list from rank " +
        std::to_string(next.candidate.rank) + " waits until nothing else passes");
  }
  return true;
}

bool TuneRun::defer_far_knob_variant(Entry& e) {
  if (!e.knob_variant || last_resort_) return false;
  const EngineConfig& config = e.candidate.config;
  double engine_best = -1, base_best = -1;  // e's engine; every configuration but the variants
  auto lower = [](double& best, double ms) {
    if (best < 0 || ms < best) best = ms;
  };
  for (const Entry& o : entries_) {
    if (!o.timed || o.dropped) continue;
    const EngineConfig& c = o.candidate.config;
    if (!o.knob_variant) lower(base_best, o.result.median_ms);
    if (same_plain_engine(c, config)) lower(engine_best, o.result.median_ms);
  }
  if (engine_best < 0 || base_best < 0 || engine_best <= kKnobVariantFactor * base_best)
    return false;
  e.deferred = "a knob combination of " +
               std::string(config.unfused ? "unfused engine " : "engine ") +
               std::to_string(config.engine_id) + ", whose best configuration takes " +
               format_ms(engine_best) + " ms, more than " + format_ms(kKnobVariantFactor) +
               "x the best of the engines' own configurations, " + format_ms(base_best) +
               " ms (exhaustive mode)";
  return true;
}

bool TuneRun::shares_wave_with_its_engine(const Entry& e, const std::vector<Entry*>& wave) {
  if (!e.knob_variant) return false;
  return std::any_of(wave.begin(), wave.end(), [&](const Entry* o) {
    return !o->knob_variant && same_plain_engine(o->candidate.config, e.candidate.config);
  });
}

bool TuneRun::defer_unranked_compile_near_roofline(Entry& e) {
  if (policy_.mode == TuneMode::kLimited || last_resort_ ||
      e.source != CandidateSource::kAllEngines)
    return false;
  const std::string near = near_roofline_floor();
  if (near.empty()) return false;
  e.deferred = "no heuristic ranks it and the best so far " + near +
               ": not worth a compilation (exhaustive mode)";
  return true;
}

void TuneRun::stop_knob_variants(const std::vector<Entry*>& todo, size_t next,
                                 const std::vector<Entry*>& wave, double best_before) {
  if (std::none_of(wave.begin(), wave.end(), [](const Entry* e) { return e->knob_variant; }))
    return;
  const std::string why = "a wave of runtime-compiled knob combinations did not improve on " +
                          format_ms(best_before) + " ms (exhaustive mode)";
  for (size_t i = next; i < todo.size(); ++i) {
    Entry& e = *todo[i];
    if (e.knob_variant && !e.evaluated && e.deferred.empty()) e.deferred = why;
  }
}

void TuneRun::defer_rest(size_t begin, size_t end, const std::string& why, int runtime_compiled) {
  for (size_t i = begin; i < end; ++i) {
    Entry& e = entries_[i];
    if (e.evaluated || !e.deferred.empty()) continue;
    if (runtime_compiled >= 0 && is_runtime_compiled(e) != (runtime_compiled == 1)) continue;
    e.deferred = why;
  }
}

int TuneRun::compile_threads() const {
  if (policy_.compile_threads > 0) return policy_.compile_threads;
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(cores, 1, kDefaultCompileThreads);
}

void TuneRun::compile_wave(const std::vector<Entry*>& wave) {
  const size_t threads = std::min<size_t>(static_cast<size_t>(compile_threads()), wave.size());
  if (threads <= 1 || compile_handles_ == nullptr) return;  // admit() builds each on handle_
  std::vector<std::unique_ptr<OwnedHandle>> handles =
      compile_handles_->take(device_.ordinal, threads);
  if (handles.size() <= 1) {
    compile_handles_->give_back(device_.ordinal, std::move(handles));
    return;
  }
  if (policy_.verbose >= 2) {
    std::string names;  // level 3: which, so that a compilation that never returns shows
    for (const Entry* e : wave) {
      if (policy_.verbose < 3) break;
      names += (names.empty() ? ": " : ", ") + e->candidate.config.to_string();
    }
    say("compiling " + std::to_string(wave.size()) + " runtime-compiled candidates on " +
        std::to_string(handles.size()) + " threads" + names);
  }
  // cuDNN does not promise that one handle may finalize plans from several threads at once, so
  // each thread builds on a handle of its own; the plan then comes to handle_ as a JSON clone
  // (about 1 ms: the compiled kernel is reused), since plans are bound to their handle.
  struct Built {
    Status build;
    std::string json;
    double ms = 0;  // the build's own time, for level 3
  };
  std::vector<Built> built(wave.size());
  std::atomic<size_t> next{0};
  auto work = [&](cudnnHandle_t h) {
    for (size_t i = next++; i < wave.size(); i = next++) {
      const Clock::time_point t0 = Clock::now();
      StatusOr<std::unique_ptr<Plan>> plan = backend_.build(h, problem_, wave[i]->candidate.config);
      built[i].ms = ms_since(t0);
      if (!plan.ok()) {
        built[i].build = plan.status();
        continue;
      }
      StatusOr<std::string> json = (*plan)->to_json();
      if (json.ok()) built[i].json = std::move(json).value();  // else admit() builds it again
    }
  };
  {
    ScopedMs timer(phases_.compile);
    std::vector<std::thread> pool;
    for (size_t t = 1; t < handles.size(); ++t) pool.emplace_back(work, handles[t]->get());
    work(handles[0]->get());
    for (std::thread& t : pool) t.join();
  }
  compile_handles_->give_back(device_.ordinal, std::move(handles));
  if (policy_.verbose >= 3) {  // which compilations cost the wave's time, and which failed
    std::string times;
    for (size_t i = 0; i < wave.size(); ++i) {
      times += (i == 0 ? "" : ", ") + wave[i]->candidate.config.to_string() + " " +
               format_ms(built[i].ms) + " ms" + (built[i].build.ok() ? "" : " (failed)");
    }
    say("compiled: " + times);
  }
  ScopedMs timer(phases_.build);
  for (size_t i = 0; i < wave.size(); ++i) {
    Entry& e = *wave[i];
    if (!built[i].build.ok()) {
      e.prebuilt = true;
      e.prebuild_error = built[i].build;
      continue;
    }
    if (built[i].json.empty()) continue;
    StatusOr<std::unique_ptr<Plan>> clone =
        backend_.build_from_json(handle_, problem_, built[i].json);
    if (!clone.ok()) continue;  // admit() builds it on handle_
    e.prebuilt = true;
    e.prebuilt_plan = std::move(clone).value();
  }
}

Status TuneRun::screen_runtime_compiled(size_t begin, size_t end, bool budgeted) {
  const bool limited = policy_.mode == TuneMode::kLimited && !last_resort_;
  if (limited && !compile_stop_.empty()) {  // an earlier range (heuristics A's) stopped compiling
    defer_rest(begin, end, compile_stop_, 1);
    return ok_status();
  }
  std::vector<Entry*> todo;
  for (size_t i = begin; i < end; ++i) {
    Entry& e = entries_[i];
    if (!e.evaluated && e.deferred.empty() && is_runtime_compiled(e)) todo.push_back(&e);
  }
  for (size_t next = 0; next < todo.size();) {
    const size_t at = static_cast<size_t>(todo[next] - entries_.data());
    if (limited && runtime_compiled_ >= kMaxRuntimeCompiledLimited) {
      compile_stop_ = "limited mode compiles at most " +
                      std::to_string(kMaxRuntimeCompiledLimited) +
                      " candidates at run time per problem";
      defer_rest(at, end, compile_stop_, 1);
      return ok_status();
    }
    if (budgeted) {
      CONVPLAN_ASSIGN_OR_RETURN(bool stop, stop_for_budget(begin, end, *todo[next]));
      if (stop) {
        defer_rest(at, end, budget_reason(), 1);
        return ok_status();
      }
    }
    size_t size = kCompileWave;
    if (limited) size = std::min(size, kMaxRuntimeCompiledLimited - runtime_compiled_);
    std::vector<Entry*> wave;  // those the filters let through: only they are built
    std::vector<Entry*> all;
    for (; next < todo.size() && all.size() < size; ++next) {
      if (shares_wave_with_its_engine(*todo[next], all)) break;  // it starts the next wave
      if (!todo[next]->deferred.empty() || defer_far_knob_variant(*todo[next]) ||
          defer_unranked_compile_near_roofline(*todo[next]))
        continue;
      all.push_back(todo[next]);
      std::string label, outcome;
      if (!filtered(todo[next]->candidate.config, todo[next]->candidate.notes, label, outcome))
        wave.push_back(todo[next]);
    }
    compile_wave(wave);
    const double best_before = best_median_;
    for (Entry* e : all) {
      CONVPLAN_RETURN_IF_ERROR(check_cancelled());
      const Clock::time_point t0 = Clock::now();
      CONVPLAN_RETURN_IF_ERROR(screen(*e));
      report(*e, "timed", ms_since(t0));
      if (std::find(wave.begin(), wave.end(), e) != wave.end()) ++runtime_compiled_;
    }
    const bool improved = best_before <= 0 || best_median_ < best_before;
    if (!improved && !limited && !last_resort_) stop_knob_variants(todo, next, all, best_before);
    if (limited && !improved) {
      compile_stop_ = "a wave of " + std::to_string(all.size()) +
                      " runtime-compiled candidates did not improve on " + format_ms(best_before) +
                      " ms (limited mode)";
      if (next < todo.size()) {
        defer_rest(static_cast<size_t>(todo[next] - entries_.data()), end, compile_stop_, 1);
      }
      return ok_status();
    }
  }
  return ok_status();
}

bool TuneRun::runtime_compilation_pays(std::string& why) {
  if (policy_.mode != TuneMode::kLimited || best_median_ < 0) return true;
  if (best_median_ < kRuntimeCompileMinMs) {
    why = "the best precompiled candidate takes " + format_ms(best_median_) + " ms < " +
          format_ms(kRuntimeCompileMinMs) +
          " ms: compiling (0.2-1.2 s each) costs more than it "
          "could save (limited mode)";
    return false;
  }
  const std::string near = near_roofline_floor();
  if (!near.empty()) {
    why = "the best precompiled candidate " + near + " (limited mode)";
    return false;
  }
  return true;
}

std::string TuneRun::near_roofline_floor() {
  if (!roofline_floor_) {
    roofline_floor_ = options_.roofline_floor_ms ? options_.roofline_floor_ms(problem_) : -1;
  }
  const double floor = *roofline_floor_;
  if (floor <= 0 || best_median_ <= 0 || best_median_ > kNearRooflineFactor * floor) return "";
  return "takes " + format_ms(best_median_) + " ms, within " + format_ms(kNearRooflineFactor) +
         "x of the roofline floor of " + format_ms(floor) + " ms";
}

Status TuneRun::time_range(size_t begin, size_t end, bool budgeted) {
  // Precompiled candidates first: in limited mode their times decide whether the runtime-compiled
  // ones are worth compiling at all (they dominated the tuning of small problems, issue 21).
  CONVPLAN_RETURN_IF_ERROR(screen_where(begin, end, budgeted, false));
  std::string why;
  if (runtime_compilation_pays(why)) {
    CONVPLAN_RETURN_IF_ERROR(screen_where(begin, end, budgeted, true));
  } else {
    for (size_t i = begin; i < end; ++i) {
      Entry& e = entries_[i];
      if (e.evaluated || (e.candidate.notes & kNoteRuntimeCompilation) == 0) continue;
      e.deferred = why;
    }
  }
  return finish_timing(begin, end);
}

Status TuneRun::finish_timing(size_t begin, size_t end) {
  const int more = std::max(policy_.timed_runs, 1) - first_timing_runs();
  const Entry* best = nullptr;
  for (size_t i = begin; i < end; ++i) {
    const Entry& e = entries_[i];
    if (e.timed && !e.dropped && (best == nullptr || e.result.median_ms < best->result.median_ms)) {
      best = &e;
    }
  }
  if (more <= 0 || best == nullptr) return ok_status();
  const std::vector<float>& bt = best->result.times_ms;
  const auto [lo, hi] = std::minmax_element(bt.begin(), bt.end());
  const double best_median = best->result.median_ms;
  const double margin = std::max(kStopMargin, 2.0 * (*hi - *lo) / std::max(best_median, 1e-9));
  for (size_t i = begin; i < end; ++i) {
    Entry& e = entries_[i];
    if (!e.timed || e.dropped || !e.timing_stopped.empty() || e.timing_finished) continue;
    e.timing_finished = true;
    const double fastest = *std::min_element(e.result.times_ms.begin(), e.result.times_ms.end());
    if (&e != best && fastest > best_median * (1 + margin)) {
      e.timing_stopped = "clearly slower after " + std::to_string(e.result.times_ms.size()) +
                         " runs: fastest " + format_ms(fastest) + " ms > " +
                         format_ms(best_median) + " ms (the best median) + " +
                         format_ms(100 * margin) + "%";
      e.plan.reset();
      continue;
    }
    if (e.plan == nullptr) {  // released while it looked slow; it is close after all
      CONVPLAN_RETURN_IF_ERROR(admit(e));
      if (e.dropped) continue;
    }
    CONVPLAN_RETURN_IF_ERROR(time_runs(e, more, 0.0f, false));
  }
  return ok_status();
}

Status TuneRun::validate(Entry& e) {
  if (e.plan == nullptr) {
    CONVPLAN_RETURN_IF_ERROR(admit(e));
    if (e.dropped) return ok_status();
  }
  // Held through the check's read-back (see prepare_and_time); the reference is usually ready,
  // computed on the host while candidates were timed.
  MutexLock turn(device_turn(device_.ordinal));
  CONVPLAN_RETURN_IF_ERROR(prepare_run(e));
  if (e.dropped) return ok_status();
  CONVPLAN_RETURN_IF_ERROR(await_reference());
  ScopedMs timer(phases_.check);
  ++validation_runs_;
  CandidateResult& r = e.result;
  inputs_dirty_ = true;  // until this candidate passes
  Status s = e.plan->execute(handle_, pointers(), workspace_.payload());
  if (!s.ok()) {
    drop(e, false, "failed to execute", "failed to execute: " + s.to_string());
    return ok_status();
  }
  if (options_.after_candidate_run) {
    options_.after_candidate_run(r.config, output().buffer.payload(), output().payload_bytes);
  }
  CONVPLAN_ASSIGN_OR_RETURN(std::string broken, broken_guard());
  if (!broken.empty()) {
    drop(e, false, "rejected: wrote past its output/workspace",
         "rejected: wrote past its output/workspace (" + broken + ")");
    return ok_status();
  }
  std::string label;
  CONVPLAN_ASSIGN_OR_RETURN(std::string wrong, check_output(r.notes, r.relative_error, label));
  if (!wrong.empty()) {
    drop(e, false, label, wrong);
    return ok_status();
  }
  inputs_dirty_ = false;
  e.validated = true;
  return ok_status();
}

StatusOr<Entry*> TuneRun::validate_in_order_of_speed(size_t begin, size_t end) {
  std::vector<Entry*> finalists;  // in rank order
  for (size_t i = begin; i < end; ++i) {
    if (entries_[i].timed && !entries_[i].dropped) finalists.push_back(&entries_[i]);
  }
  // Timing ran candidates that were not checked; the inputs are uploaded again before the first
  // check, in case one of them wrote into them.
  inputs_dirty_ = true;
  while (!finalists.empty()) {
    // The fastest median; among those within kTieFraction of it, the best rank (the first).
    double fastest = finalists.front()->result.median_ms;
    for (const Entry* e : finalists) fastest = std::min(fastest, e->result.median_ms);
    auto next = std::find_if(finalists.begin(), finalists.end(), [&](const Entry* e) {
      return e->result.median_ms <= fastest * (1 + kTieFraction);
    });
    Entry& e = **next;
    finalists.erase(next);
    if (!policy_.validate || e.validated) return &e;
    CONVPLAN_RETURN_IF_ERROR(check_cancelled());
    const Clock::time_point t0 = Clock::now();
    CONVPLAN_RETURN_IF_ERROR(validate(e));
    report(e, "checked", ms_since(t0));
    if (e.validated) return &e;
  }
  return nullptr;
}

StatusOr<Entry*> TuneRun::first_valid_in_rank_order(size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i) {
    Entry& e = entries_[i];
    CONVPLAN_RETURN_IF_ERROR(check_cancelled());
    const Clock::time_point t0 = Clock::now();
    CONVPLAN_RETURN_IF_ERROR(admit(e));
    if (!e.dropped && policy_.validate) CONVPLAN_RETURN_IF_ERROR(validate(e));
    report(e, policy_.validate ? "checked" : "not checked", ms_since(t0));
    if (!e.dropped) return &e;
  }
  return nullptr;
}

StatusOr<Entry*> TuneRun::choose_from(size_t begin, size_t end, bool budgeted) {
  if (policy_.mode == TuneMode::kHeuristic) return first_valid_in_rank_order(begin, end);
  CONVPLAN_RETURN_IF_ERROR(time_range(begin, end, budgeted));
  CONVPLAN_ASSIGN_OR_RETURN(end, add_second_list(end));
  if (policy_.mode == TuneMode::kLimited) CONVPLAN_RETURN_IF_ERROR(time_other_engines(begin, end));
  CONVPLAN_ASSIGN_OR_RETURN(Entry * chosen, validate_in_order_of_speed(begin, end));
  bool deferred = false;
  for (size_t i = begin; i < end; ++i) deferred = deferred || !entries_[i].deferred.empty();
  if (chosen != nullptr || !deferred) return chosen;
  // Every finalist failed: the candidates left out (compiled at run time in limited mode, past
  // the budget in exhaustive mode) get their turn, without limits.
  for (size_t i = begin; i < end; ++i) entries_[i].deferred.clear();
  last_resort_ = true;
  CONVPLAN_RETURN_IF_ERROR(screen_where(begin, end, true, false));
  CONVPLAN_RETURN_IF_ERROR(screen_where(begin, end, true, true));
  CONVPLAN_RETURN_IF_ERROR(finish_timing(begin, end));
  return validate_in_order_of_speed(begin, end);
}

// Limited mode asks heuristics B only once A's candidates are timed, and only when the best of
// them takes at least kRuntimeCompileMinMs (or none was timed): on the stems a B query took ~25
// ms per rewritten problem (cuDNN answers them one at a time), more than B's candidates could
// save a convolution that short (issue 21: under 0.1 ms, at most 0.2 s of tuning). B is asked
// for the problem and the rewrites whose best came near the best (kSecondListRewriteFactor; all
// of them when none of A's was timed). B's candidates are timed like A's; `end` becomes the end of
// the entries.
StatusOr<size_t> TuneRun::add_second_list(size_t end) {
  if (!second_list_pending_) return end;
  second_list_pending_ = false;
  if (best_median_ >= 0 && best_median_ < kRuntimeCompileMinMs) {
    if (policy_.verbose >= 2) {
      say("heuristics B not asked: the best of A takes " + format_ms(best_median_) + " ms < " +
          format_ms(kRuntimeCompileMinMs) + " ms (limited mode)");
    }
    return end;
  }
  {
    ScopedMs timer(phases_.candidates);
    const std::vector<std::string> rewrites = rewrites_near_best();
    const bool any_timed = best_median_ >= 0;
    if (policy_.verbose >= 2 && any_timed) {
      std::string names;
      for (const std::string& r : rewrites) {
        names += (names.empty() ? "" : ", ") + (r.empty() ? std::string("the problem") : r);
      }
      say("heuristics B asked for what came near the best: " +
          (names.empty() ? std::string("nothing") : names));
    }
    CONVPLAN_ASSIGN_OR_RETURN(std::vector<Candidate> b,
                              ask(CandidateSource::kHeuristicB, any_timed ? &rewrites : nullptr));
    add_candidates(b, CandidateSource::kHeuristicB);
  }
  CONVPLAN_RETURN_IF_ERROR(time_range(end, entries_.size(), false));
  return entries_.size();
}

Status TuneRun::time_other_engines(size_t begin, size_t end) {
  std::vector<Entry*> others;
  for (size_t i = begin; i < end; ++i) {
    if (entries_[i].other_engine && !entries_[i].evaluated) others.push_back(&entries_[i]);
  }
  if (others.empty()) return ok_status();
  const std::vector<std::string> near = rewrites_near_best();
  if (best_median_ >= 0 && std::find(near.begin(), near.end(), "") == near.end()) {
    if (policy_.verbose >= 2) {
      say(std::to_string(others.size()) + " other engines not timed: the problem's own best is " +
          "not within " + format_g(kSecondListRewriteFactor) + "x of the best, " +
          format_ms(best_median_) + " ms (limited mode)");
    }
    return ok_status();
  }
  for (Entry* e : others) e->deferred.clear();
  CONVPLAN_RETURN_IF_ERROR(screen_where(begin, end, false, false));  // precompiled, as they are
  return finish_timing(begin, end);
}

std::map<std::string, double> TuneRun::best_per_rewrite() const {
  std::map<std::string, double> best;  // per rewrite ("" the problem itself), its best median
  for (const Entry& e : entries_) {
    if (!e.timed || e.dropped) continue;
    auto [it, added] = best.emplace(e.candidate.config.rewrite, e.result.median_ms);
    if (!added) it->second = std::min(it->second, e.result.median_ms);
  }
  return best;
}

std::vector<std::string> TuneRun::rewrites_near_best() const {
  std::vector<std::string> near;
  for (const auto& [name, ms] : best_per_rewrite()) {
    if (ms <= kSecondListRewriteFactor * best_median_) near.push_back(name);
  }
  return near;
}

void TuneRun::report(const Entry& e, const char* phase, double wall_ms) const {
  if (policy_.verbose < 2 || !e.evaluated) return;
  const CandidateResult& r = e.result;
  std::string line = verbose_head(e) + "; notes " +
                     (r.notes == 0 ? std::string("none") : notes_to_string(r.notes)) +
                     "; workspace " + std::to_string(r.workspace_bytes) + " B]";
  if (r.median_ms >= 0) line += " median " + format_ms(r.median_ms) + " ms";
  if (r.relative_error >= 0) line += " error " + format_g(r.relative_error);
  const std::string what = e.dropped ? r.outcome : e.validated ? "ok" : std::string(phase);
  say(line + " (" + format_ms(wall_ms) + " ms): " + what);
}

StatusOr<TuningRecord> TuneRun::run() { return abandon_if_stuck(run_steps()); }

StatusOr<OutputCheck> TuneRun::check(Plan& plan) { return abandon_if_stuck(check_steps(plan)); }

StatusOr<TuningRecord> TuneRun::run_steps() {
  CONVPLAN_ASSIGN_OR_RETURN(device_, backend_.device_of(handle_));
  {
    ScopedMs timer(phases_.candidates);
    CONVPLAN_RETURN_IF_ERROR(gather_candidates());
  }
  CONVPLAN_ASSIGN_OR_RETURN(Entry * chosen,
                            choose_from(0, entries_.size(), policy_.mode == TuneMode::kExhaustive));
  if (chosen == nullptr) {
    auto fallback = [&] {
      ScopedMs timer(phases_.candidates);
      return backend_.candidates(handle_, problem_, CandidateSource::kFallback);
    }();
    CONVPLAN_RETURN_IF_ERROR(fallback.status());
    const size_t begin = entries_.size();
    add_candidates(*fallback, CandidateSource::kFallback);
    if (policy_.verbose >= 2 && entries_.size() > begin) {
      say("no candidate survived; trying " + std::to_string(entries_.size() - begin) +
          " fallback engines");
    }
    CONVPLAN_ASSIGN_OR_RETURN(chosen, choose_from(begin, entries_.size(), false));
  }
  if (chosen == nullptr) {
    const std::string why = summary_.empty() ? "the backend offered no candidate (heuristics and "
                                               "fallback)"
                                             : summary_.to_string();
    return not_supported("no engine left for " + problem_.to_string() + ": " + why);
  }
  if ((chosen->result.notes & kNoteRuntimeCompilation) != 0) {
    if (chosen->plan == nullptr) CONVPLAN_RETURN_IF_ERROR(admit(*chosen));  // released while slow
    auto json = chosen->plan != nullptr ? chosen->plan->to_json()
                                        : StatusOr<std::string>(internal_error("no plan"));
    if (json.ok()) {
      chosen->plan_json = std::move(json).value();
    } else if (policy_.verbose >= 2) {
      say("no JSON for runtime-compiled " + chosen->result.config.to_string() + ": " +
          json.status().message());
    }
  }
  return make_record(*chosen);
}

TuningRecord TuneRun::make_record(Entry& chosen) {
  TuningRecord record;
  record.set_key(record_key(device_, problem_, policy_));
  record.config = chosen.result.config;
  record.notes = chosen.result.notes;
  record.time_ms = chosen.result.median_ms;
  record.workspace_bytes = chosen.result.workspace_bytes;
  record.plan_json = chosen.plan_json;
  record.tuned_at_unix = static_cast<int64_t>(std::time(nullptr));
  int timed = 0;
  for (Entry& e : entries_) {
    if (!e.result.times_ms.empty()) ++timed;
    if (!e.deferred.empty()) {
      CandidateResult r;
      r.config = e.candidate.config;
      r.notes = e.candidate.notes;
      r.rank = e.candidate.rank;
      r.outcome = "not tried: " + e.deferred;
      record.candidates.push_back(std::move(r));
      continue;
    }
    if (!e.evaluated) continue;
    if (!e.dropped && !e.validated && &e != &chosen) {
      // Losers on time need no check (issue 21): only a plan that can be served is validated.
      e.result.outcome = "not validated: slower than the choice";
      if (!e.timing_stopped.empty()) e.result.outcome += "; timing stopped: " + e.timing_stopped;
    }
    record.candidates.push_back(e.result);
  }
  record.tuning_ms = ms_since(start_);
  if (policy_.verbose >= 1) {
    say(problem_.to_string() + " [" + to_string(policy_.mode) + "]: " + record.config.to_string() +
        (record.time_ms >= 0 ? " " + format_ms(record.time_ms) + " ms" : std::string()) +
        ", workspace " + std::to_string(record.workspace_bytes) + " B, notes " +
        (record.notes == 0 ? std::string("none") : notes_to_string(record.notes)) + "; " +
        std::to_string(record.candidates.size()) + " candidates, " + std::to_string(timed) +
        " timed, " + std::to_string(validation_runs_) + " checked, in " +
        format_ms(record.tuning_ms) + " ms (candidates " + format_ms(phases_.candidates) +
        ", data and reference " + format_ms(phases_.data) + ", builds " + format_ms(phases_.build) +
        ", compile " + format_ms(phases_.compile) + ", checks " + format_ms(phases_.check) +
        ", timing " + format_ms(phases_.timing) + ")");
  }
  return record;
}

StatusOr<OutputCheck> TuneRun::check_steps(Plan& plan) {
  CONVPLAN_ASSIGN_OR_RETURN(device_, backend_.device_of(handle_));
  Entry e;
  e.evaluated = true;
  e.candidate.config = plan.config();
  e.candidate.notes = plan.notes();
  e.result.config = plan.config();
  e.result.notes = plan.notes();
  e.result.workspace_bytes = plan.workspace_bytes();
  e.plan = PlanPtr(&plan, PlanRelease{false});
  CONVPLAN_RETURN_IF_ERROR(validate(e));
  OutputCheck c;
  c.passed = e.validated;
  c.relative_error = e.result.relative_error;
  c.tolerance = relative_error_tolerance(problem_, e.result.notes);
  c.elements_checked = static_cast<int64_t>(check_offsets_.size());
  c.full = reference_ready_ && c.elements_checked == output().shape.elements();
  if (!c.passed) c.failure = e.result.outcome;
  return c;
}

}  // namespace

const char* to_string(CandidateSource s) {
  switch (s) {
    case CandidateSource::kHeuristicInstant: return "heuristic_instant";
    case CandidateSource::kHeuristicA: return "heuristic_a";
    case CandidateSource::kHeuristicB: return "heuristic_b";
    case CandidateSource::kFallback: return "fallback";
    case CandidateSource::kAllEngines: return "all_engines";
  }
  return "?";
}

Tuner::Tuner(std::shared_ptr<Backend> backend, TunerOptions options)
    : backend_(std::move(backend)),
      options_(std::move(options)),
      compile_handles_(backend_ != nullptr
                           ? std::make_unique<tune_detail::CompileHandles>(*backend_)
                           : nullptr) {}
Tuner::~Tuner() = default;
Tuner::Tuner(Tuner&&) noexcept = default;
Tuner& Tuner::operator=(Tuner&&) noexcept = default;

StatusOr<TuningRecord> Tuner::tune(cudnnHandle_t handle, const ConvProblem& problem,
                                   const TunePolicy& policy, DeviceAllocator* allocator) {
  CONVPLAN_RETURN_IF_ERROR(problem.validate());
  if (backend_ == nullptr) return invalid_argument("Tuner has no backend");
  DeviceAllocator& alloc = allocator != nullptr ? *allocator : backend_->default_allocator(handle);
  if (policy.mode == TuneMode::kBackground) {  // the cache runs it in the background; here, limited
    TunePolicy limited = policy;
    limited.mode = TuneMode::kLimited;
    TuneRun run(*backend_, handle, problem, limited, options_, alloc, compile_handles_.get());
    return run.run();
  }
  TuneRun run(*backend_, handle, problem, policy, options_, alloc, compile_handles_.get());
  return run.run();
}

StatusOr<OutputCheck> Tuner::check(cudnnHandle_t handle, const ConvProblem& problem, Plan& plan,
                                   DeviceAllocator* allocator) {
  CONVPLAN_RETURN_IF_ERROR(problem.validate());
  if (backend_ == nullptr) return invalid_argument("Tuner has no backend");
  if (plan.handle() != handle) {
    return Status(StatusCode::kWrongHandle, "Tuner::check: the plan of " +
                                                plan.config().to_string() +
                                                " was built on another handle than the one given");
  }
  DeviceAllocator& alloc = allocator != nullptr ? *allocator : backend_->default_allocator(handle);
  const TunePolicy policy;  // validation on, nothing printed
  TuneRun run(*backend_, handle, problem, policy, options_, alloc);
  return run.check(plan);
}

}  // namespace convplan
