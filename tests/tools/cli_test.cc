// The convplan program itself, run as a child process: argument parsing and its errors, the
// exit statuses, the outputs that need no GPU (bench --dry-run, the db commands), and exit 3 from
// the commands that need a GPU on a machine without one.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "convplan/cudnn_backend.h"
#include "convplan/problem.h"
#include "convplan/tune_policy.h"
#include "convplan/tuning_db.h"
#include "convplan/tuning_record.h"

extern char** environ;

namespace convplan {
namespace {

namespace fs = std::filesystem;

struct Result {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string lines_of(const std::string& s, size_t max_chars = 2000) {
  return s.size() > max_chars ? s.substr(0, max_chars) + "..." : s;
}

// Each test gets a fresh folder, with CONVPLAN_DB pointing into it so that nothing touches the
// user's database.
class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/convplan_cli_test_XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    env_["CONVPLAN_DB"] = path("tuning.db");
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  std::string path(const std::string& name) const { return dir_ + "/" + name; }

  // Runs convplan with `args`; env_ entries replace (or, with an empty value, remove) variables.
  Result run(const std::vector<std::string>& args) {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string kv = *e;
      const std::string key = kv.substr(0, kv.find('='));
      if (env_.count(key) == 0) env.push_back(kv);
    }
    for (const auto& [k, v] : env_)
      if (!v.empty()) env.push_back(k + "=" + v);
    std::vector<char*> envp;
    for (std::string& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> argv_s = {CONVPLAN_CLI};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& s : argv_s) argv.push_back(s.data());
    argv.push_back(nullptr);

    const std::string out_path = path("stdout"), err_path = path("stderr");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0600);
    posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0600);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    pid_t pid = -1;
    Result r;
    const int rc = posix_spawn(&pid, CONVPLAN_CLI, &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
      ADD_FAILURE() << "cannot start " << CONVPLAN_CLI << ": " << std::strerror(rc);
      return r;
    }
    int status = 0;
    waitpid(pid, &status, 0);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = read_all(out_path);
    r.err = read_all(err_path);
    return r;
  }

  static std::string describe(const Result& r) {
    return "exit " + std::to_string(r.exit_code) + "\nstdout:\n" + lines_of(r.out) + "\nstderr:\n" +
           lines_of(r.err);
  }

  void write(const std::string& name, const std::string& text) {
    std::ofstream out(path(name), std::ios::binary);
    out << text;
  }

  // A database with `n` records at `file`, written through the library.
  void make_database(const std::string& file, int n, int first = 0) {
    StatusOr<std::unique_ptr<TuningDatabase>> db = TuningDatabase::open(file);
    ASSERT_TRUE(db.ok()) << db.status().to_string();
    for (int i = first; i < first + n; ++i) {
      TuningRecord r;
      r.device_model = i % 2 == 0 ? "NVIDIA H200|sm90|sms132|cudnn91900"
                                  : "NVIDIA A100-SXM4-80GB|sm80|sms108|cudnn91400";
      r.problem =
          parse_problem("dt:bf16,layout:nhwc/mb32ic" + std::to_string(64 + i) + "ih56oc64kh3ph1")
              ->to_string();
      r.policy = TunePolicy{}.key();
      r.convplan_version = convplan_version();
      r.config.engine_id = i;
      r.config.knobs = {{3, 1}};
      r.time_ms = 0.25 + i;
      r.workspace_bytes = 4096;
      r.tuned_at_unix = 1700000000 + i;
      r.tuning_ms = 12.5;
      ASSERT_TRUE((*db)->put(r).ok());
    }
  }

  static bool gpu_here() { return gpu_available().ok(); }

  std::string dir_;
  std::map<std::string, std::string> env_;
};

const char kGood[] = "g1mb2ic8ih8iw8oc8oh8ow8kh3kw3ph1pw1";

// ---------------------------------------------------------------------------------------------
// Help, version and the exit statuses.

TEST_F(Cli, HelpListsEveryCommandAndTheExitStatuses) {
  const Result r = run({"--help"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  for (const char* word :
       {"run", "bench", "engines", "devices", "db", "Exit status", "0 ok", "1 runtime failure",
        "2 usage", "3 no usable GPU", "4 verification failed", "--db"}) {
    EXPECT_NE(r.out.find(word), std::string::npos) << word << "\n" << describe(r);
  }
}

TEST_F(Cli, EveryCommandHasHelpThatExitsZero) {
  const std::vector<std::vector<std::string>> commands = {
      {"run"},         {"bench"},        {"engines"},     {"devices"},      {"db"},
      {"explain"},     {"db", "list"},   {"db", "show"},  {"db", "export"}, {"db", "import"},
      {"db", "merge"}, {"db", "verify"}, {"db", "prune"}, {"db", "path"}};
  for (std::vector<std::string> c : commands) {
    c.push_back("--help");
    const Result r = run(c);
    EXPECT_EQ(r.exit_code, 0) << c[0] << "\n" << describe(r);
    EXPECT_NE(r.out.find("Exit status"), std::string::npos) << c[0] << "\n" << describe(r);
  }
  const Result run_help = run({"run", "--help"});
  for (const char* flag : {"--dir", "--dtype", "--layout", "--tune", "--verify", "--iters",
                           "--json", "--peak-tflops", "--peak-gbps"}) {
    EXPECT_NE(run_help.out.find(flag), std::string::npos) << flag;
  }
  const Result bench_help = run({"bench", "--help"});
  for (const char* flag : {"--suite", "--file", "--batch", "--csv", "--json", "--dry-run"}) {
    EXPECT_NE(bench_help.out.find(flag), std::string::npos) << flag;
  }
}

TEST_F(Cli, VersionPrintsTheLibraryVersion) {
  const Result r = run({"--version"});
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find(convplan_version()), std::string::npos) << describe(r);
}

TEST_F(Cli, NoCommandIsAUsageError) {
  const Result r = run({});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
}

TEST_F(Cli, UnknownCommandIsAUsageErrorNamingIt) {
  Result r = run({"frobnicate"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("unknown command 'frobnicate'"), std::string::npos) << describe(r);
  r = run({"db", "frob"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("unknown command 'frob' for 'convplan db'"), std::string::npos)
      << describe(r);
}

// ---------------------------------------------------------------------------------------------
// Usage errors: exit 2, naming the flag, the descriptor's fault or the file.

TEST_F(Cli, UnknownFlagExits2NamingTheFlag) {
  const std::vector<std::vector<std::string>> commands = {
      {"run", kGood, "--bogus-flag"},     {"bench", "--bogus-flag"},
      {"engines", kGood, "--bogus-flag"}, {"devices", "--bogus-flag"},
      {"db", "list", "--bogus-flag"},     {"db", "prune", "--bogus-flag"},
      {"--bogus-flag", "devices"}};
  for (const auto& c : commands) {
    const Result r = run(c);
    EXPECT_EQ(r.exit_code, 2) << c[0] << "\n" << describe(r);
    EXPECT_NE(r.err.find("--bogus-flag"), std::string::npos) << c[0] << "\n" << describe(r);
  }
}

// run takes fused descriptors: a malformed chain is a usage error naming the token, a chain on
// a backward direction one naming the field; a good one gets past parsing (exit 3 here: no GPU,
// or 0 on a GPU machine).
TEST_F(Cli, RunTakesPostOpChains) {
  const std::string conv = "g1mb2ic8ih8iw8oc16kh3kw3ph1pw1";
  Result r = run({"run", "post:bias+rleu/" + conv});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("'rleu' at 5 in the post-op chain"), std::string::npos) << describe(r);
  r = run({"run", "dir:bwd_data,post:relu/" + conv});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("post_ops=relu is only for direction=fwd"), std::string::npos)
      << describe(r);
  r = run({"run", "dt:bf16,layout:nhwc,post:bias+add*0.5+gelu/" + conv});
  EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 3) << describe(r);
}

TEST_F(Cli, BadFlagValuesExit2NamingTheFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"run", kGood, "--dir", "sideways"}, "--dir"},
      {{"run", kGood, "--dtype", "f8"}, "--dtype"},
      {{"run", kGood, "--layout", "explicit"}, "--layout"},
      {{"run", kGood, "--layout", "nchwc"}, "--layout"},
      {{"run", kGood, "--tune", "fast"}, "--tune"},
      {{"run", kGood, "--iters", "0"}, "--iters"},
      {{"run", kGood, "--iters", "many"}, "--iters"},
      {{"run", kGood, "--batch=-4"}, "--batch"},
      {{"run", kGood, "--peak-tflops", "0"}, "--peak-tflops"},
      {{"bench", "--batch", "0"}, "--batch"},
      {{"bench", "--dtype", "int8"}, "--dtype"},
      {{"engines", kGood, "--gpu=-1"}, "--gpu"},
      {{"db", "prune", "--older-than", "soon"}, "--older-than"},
      {{"db", "prune", "--cudnn", "x"}, "--cudnn"},
  };
  for (const auto& [args, flag] : cases) {
    const Result r = run(args);
    EXPECT_EQ(r.exit_code, 2) << args[0] << " " << flag << "\n" << describe(r);
    EXPECT_NE(r.err.find(flag), std::string::npos) << flag << "\n" << describe(r);
  }
}

TEST_F(Cli, MissingDescriptorExits2) {
  for (const char* cmd : {"run", "engines"}) {
    const Result r = run({cmd});
    EXPECT_EQ(r.exit_code, 2) << cmd << "\n" << describe(r);
    EXPECT_NE(r.err.find("descriptor"), std::string::npos) << describe(r);
  }
}

TEST_F(Cli, MalformedDescriptorExits2WithTheParserMessage) {
  for (const std::string bad :
       {"g1mb2ic8ih8kh0", "ic8ih8oc8kh3zz5", "dir:upward/ic8ih8oc8kh3", "g1mb2ih8oc8kh3"}) {
    StatusOr<ConvProblem> parsed = parse_problem(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    for (const char* cmd : {"run", "engines"}) {
      const Result r = run({cmd, bad});
      EXPECT_EQ(r.exit_code, 2) << cmd << " " << bad << "\n" << describe(r);
      EXPECT_NE(r.err.find(parsed.status().message()), std::string::npos)
          << "expected the parser's message: " << parsed.status().message() << "\n"
          << describe(r);
      EXPECT_NE(r.err.find(bad), std::string::npos) << describe(r);
    }
  }
}

TEST_F(Cli, ImpossibleProblemExits2WithTheValidationMessage) {
  // Parses, but 3 groups do not divide 64 channels.
  const std::string bad = "g3mb2ic64ih8iw8oc64kh3kw3";
  const Status why =
      parse_problem(bad).ok() ? parse_problem(bad)->validate() : parse_problem(bad).status();
  ASSERT_FALSE(why.ok());
  const Result r = run({"run", bad});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find(why.message()), std::string::npos) << why.message() << "\n" << describe(r);
}

TEST_F(Cli, SuiteAndFileTogetherExit2) {
  write("x.txt", "a 1 ic8ih8oc8kh3\n");
  const Result r = run({"bench", "--suite", "resnet50", "--file", path("x.txt"), "--dry-run"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_TRUE(r.err.find("--suite") != std::string::npos ||
              r.err.find("--file") != std::string::npos)
      << describe(r);
}

TEST_F(Cli, MissingSuiteFileExits2NamingIt) {
  const Result r = run({"bench", "--file", path("no_such_suite.txt")});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("no_such_suite.txt"), std::string::npos) << describe(r);
}

TEST_F(Cli, UnknownSuiteExits2NamingTheBuiltinOnes) {
  const Result r = run({"bench", "--suite", "vgg16", "--dry-run"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("vgg16"), std::string::npos) << describe(r);
  EXPECT_NE(r.err.find("resnet50"), std::string::npos) << describe(r);
}

TEST_F(Cli, SuiteParseErrorNamesTheFileAndLine) {
  write("bad.txt", "# a suite\nok 1 ic8ih8oc8kh3\nbroken 1 ic8ih8oc8kh0\n");
  const Result r = run({"bench", "--file", path("bad.txt"), "--dry-run"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find(path("bad.txt") + ":3:"), std::string::npos) << describe(r);
  EXPECT_NE(r.err.find(parse_problem("ic8ih8oc8kh0").status().message()), std::string::npos)
      << describe(r);
}

TEST_F(Cli, DbImportOfMissingFileExits2) {
  for (const char* action : {"import", "merge"}) {
    const Result r = run({"db", action, path("missing.json")});
    EXPECT_EQ(r.exit_code, 2) << action << "\n" << describe(r);
    EXPECT_NE(r.err.find("missing.json"), std::string::npos) << describe(r);
  }
}

TEST_F(Cli, DbListAndExportOfAMissingDatabasePrintNothingLikeAFreshOne) {
  Result r = run({"--db", path("none.db"), "db", "list", "--json"});
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  const nlohmann::json list = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(list.is_array()) << describe(r);
  EXPECT_TRUE(list.empty()) << describe(r);
  r = run({"--db", path("none.db"), "db", "list"});
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("0 records in " + path("none.db")), std::string::npos) << describe(r);
  // export: the same document as a fresh database's export.
  make_database(path("fresh.db"), 0);
  const Result fresh = run({"--db", path("fresh.db"), "db", "export"});
  ASSERT_EQ(fresh.exit_code, 0) << describe(fresh);
  r = run({"--db", path("none.db"), "db", "export"});
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(r.out, fresh.out);
  EXPECT_FALSE(fs::exists(path("none.db"))) << "a read-only command created the database";
}

TEST_F(Cli, DbVerifyOfAMissingDatabaseExits2) {
  for (const char* action : {"verify"}) {
    const Result r = run({"--db", path("none.db"), "db", action});
    EXPECT_EQ(r.exit_code, 2) << action << "\n" << describe(r);
    EXPECT_NE(r.err.find("none.db"), std::string::npos) << describe(r);
    EXPECT_FALSE(fs::exists(path("none.db"))) << "a read-only command created the database";
  }
}

TEST_F(Cli, DbPruneWithoutAFilterExits2) {
  make_database(path("tuning.db"), 2);
  const Result r = run({"db", "prune"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("--older-than"), std::string::npos) << describe(r);
}

TEST_F(Cli, DbOffIsAUsageError) {
  const Result r = run({"--db", "off", "db", "list"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
}

// ---------------------------------------------------------------------------------------------
// Commands that need a GPU.

TEST_F(Cli, CommandsThatNeedAGpuExit3WithTheReason) {
  if (gpu_here()) GTEST_SKIP() << "this machine has a GPU";
  const std::string reason = gpu_available().message();
  const std::vector<std::vector<std::string>> commands = {
      {"run", kGood},     {"run", kGood, "--verify", "--dtype", "bf16"},
      {"bench"},          {"bench", "--suite", "unet3d", "--batch", "1"},
      {"engines", kGood}, {"devices"}};
  for (const auto& c : commands) {
    const Result r = run(c);
    EXPECT_EQ(r.exit_code, 3) << c[0] << "\n" << describe(r);
    EXPECT_NE(r.err.find("convplan: no usable GPU: " + reason), std::string::npos) << c[0] << "\n"
                                                                                   << describe(r);
  }
}

TEST_F(Cli, DevicesJsonWithoutAGpuIsADocumentWithNoDevicesAndTheReason) {
  if (gpu_here()) GTEST_SKIP() << "this machine has a GPU";
  const Result r = run({"devices", "--json", "-"});
  EXPECT_EQ(r.exit_code, 3) << describe(r);
  const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << describe(r);
  EXPECT_EQ(j["format"], "convplan-devices");
  ASSERT_TRUE(j["gpus"].is_array()) << describe(r);
  EXPECT_TRUE(j["gpus"].empty());
  EXPECT_EQ(j["no_gpu_reason"], gpu_available().message());
  EXPECT_EQ(j["convplan_version"], convplan_version());
  // To a file as well.
  EXPECT_EQ(run({"devices", "--json", path("devices.json")}).exit_code, 3);
  const nlohmann::json f = nlohmann::json::parse(read_all(path("devices.json")), nullptr, false);
  EXPECT_TRUE(f.is_object() && f["gpus"].empty()) << read_all(path("devices.json"));
}

TEST_F(Cli, UsageErrorsWinOverAMissingGpu) {
  // The descriptor is checked before the GPU, so scripts see 2 for their own mistakes.
  const Result r = run({"run", "ic8ih8oc8kh0"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
}

// ---------------------------------------------------------------------------------------------
// bench --dry-run: the suite after the flags, as a table, JSON and CSV.

TEST_F(Cli, BenchDryRunOfTheDefaultIsResNet50Bf16ChannelsLastBatch32) {
  const Result r =
      run({"bench", "--dry-run", "--json", path("out.json"), "--csv", path("out.csv")});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const nlohmann::json j = nlohmann::json::parse(read_all(path("out.json")), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << read_all(path("out.json"));
  EXPECT_EQ(j["format"], "convplan-bench");
  EXPECT_TRUE(j["dry_run"].get<bool>());
  EXPECT_TRUE(j.contains("date"));
  EXPECT_EQ(j["settings"]["suite"], "resnet50");
  ASSERT_EQ(j["rows"].size(), 23u);
  EXPECT_EQ(j["totals"]["count"], 53);
  EXPECT_EQ(j["totals"]["layers"], 23);
  for (const nlohmann::json& row : j["rows"]) {
    const std::string descriptor = row["descriptor"];
    StatusOr<ConvProblem> p = parse_problem(descriptor);
    ASSERT_TRUE(p.ok()) << descriptor;
    EXPECT_EQ(p->n, 32) << descriptor;
    EXPECT_EQ(p->data_type, DataType::kBFloat16) << descriptor;
    EXPECT_EQ(p->layout, Layout::kChannelsLast) << descriptor;
    EXPECT_EQ(p->direction, Direction::kForward) << descriptor;
    EXPECT_EQ(row["problem"]["n"], 32);
    EXPECT_TRUE(row["median_ms"].is_null());
  }
  // CSV: a header and one line per convolution, each with as many fields as the header.
  std::istringstream csv(read_all(path("out.csv")));
  std::string line;
  std::vector<std::string> lines;
  while (std::getline(csv, line)) lines.push_back(line);
  ASSERT_EQ(lines.size(), 24u);
  EXPECT_EQ(lines[0].rfind("name,count,descriptor,", 0), 0u) << lines[0];
  const auto fields = [](const std::string& l) {  // commas outside quotes, plus one
    int n = 1;
    bool quoted = false;
    for (char ch : l) {
      if (ch == '"') quoted = !quoted;
      if (ch == ',' && !quoted) ++n;
    }
    return n;
  };
  for (const std::string& l : lines) EXPECT_EQ(fields(l), fields(lines[0])) << l;
  EXPECT_EQ(lines[1].rfind("conv1,1,\"dt:bf16,layout:nhwc/", 0), 0u) << lines[1];
  // The table names every layer.
  EXPECT_NE(r.out.find("layer4.1.conv2"), std::string::npos) << describe(r);
}

TEST_F(Cli, BenchPrepareThreadsIsRecordedAndANegativeCountIsAUsageError) {
  const Result r = run({"bench", "--dry-run", "--prepare-threads", "4", "--json", "-"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["settings"]["prepare_threads"], 4);
  const Result bad = run({"bench", "--dry-run", "--prepare-threads", "-1"});
  EXPECT_EQ(bad.exit_code, 2) << describe(bad);
  EXPECT_NE(bad.err.find("--prepare-threads"), std::string::npos) << describe(bad);
}

TEST_F(Cli, BenchDryRunAppliesTheFlagsToEverySuite) {
  for (const char* suite : {"resnet50", "resnext50_32x4d", "mobilenet_v2", "unet3d"}) {
    const Result r = run({"bench", "--suite", suite, "--dry-run", "--batch", "4", "--dtype", "f16",
                          "--layout", "nchw", "--dir", "bwd_filter", "--json", "-"});
    ASSERT_EQ(r.exit_code, 0) << suite << "\n" << describe(r);
    // The table goes to stderr, so stdout is the JSON alone.
    const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << describe(r);
    EXPECT_NE(r.err.find("distinct convolutions"), std::string::npos) << describe(r);
    EXPECT_EQ(j["settings"]["batch"], 4);
    for (const nlohmann::json& row : j["rows"]) {
      const ConvProblem p = *parse_problem(row["descriptor"].get<std::string>());
      EXPECT_EQ(p.n, 4);
      EXPECT_EQ(p.data_type, DataType::kHalf);
      EXPECT_EQ(p.layout, Layout::kChannelsFirst);
      EXPECT_EQ(p.direction, Direction::kBackwardFilter);
    }
  }
}

// The inference suite carries its chains into the rows; a backward direction on it is refused,
// naming the chain (the chains are forward only).
TEST_F(Cli, BenchDryRunKeepsThePostOpChains) {
  const Result r =
      run({"bench", "--suite", "resnet50_infer", "--dry-run", "--batch", "256", "--json", "-"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << describe(r);
  ASSERT_EQ(j["rows"].size(), 24u);
  int with_add = 0;
  for (const nlohmann::json& row : j["rows"]) {
    const ConvProblem p = *parse_problem(row["descriptor"].get<std::string>());
    EXPECT_EQ(p.n, 256);
    EXPECT_TRUE(p.post_ops.has(PostOpKind::kBias)) << row["descriptor"];
    with_add += p.post_ops.has(PostOpKind::kAdd) ? 1 : 0;
  }
  EXPECT_EQ(with_add, 4);  // the conv3 row of each stage
  const Result back = run({"bench", "--suite", "resnet50_infer", "--dry-run", "--dir", "bwd_data"});
  EXPECT_NE(back.exit_code, 0) << describe(back);
  EXPECT_NE(back.err.find("is only for direction=fwd"), std::string::npos) << describe(back);
}

TEST_F(Cli, BenchDryRunReadsOwnSuiteFiles) {
  write("mine.txt",
        "# two convolutions, one with its own batch and type\n"
        "small 3 ic16ih14oc32kh3ph1\n"
        "typed 1 dt:f32/mb7ic16ih14oc16kh1\n");
  const Result r =
      run({"bench", "--file", path("mine.txt"), "--dry-run", "--json", path("o.json")});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const nlohmann::json j = nlohmann::json::parse(read_all(path("o.json")));
  ASSERT_EQ(j["rows"].size(), 2u);
  EXPECT_EQ(j["rows"][0]["problem"]["n"], 32);
  EXPECT_EQ(j["rows"][0]["problem"]["data_type"], "bf16");
  EXPECT_EQ(j["rows"][1]["problem"]["n"], 7);
  EXPECT_EQ(j["rows"][1]["problem"]["data_type"], "f32");
  EXPECT_EQ(j["totals"]["count"], 4);
}

TEST_F(Cli, BenchListSuitesNamesEachWithItsCounts) {
  const Result r = run({"bench", "--list-suites"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  for (const char* s : {"resnet50", "resnext50_32x4d", "mobilenet_v2", "unet3d"}) {
    EXPECT_NE(r.out.find(s), std::string::npos) << s;
  }
  EXPECT_NE(r.out.find("23"), std::string::npos) << describe(r);
}

// ---------------------------------------------------------------------------------------------
// db: over a temporary database written through the library.

TEST_F(Cli, DbPathFollowsTheFlagThenTheEnvironment) {
  Result r = run({"db", "path"});
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(r.out, path("tuning.db") + "\n");
  r = run({"--db", path("other.db"), "db", "path"});
  EXPECT_EQ(r.out, path("other.db") + "\n");
  r = run({"db", "path", "--db", path("after.db")});
  EXPECT_EQ(r.out, path("after.db") + "\n") << "the global flag is taken after the command too";
}

// The library's warnings reach stderr through the log sink; --quiet and CONVPLAN_LOG_LEVEL drop
// them; a bad level is a usage error naming the variable.
TEST_F(Cli, QuietAndTheLogLevelSilenceTheLibrarysWarnings) {
  const std::string damaged = "this is not a SQLite database, it is " + std::string(4096, 'x');
  write("tuning.db", damaged);
  Result r = run({"db", "list"});
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.err.find("convplan: tuning database"), std::string::npos) << describe(r);
  EXPECT_NE(r.err.find("moved it aside"), std::string::npos) << describe(r);

  write("tuning.db", damaged);
  r = run({"--quiet", "db", "list"});
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(r.err, "") << describe(r);

  write("tuning.db", damaged);
  env_["CONVPLAN_LOG_LEVEL"] = "error";
  r = run({"db", "list"});
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(r.err, "") << describe(r);

  env_["CONVPLAN_LOG_LEVEL"] = "loud";
  r = run({"db", "path"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("CONVPLAN_LOG_LEVEL='loud'"), std::string::npos) << describe(r);
}

TEST_F(Cli, DbListShowsEveryRecordAsTextAndJson) {
  make_database(path("tuning.db"), 3);
  Result r = run({"db", "list"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("3 records"), std::string::npos) << describe(r);
  EXPECT_NE(r.out.find("eng2:k3=1"), std::string::npos) << describe(r);
  r = run({"db", "list", "--json"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << describe(r);
  ASSERT_TRUE(j.is_array());
  EXPECT_EQ(j.size(), 3u);
}

TEST_F(Cli, DbShowPrintsOneRecordAndAnUnknownKeyExits1) {
  make_database(path("tuning.db"), 2);
  StatusOr<std::unique_ptr<TuningDatabase>> db = TuningDatabase::open(path("tuning.db"));
  ASSERT_TRUE(db.ok());
  StatusOr<std::vector<TuningRecord>> records = (*db)->list();
  ASSERT_TRUE(records.ok());
  ASSERT_EQ(records->size(), 2u);
  const TuningRecord want = records->front();
  db->reset();
  Result r = run({"db", "show", want.key()});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  StatusOr<TuningRecord> shown = tuning_record_from_json(r.out);
  ASSERT_TRUE(shown.ok()) << shown.status().to_string() << "\n" << describe(r);
  EXPECT_EQ(*shown, want);
  r = run({"db", "show", "no|such|key"});
  EXPECT_EQ(r.exit_code, 1) << describe(r);
  EXPECT_NE(r.err.find("no|such|key"), std::string::npos) << describe(r);
}

TEST_F(Cli, DbExportWritesAValidDocumentToAFileOrStdout) {
  make_database(path("tuning.db"), 4);
  Result r = run({"db", "export", path("export.json")});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const nlohmann::json j = nlohmann::json::parse(read_all(path("export.json")), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << read_all(path("export.json"));
  EXPECT_EQ(j["format"], "convplan-tuning");
  EXPECT_EQ(j["version"], 1);
  EXPECT_EQ(j["records"].size(), 4u);
  r = run({"db", "export"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const nlohmann::json from_stdout = nlohmann::json::parse(r.out, nullptr, false);
  EXPECT_EQ(from_stdout, j);
}

TEST_F(Cli, DbImportAndMergeBringRecordsOver) {
  make_database(path("a.db"), 3);
  ASSERT_EQ(run({"--db", path("a.db"), "db", "export", path("a.json")}).exit_code, 0);
  Result r = run({"--db", path("b.db"), "db", "import", path("a.json")});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("imported 3 records"), std::string::npos) << describe(r);
  // Merge into a database that already holds one of them plus another: 4 in the end.
  make_database(path("c.db"), 2, /*first=*/2);
  r = run({"--db", path("c.db"), "db", "merge", path("a.json")});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  r = run({"--db", path("c.db"), "db", "list", "--json"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(nlohmann::json::parse(r.out).size(), 4u) << describe(r);
}

TEST_F(Cli, DbImportOfADocumentThatIsNotOneExits2) {
  write("junk.json", "{\"format\": \"something else\"}");
  const Result r = run({"db", "import", path("junk.json")});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("junk.json"), std::string::npos) << describe(r);
}

TEST_F(Cli, DbVerifyOfAnIntactDatabaseExits0) {
  make_database(path("tuning.db"), 3);
  const Result r = run({"db", "verify"});
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("3 rows, 3 valid"), std::string::npos) << describe(r);
}

TEST_F(Cli, DbPruneRemovesWhatTheFiltersMatch) {
  make_database(path("tuning.db"), 4);  // 2 on the H200, 2 on the A100
  Result r = run({"db", "prune", "--device", "NVIDIA A100-SXM4-80GB|sm80|sms108|cudnn91400"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("removed 2 records"), std::string::npos) << describe(r);
  r = run({"db", "prune", "--older-than", "36500"});  // a century: none
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("removed 0 records"), std::string::npos) << describe(r);
  r = run({"db", "prune", "--older-than", "1"});  // tuned in 2023: all that is left
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("removed 2 records"), std::string::npos) << describe(r);
  make_database(path("tuning.db"), 3);
  r = run({"db", "prune", "--all"});
  EXPECT_NE(r.out.find("removed 3 records"), std::string::npos) << describe(r);
}

// ---------------------------------------------------------------------------------------------
// Hostile inputs (issue 18, docs/bad-inputs.md).

TEST_F(Cli, NonFiniteAndOutOfRangeNumbersExit2) {
  // Case 12: nan and inf used to pass CLI11's range checks.
  const std::vector<std::vector<std::string>> commands = {
      {"run", kGood, "--peak-tflops", "nan"}, {"run", kGood, "--peak-tflops", "inf"},
      {"run", kGood, "--peak-gbps", "-inf"},  {"bench", "--peak-tflops", "1e400"},
      {"db", "prune", "--older-than", "nan"}, {"db", "prune", "--older-than", "inf"},
      {"db", "prune", "--older-than", "-1"}};
  for (const auto& c : commands) {
    const Result r = run(c);
    EXPECT_EQ(r.exit_code, 2) << c[c.size() - 2] << " " << c.back() << "\n" << describe(r);
  }
}

TEST_F(Cli, MoreThanTwoVerboseLevelsExit2) {
  const Result r = run({"-vvvvv", "db", "path"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("-v is given 5 times"), std::string::npos) << describe(r);
  EXPECT_EQ(run({"-vv", "db", "path"}).exit_code, 0);
}

TEST_F(Cli, BadEnvironmentExits2BeforeTheGpuCheck) {
  // Case 13: the variables are read before the GPU is looked for, so this machine's missing GPU
  // (exit 3) never hides them; and every boolean takes the usual spellings.
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"CONVPLAN_DB_ASSUME_NETWORK_FS", "maybe"},  {"CONVPLAN_DETERMINISTIC", "2"},
      {"CONVPLAN_TUNE_BUDGET_MS", "nan"},          {"CONVPLAN_MAX_INPUT_BYTES", "12Q"},
      {"CONVPLAN_DB_ALLOW_SHARED_FOLDER", "sure"}, {"CONVPLAN_KERNEL_CACHE", "maybe"}};
  for (const auto& [name, value] : bad) {
    env_[name] = value;
    for (const std::vector<std::string>& c :
         std::vector<std::vector<std::string>>{{"run", kGood}, {"devices"}, {"db", "path"}}) {
      const Result r = run(c);
      EXPECT_EQ(r.exit_code, 2) << name << "=" << value << " " << c[0] << "\n" << describe(r);
      EXPECT_NE(r.err.find(name + "='" + value + "'"), std::string::npos) << describe(r);
    }
    env_.erase(name);
  }
  env_["CONVPLAN_DB_ASSUME_NETWORK_FS"] = "YES";
  EXPECT_EQ(run({"db", "path"}).exit_code, 0);
}

TEST_F(Cli, DbExportOntoTheDatabaseItselfIsRefusedAndChangesNothing) {
  // Case 7.
  make_database(path("tuning.db"), 2);
  const std::string before = read_all(path("tuning.db"));
  for (const std::string& target :
       {path("tuning.db"), path("tuning.db-wal"), path("tuning.db.lock"), dir_ + "/./tuning.db"}) {
    const Result r = run({"db", "export", target});
    EXPECT_EQ(r.exit_code, 2) << target << "\n" << describe(r);
    EXPECT_NE(r.err.find("tuning database's own file"), std::string::npos) << describe(r);
  }
  EXPECT_EQ(read_all(path("tuning.db")), before);
  const Result r = run({"db", "list", "--json"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(nlohmann::json::parse(r.out).size(), 2u);
}

TEST_F(Cli, DbImportOfADeviceOrFifoIsRefusedWithoutReading) {
  // Case 2: /dev/zero grew without bound; a FIFO with no writer hung.
  ASSERT_EQ(mkfifo(path("fifo").c_str(), 0600), 0);
  for (const std::string& file : {std::string("/dev/zero"), path("fifo")}) {
    const Result r = run({"db", "import", file});
    EXPECT_EQ(r.exit_code, 2) << file << "\n" << describe(r);
    EXPECT_NE(r.err.find("not a regular file"), std::string::npos) << describe(r);
  }
}

TEST_F(Cli, DbImportLargerThanTheLimitIsRefused) {
  make_database(path("a.db"), 3);
  ASSERT_EQ(run({"--db", path("a.db"), "db", "export", path("a.json")}).exit_code, 0);
  env_["CONVPLAN_MAX_INPUT_BYTES"] = "1K";
  const Result r = run({"--db", path("b.db"), "db", "import", path("a.json")});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("more than the limit of 1024 bytes"), std::string::npos) << describe(r);
}

TEST_F(Cli, DbImportOfADeeplyNestedRecordExits2WithoutACrash) {
  // Case 1: 100000 levels crashed the JSON printer (SIGSEGV).
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  write("deep.json", "{\"format\":\"convplan-tuning\",\"version\":1,\"records\":[" + deep + "]}");
  const Result r = run({"db", "import", path("deep.json")});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("nested deeper than 32 levels"), std::string::npos) << describe(r);
}

TEST_F(Cli, DbImportWithDuplicateKeysCountsEachKeyOnce) {
  // Case 14: two records under one key were counted as two imported.
  make_database(path("a.db"), 2);
  ASSERT_EQ(run({"--db", path("a.db"), "db", "export", path("a.json")}).exit_code, 0);
  nlohmann::json doc = nlohmann::json::parse(read_all(path("a.json")));
  doc["records"].push_back(doc["records"][0]);
  write("dup.json", doc.dump());
  const Result r = run({"--db", path("b.db"), "db", "import", path("dup.json")});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("imported 2 records"), std::string::npos) << describe(r);
  EXPECT_NE(r.err.find("1 record has the key of a later record"), std::string::npos) << describe(r);
}

TEST_F(Cli, DbVerifyOfADamagedFileExits1AndLeavesItInPlace) {
  // Case 9: verify moved the file aside, then verified the new empty one and exited 0.
  write("tuning.db", std::string(8192, 'x'));
  const Result r = run({"db", "verify"});
  EXPECT_EQ(r.exit_code, 1) << describe(r);
  EXPECT_EQ(read_all(path("tuning.db")), std::string(8192, 'x'));
  for (const auto& entry : fs::directory_iterator(dir_)) {
    EXPECT_EQ(entry.path().filename().string().find(".corrupt-"), std::string::npos)
        << entry.path();
  }
}

TEST_F(Cli, SuiteCountThatWouldOverflowExits2) {
  // Case 3: counts summed past int64 and printed negative.
  write("big.txt", "a 9223372036854775807 ic8ih8oc8kh3\nb 9223372036854775807 ic8ih8oc8kh3\n");
  Result r = run({"bench", "--dry-run", "--file", path("big.txt")});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("is not a whole number from 1 to 1000000000"), std::string::npos)
      << describe(r);
  r = run({"bench", "--dry-run", "--file", "/dev/zero"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
}

TEST_F(Cli, SharedFolderNeedsTheExplicitFlag) {
  // Case 4: a folder others may write is refused unless the user says so.
  const std::string shared = path("shared");
  ASSERT_EQ(mkdir(shared.c_str(), 0700), 0);
  ASSERT_EQ(chmod(shared.c_str(), 01777), 0);
  env_["CONVPLAN_DB"] = shared + "/t.db";
  write("none.json", "{\"format\":\"convplan-tuning\",\"version\":1,\"records\":[]}");
  Result r = run({"db", "import", path("none.json")});
  EXPECT_EQ(r.exit_code, 1) << describe(r);
  EXPECT_NE(r.err.find("is writable by other users"), std::string::npos) << describe(r);
  r = run({"--db-allow-shared-folder", "db", "import", path("none.json")});
  EXPECT_EQ(r.exit_code, 0) << describe(r);
}

}  // namespace
}  // namespace convplan

namespace convplan {
namespace {

// `convplan explain` needs no GPU: the stem's figures and rewrites, as text and as JSON.
class CliExplain : public Cli {};

TEST_F(CliExplain, TextNamesTheProblemItsFiguresAndEveryRewrite) {
  const Result r = run({"explain", "dt:bf16,layout:nhwc/mb256ic3ih224iw224oc64kh7kw7sh2sw2ph3pw3"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  for (const char* word :
       {"problem    dt:bf16,layout:nhwc/g1mb256ic3ih224iw224oc64oh112ow112kh7kw7sh2sw2ph3pw3",
        "output     112x112", "flops      60.423 GFLOP", "min bytes", "floor",
        "at 989 TFLOP/s, 4800 GB/s", "rewrites   5",
        "  s2d2  dt:bf16,layout:nhwc/g1mb256ic12ih112iw112oc64oh112ow112kh4kw4sh1sw1ph2pw2rh1rw1",
        "  s2d2c8  ", "  c8  ", "  uc32  ",
        "  s2d2uc32  "
        "dt:bf16,layout:nhwc/g1mb256ic64ih112iw112oc64oh112ow112kh4kw1sh1sw1ph2pw0rh1rw0"}) {
    EXPECT_NE(r.out.find(word), std::string::npos) << word << "\n" << describe(r);
  }
}

TEST_F(CliExplain, JsonToStandardOutputHasTheRewrittenDescriptorsAndTheGivenPeaks) {
  const Result r = run({"explain", "mb8ic1iw1000oc16kw64sw4pw30", "--json", "-", "--peak-tflops",
                        "100", "--peak-gbps", "1000"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["problem"], "g1mb8ic1iw1000oc16ow250kw64sw4pw30");
  EXPECT_EQ(j["y"], nlohmann::json::array({8, 16, 250}));
  EXPECT_EQ(j["peak_tflops"], 100.0);
  const double floor = j["roofline_floor_ms"];
  const double flops = j["flops"], bytes = j["min_bytes"];
  EXPECT_DOUBLE_EQ(floor, std::max(flops / 100e12, bytes / 1000e9) * 1e3);
  std::vector<std::string> names;
  for (const auto& e : j["rewrites"]) {
    names.push_back(e["name"]);
    auto p = parse_problem(e["problem"].get<std::string>());
    ASSERT_TRUE(p.ok()) << e["problem"];
    EXPECT_EQ(p->output()[0], 250) << e["problem"];
    EXPECT_GT(e["transform_bytes"].get<double>(), 0.0) << e["name"];
    EXPECT_GE(e["roofline_floor_with_transforms_ms"].get<double>(),
              e["roofline_floor_ms"].get<double>())
        << e["name"];
  }
  EXPECT_EQ(names, (std::vector<std::string>{"s2d2", "s2d2c4", "s2d2c8", "s2d2c16", "s2d4",
                                             "s2d4c8", "s2d4c16", "c4", "uc32"}));
  // The 1-D unfold is the whole convolution as one GEMM: 64 taps x 1 channel, width 1.
  EXPECT_EQ(j["rewrites"].back()["problem"], "g1mb8ic64iw250oc16ow250kw1sw1pw0");
}

TEST_F(CliExplain, MalformedDescriptorIsAUsageError) {
  const Result r = run({"explain", "mb8ic0"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
}

}  // namespace
}  // namespace convplan
