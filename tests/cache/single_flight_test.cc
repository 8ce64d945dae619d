// SingleFlight: one creation per key however many threads miss it, failures shared and not
// kept, keys independent.
#include "cache/single_flight.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

namespace convplan::cache_detail {
namespace {

using Table = SingleFlight<std::string, int>;

TEST(SingleFlightTest, ConcurrentMissersCreateOnceAndTheOthersWait) {
  Table table;
  std::atomic<int> creations{0};
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> started{0};
  constexpr int kThreads = 8;
  std::vector<FlightOutcome> outcomes(kThreads);
  std::vector<int> values(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      started.fetch_add(1);
      StatusOr<Table::ValuePtr> v = table.get_or_create(
          "k",
          [&]() -> StatusOr<int> {
            creations.fetch_add(1);
            released.wait();  // hold the placeholder until every thread has asked
            return 42;
          },
          &outcomes[static_cast<size_t>(t)]);
      values[static_cast<size_t>(t)] = v.ok() ? **v : -1;
    });
  }
  while (started.load() < kThreads) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let them reach the table
  release.set_value();
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(creations.load(), 1);
  int created = 0;
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(values[static_cast<size_t>(t)], 42);
    if (outcomes[static_cast<size_t>(t)] == FlightOutcome::kCreated) ++created;
  }
  EXPECT_EQ(created, 1);
  FlightOutcome again = FlightOutcome::kCreated;
  ASSERT_TRUE(table
                  .get_or_create(
                      "k", [] { return StatusOr<int>(0); }, &again)
                  .ok());
  EXPECT_EQ(again, FlightOutcome::kFound);
}

// One try: a leader that fails after a second caller has (probably) started waiting. Returns the
// second caller's outcome; when it came too late to wait, it created the value itself.
FlightOutcome fail_with_a_waiter(Table& table, const std::string& key) {
  std::promise<void> waiter_in;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::thread leader([&] {
    FlightOutcome o;
    StatusOr<Table::ValuePtr> v = table.get_or_create(
        key,
        [&]() -> StatusOr<int> {
          waiter_in.set_value();
          released.wait();
          return not_found("no such thing");
        },
        &o);
    EXPECT_EQ(v.status().code(), StatusCode::kNotFound);
    EXPECT_EQ(o, FlightOutcome::kCreated);
  });
  waiter_in.get_future().wait();  // the placeholder is in
  EXPECT_EQ(table.find(key), nullptr) << "pending is not found";
  FlightOutcome waited = FlightOutcome::kFound;
  std::thread waiter([&] {
    StatusOr<Table::ValuePtr> v = table.get_or_create(
        key, []() -> StatusOr<int> { return 7; }, &waited);
    if (waited == FlightOutcome::kWaited) {
      EXPECT_EQ(v.status().code(), StatusCode::kNotFound) << "the waiter shares the failure";
    } else {
      EXPECT_TRUE(v.ok() && **v == 7) << "too late to wait: it created the value";
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  release.set_value();
  leader.join();
  waiter.join();
  return waited;
}

TEST(SingleFlightTest, AFailureReachesTheWaitersAndIsNotKept) {
  Table table;
  bool waited = false;
  for (int attempt = 0; attempt < 5 && !waited; ++attempt) {
    const std::string key = "k" + std::to_string(attempt);
    waited = fail_with_a_waiter(table, key) == FlightOutcome::kWaited;
    if (!waited) continue;
    EXPECT_EQ(table.find(key), nullptr) << "the failure is not kept";
    FlightOutcome o;
    StatusOr<Table::ValuePtr> retry = table.get_or_create(
        key, [] { return StatusOr<int>(9); }, &o);
    ASSERT_TRUE(retry.ok());
    EXPECT_EQ(**retry, 9);
    EXPECT_EQ(o, FlightOutcome::kCreated) << "the next caller tries again";
    ASSERT_NE(table.find(key), nullptr);
    EXPECT_EQ(*table.find(key), 9);
  }
  EXPECT_TRUE(waited);
}

TEST(SingleFlightTest, CreatingOneKeyBlocksNoOtherKey) {
  Table table;
  std::promise<void> in;
  std::promise<void> release;
  std::thread slow([&] {
    FlightOutcome o;
    EXPECT_TRUE(table
                    .get_or_create(
                        "slow",
                        [&]() -> StatusOr<int> {
                          in.set_value();
                          release.get_future().wait();
                          return 1;
                        },
                        &o)
                    .ok());
  });
  in.get_future().wait();
  FlightOutcome o;
  StatusOr<Table::ValuePtr> fast = table.get_or_create(
      "fast", [] { return StatusOr<int>(2); }, &o);
  ASSERT_TRUE(fast.ok());  // would hang if "slow" held the table's lock while creating
  EXPECT_EQ(**fast, 2);
  release.set_value();
  slow.join();
  EXPECT_EQ(table.size(), 2u);
}

}  // namespace
}  // namespace convplan::cache_detail
