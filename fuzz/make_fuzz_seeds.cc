// Writes the seed inputs that only the library can make well: tuning records in their JSON form,
// exports of a database, and database files (intact, truncated, with a damaged header or page).
// Usage: make_fuzz_seeds <corpus folder>   (writes <folder>/<harness>/<name>)
// The hand-written seeds (problem texts, rules, broken JSON) sit next to these in the corpus.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <string>

#include "convplan/tuning_db.h"
#include "convplan/tuning_record.h"

namespace {

using convplan::TuningRecord;

TuningRecord seed_record(int id) {
  TuningRecord r;
  r.device_model = "NVIDIA H200|sm90|sms132|cudnn91900";
  r.problem = "dir:fwd,dt:bf16,layout:nhwc/g1mb32ic" + std::to_string(64 * id) +
              "ih56iw56oc64oh56ow56kh3kw3sh1sw1ph1pw1";
  r.policy = "mode=limited;ws=4294967296;det=0";
  r.convplan_version = convplan::convplan_version();
  r.config.engine_id = 5 + id;
  r.config.knobs = {{3, 1}, {10, id}};
  r.notes = convplan::kNoteTensorCore;
  r.time_ms = 0.25 * id;
  r.workspace_bytes = int64_t{1} << (10 + id);
  r.plan_json = "{\"plan\":\"engine " + std::to_string(id) + "\",\"quote\":\"\\\"\"}";
  r.tuned_at_unix = 1700000000 + id;
  r.tuning_ms = 350.5;
  convplan::CandidateResult ok;
  ok.config = r.config;
  ok.notes = r.notes;
  ok.times_ms = {0.25f, 0.5f};
  ok.median_ms = 0.375;
  ok.relative_error = 1e-6;
  convplan::CandidateResult dropped;
  dropped.config.engine_id = 1;
  dropped.rank = 1;
  dropped.outcome = "filtered: engine 1 disabled by CONVPLAN_DISABLED_FWD_ENGINES";
  r.candidates = {ok, dropped};
  return r;
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "make_fuzz_seeds: %s\n", what.c_str());
  std::exit(1);
}

void write(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out.good()) die("cannot write " + path);
}

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) die("cannot read " + path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

template <typename T>
T value_or_die(convplan::StatusOr<T> v, const std::string& what) {
  if (!v.ok()) die(what + ": " + v.status().to_string());
  return std::move(v).value();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) die("usage: make_fuzz_seeds <corpus folder>");
  const std::string corpus = argv[1];

  // tuning_record: a full record, a bare one, one with the non-finite numbers JSON lacks.
  write(corpus + "/tuning_record/full.json", convplan::to_json(seed_record(1)));
  TuningRecord bare;
  bare.device_model = "d";
  bare.problem = "p";
  bare.policy = "q";
  bare.convplan_version = "v";
  bare.config.engine_id = 0;
  write(corpus + "/tuning_record/bare.json", convplan::to_json(bare));
  TuningRecord odd = seed_record(2);
  odd.time_ms = std::numeric_limits<double>::infinity();
  odd.candidates[0].relative_error = std::numeric_limits<double>::quiet_NaN();
  odd.candidates[0].times_ms = {-std::numeric_limits<float>::infinity(), 1e-30f};
  write(corpus + "/tuning_record/non_finite.json", convplan::to_json(odd));
  // A problem with a post-op chain won by an unfused configuration.
  TuningRecord fused = seed_record(3);
  fused.problem =
      "dt:bf16,layout:nhwc,post:bias+add*0.5+relu/"
      "g1mb32ic64ih56iw56oc256oh56ow56kh1kw1sh1sw1ph0pw0";
  fused.config.unfused = true;
  fused.candidates[0].config.unfused = true;
  fused.plan_json = "convplan-unfused:" + fused.plan_json;
  write(corpus + "/tuning_record/post_ops_unfused.json", convplan::to_json(fused));

  // db_import_json: exports of an empty database and of one with three records.
  auto memory = value_or_die(convplan::TuningDatabase::open(":memory:"), "open(:memory:)");
  write(corpus + "/db_import_json/empty_export.json",
        value_or_die(memory->export_json(), "export"));
  for (int id = 1; id <= 3; ++id) {
    convplan::Status s = memory->put(seed_record(id));
    if (!s.ok()) die("put: " + s.to_string());
  }
  write(corpus + "/db_import_json/three_records.json",
        value_or_die(memory->export_json(), "export"));

  // db_open_file: a real database file with two records, then damaged copies of it.
  char folder[] = "/tmp/convplan-seeds-XXXXXX";
  if (mkdtemp(folder) == nullptr) die("mkdtemp");
  const std::string path = std::string(folder) + "/tuning.db";
  {
    auto db = value_or_die(convplan::TuningDatabase::open(path), "open(" + path + ")");
    for (int id = 1; id <= 2; ++id) {
      convplan::Status s = db->put(seed_record(id));
      if (!s.ok()) die("put: " + s.to_string());
    }
  }  // the last connection closes: the WAL is checkpointed into the file and removed
  const std::string good = read(path);
  for (const char* suffix : {"", "-wal", "-shm", ".lock"}) std::remove((path + suffix).c_str());
  rmdir(folder);
  write(corpus + "/db_open_file/good.db", good);
  constexpr size_t kPage = 4096;  // SQLite's default page size, which the library keeps
  if (good.size() < 2 * kPage) die("the database file is smaller than two pages");
  write(corpus + "/db_open_file/truncated_to_one_page.db", good.substr(0, kPage));
  write(corpus + "/db_open_file/truncated_mid_page.db", good.substr(0, good.size() - kPage / 2));
  std::string header = good;
  header[0] = 'X';  // "SQLite format 3\0" no more
  write(corpus + "/db_open_file/bad_magic.db", header);
  std::string page_size = good;
  page_size[16] = 0x7f;  // page size 0x7f10: not a power of two
  write(corpus + "/db_open_file/bad_page_size.db", page_size);
  std::string flipped = good;
  for (size_t i = kPage + 100; i < kPage + 400 && i < flipped.size(); ++i) flipped[i] ^= 0x5a;
  write(corpus + "/db_open_file/damaged_second_page.db", flipped);
  std::string last = good;
  for (size_t i = last.size() - 300; i < last.size(); ++i) last[i] = static_cast<char>(i * 7);
  write(corpus + "/db_open_file/damaged_last_page.db", last);
  std::printf("make_fuzz_seeds: wrote seeds under %s\n", corpus.c_str());
  return 0;
}
