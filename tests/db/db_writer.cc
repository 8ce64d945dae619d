// db_writer: a small program the db tests start many times at once (and kill) to check that
// processes sharing one tuning database lose nothing that was committed.
//
//   db_writer <db path> <log path> <writer> <first id> <count> [<pause us>]
//
// Puts make_test_record(id, writer) for id in [first, first + count), in a shuffled order. After
// each put() returns ok it appends the record's key and a newline to <log path> and fsyncs it,
// so the log never names a record whose put() had not returned. Exits 0 when every put
// succeeded, 1 on the first failure (printed on stderr), 2 on bad arguments.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "convplan/tuning_db.h"
#include "db/db_test_records.h"

int main(int argc, char** argv) {
  if (argc != 6 && argc != 7) {
    std::fprintf(stderr, "usage: %s <db> <log> <writer> <first id> <count> [<pause us>]\n",
                 argv[0]);
    return 2;
  }
  const std::string db_path = argv[1];
  const std::string log_path = argv[2];
  const int writer = std::atoi(argv[3]);
  const int first = std::atoi(argv[4]);
  const int count = std::atoi(argv[5]);
  const int pause_us = argc == 7 ? std::atoi(argv[6]) : 0;

  int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (log < 0) {
    std::perror("db_writer: open log");
    return 1;
  }
  auto db = convplan::TuningDatabase::open(db_path);
  if (!db.ok()) {
    std::fprintf(stderr, "db_writer %d: open: %s\n", writer, db.status().to_string().c_str());
    return 1;
  }
  std::vector<int> ids;
  for (int i = 0; i < count; ++i) ids.push_back(first + i);
  std::mt19937 rng(static_cast<unsigned>(writer * 7919 + getpid()));
  std::shuffle(ids.begin(), ids.end(), rng);

  for (int id : ids) {
    const convplan::TuningRecord record = convplan::testing::make_test_record(id, writer);
    convplan::Status s = (*db)->put(record);
    if (!s.ok()) {
      std::fprintf(stderr, "db_writer %d: put %d: %s\n", writer, id, s.to_string().c_str());
      return 1;
    }
    const std::string line = record.key() + "\n";
    if (::write(log, line.data(), line.size()) != static_cast<ssize_t>(line.size()) ||
        ::fsync(log) != 0) {
      std::perror("db_writer: write log");
      return 1;
    }
    if (pause_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(pause_us));
  }
  ::close(log);
  return 0;
}
