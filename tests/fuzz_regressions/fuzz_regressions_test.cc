// Inputs found by the libFuzzer harnesses of fuzz/, replayed through the public API. Each test
// names the harness, the function at fault and what went wrong; it fails until the fix lands, and
// then keeps the bug from coming back. A fix may reject the input or handle it: the tests accept
// either where the contract allows both.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "convplan/problem.h"
#include "convplan/tuning_db.h"
#include "convplan/tuning_record.h"

namespace convplan {
namespace {

namespace fs = std::filesystem;

std::string read_input(const std::string& name) {
  std::ifstream in(std::string(CONVPLAN_FUZZ_INPUTS) + "/" + name, std::ios::binary);
  EXPECT_TRUE(in.good()) << "missing input " << name;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The exact output size, in 128 bits: what ConvProblem::output() must return for a valid problem.
int64_t exact_output(const ConvProblem& p, int d) {
  const __int128 span = static_cast<__int128>(p.input[d]) + p.pad_before[d] + p.pad_after[d] -
                        static_cast<__int128>(p.dilation[d]) * (p.filter[d] - 1) - 1;
  return span < 0 ? 0 : static_cast<int64_t>(span / p.stride[d] + 1);
}

// parse_problem_fuzzer, 2026-12-02: parse_problem accepts a huge stride and, from oh, infers a
// padding near 2^62 per side; validate() checks the output in 128 bits and passes, but
// ConvProblem::output() (src/core/problem.cc) adds input + pad_before + pad_after in int64, which
// overflows (UBSan: "signed integer overflow: 5794399102924120587 + 5794399102924120560"). In a
// build without UBSan the sum wraps negative and output() says 0 where the descriptor says oh28.
TEST(FuzzRegressions, ParseProblemDoesNotOverflowOutputOnHugeStrideWithInferredPadding) {
  for (const std::string& text :
       {read_input("parse_problem_huge_stride_inferred_padding.txt"),  // the fuzzer's input
        std::string("mb1ic1ih1iw1oc1kh1kw1sh9223372036854775807ph4611686018427387904")}) {
    SCOPED_TRACE(text);
    StatusOr<ConvProblem> p = parse_problem(text);
    if (!p.ok()) {  // refusing such padding is a fix too; then the message must say why
      EXPECT_FALSE(p.status().message().empty());
      continue;
    }
    ASSERT_TRUE(p->validate().ok());
    for (int d = 0; d < p->spatial_dims; ++d) {
      EXPECT_EQ(p->output()[d], exact_output(*p, d)) << "output()[" << d << "]";
      EXPECT_EQ(p->y_shape().dims[2 + d], exact_output(*p, d)) << "y_shape().dims[" << 2 + d << "]";
    }
  }
}

// The same contract without the parser: a problem that validate() accepts must have an output()
// that does not overflow.
TEST(FuzzRegressions, ValidProblemWithPaddingNear2To62ComputesItsOutputWithoutOverflow) {
  ConvProblem p;
  p.spatial_dims = 1;
  p.input = {1, 1, 1};
  p.filter = {1, 1, 1};
  p.stride = {INT64_MAX, 1, 1};
  p.pad_before = {int64_t{1} << 62, 0, 0};
  p.pad_after = {int64_t{1} << 62, 0, 0};
  if (!p.validate().ok()) return;  // refusing it is a fix too
  EXPECT_EQ(p.output()[0], 2);     // (1 + 2^63 - 1) / (2^63 - 1) + 1
}

// A private folder for one test's database files, removed at the end.
class TempFolder {
 public:
  TempFolder() {
    char pattern[] = "/tmp/convplan-fuzz-regression-XXXXXX";
    if (mkdtemp(pattern) != nullptr) path_ = pattern;
  }
  ~TempFolder() {
    std::error_code ignored;
    if (!path_.empty()) fs::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

// The contract for a file that is not a usable database: open() succeeds, reports where the file
// was moved, and the new database takes writes.
void expect_moved_aside_and_writable(const std::string& path) {
  StatusOr<std::unique_ptr<TuningDatabase>> db = TuningDatabase::open(path);
  ASSERT_TRUE(db.ok()) << db.status().to_string();
  EXPECT_FALSE((*db)->report().moved_aside.empty());
  EXPECT_FALSE((*db)->report().reason.empty());
  EXPECT_TRUE(fs::exists((*db)->report().moved_aside)) << (*db)->report().moved_aside;
  TuningRecord fresh;
  fresh.device_model = "d";
  fresh.problem = "p";
  fresh.policy = "q";
  fresh.convplan_version = "v";
  fresh.config.engine_id = 1;
  EXPECT_TRUE((*db)->put(fresh).ok());
}

// db_open_file_fuzzer, 2026-12-02: a database file whose records table and its primary-key index
// disagree (one byte of a key changed in the table's copy). TuningDatabase::open checks the file
// with PRAGMA quick_check, which does not compare indexes with their tables, so the file is kept;
// then list() returns a record that find(its key) answers with kNotFound (SQLite's
// integrity_check says "row 1 missing from index sqlite_autoindex_records_1"). The contract
// (tuning_db.h): a damaged file is moved aside and replaced, or what is intact stays findable.
TEST(FuzzRegressions, DatabaseWhoseIndexMissesRowsIsMovedAsideOrFindsEveryListedRecord) {
  TempFolder dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string path = dir.path() + "/tuning.db";
  const std::string bytes = read_input("db_index_missing_rows.db");
  ASSERT_FALSE(bytes.empty());
  write_file(path, bytes);
  StatusOr<std::unique_ptr<TuningDatabase>> db = TuningDatabase::open(path);
  ASSERT_TRUE(db.ok()) << db.status().to_string();
  if (!(*db)->report().moved_aside.empty()) return;  // the damage was seen: fine
  StatusOr<std::vector<TuningRecord>> records = (*db)->list();
  ASSERT_TRUE(records.ok()) << records.status().to_string();
  for (const TuningRecord& r : *records) {
    StatusOr<TuningRecord> found = (*db)->find(r.key());
    EXPECT_TRUE(found.ok()) << "list() returned '" << r.key()
                            << "' but find() says: " << found.status().to_string();
  }
}

// db_open_file_fuzzer, 2026-12-02 (13 of 17 distinct inputs): a file whose SQLite header has a
// schema format number SQLite does not know (bytes 44..47, valid 1 to 4; here 5).
// TuningDatabase::open returns kInternal "quick_check: SQL logic error: unsupported file format"
// and leaves the file where it is, so every later open fails the same way and the database
// stays unusable until someone deletes the file by hand. The contract (tuning_db.h): a file
// that is not a usable database is moved aside, reported, and replaced by a new one.
TEST(FuzzRegressions, DatabaseWithUnknownSchemaFormatNumberIsMovedAsideAndReplaced) {
  TempFolder dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string path = dir.path() + "/tuning.db";
  {
    StatusOr<std::unique_ptr<TuningDatabase>> db = TuningDatabase::open(path);
    ASSERT_TRUE(db.ok()) << db.status().to_string();
    TuningRecord r;
    r.device_model = "NVIDIA H200|sm90|sms132|cudnn91900";
    r.problem = "g1mb1ic8ih8iw8oc8oh8ow8kh3kw3ph1pw1";
    r.policy = "mode=limited";
    r.convplan_version = convplan_version();
    r.config.engine_id = 7;
    ASSERT_TRUE((*db)->put(r).ok());
  }  // closed: the WAL is folded into the file
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  ASSERT_GT(bytes.size(), 100u);
  bytes[44] = 0;  // the schema format number, big-endian: 5
  bytes[45] = 0;
  bytes[46] = 0;
  bytes[47] = 5;
  write_file(path, bytes);
  expect_moved_aside_and_writable(path);
}

// db_open_file_fuzzer, 2026-12-02 (second session): a file whose SQLite header has a write
// format version SQLite does not know (byte 18 = 0x82; valid 1 and 2). SQLite opens such a file
// read-only and integrity_check passes, so TuningDatabase::open kept it and every put() failed
// with "attempt to write a readonly database". The contract (tuning_db.h): a file that is not a
// usable database is moved aside and replaced.
TEST(FuzzRegressions, DatabaseThatSqliteCanOnlyReadIsMovedAsideAndReplaced) {
  TempFolder dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string path = dir.path() + "/tuning.db";
  const std::string bytes = read_input("db_unknown_write_version.db");
  ASSERT_GT(bytes.size(), 100u);
  ASSERT_EQ(static_cast<unsigned char>(bytes[18]), 0x82);
  write_file(path, bytes);
  expect_moved_aside_and_writable(path);
}

// db_open_file_fuzzer, 2026-12-02 (second session, CI at a70f757): a damaged file on which
// PRAGMA integrity_check itself fails with SQLITE_TOOBIG ("string or blob too big") instead of
// listing complaints. TuningDatabase::open returned kInternal and left the file in place.
TEST(FuzzRegressions, DatabaseWhoseIntegrityCheckFailsIsMovedAsideAndReplaced) {
  TempFolder dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string path = dir.path() + "/tuning.db";
  const std::string bytes = read_input("db_blob_too_big.db");
  ASSERT_GT(bytes.size(), 100u);
  write_file(path, bytes);
  expect_moved_aside_and_writable(path);
}

}  // namespace
}  // namespace convplan
