// SingleFlight<Key, Value>: a get-or-create table in which each key's value is created once,
// however many threads ask for it at the same time (as oneDNN's primitive cache does it).
//
// The first caller to miss a key inserts a placeholder and creates the value outside every lock;
// callers that miss the same key meanwhile wait on the placeholder and share its outcome. A
// failure is handed to those waiters and the placeholder removed, so failures are never kept and
// the next caller tries again. Values are immutable once made and shared (shared_ptr<const>).
// Creating one key blocks no other key. Thread-safe. Internal to src/cache.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <unordered_map>
#include <utility>

#include "convplan/status.h"
#include "core/mutex.h"

namespace convplan::cache_detail {

// How get_or_create found its value.
enum class FlightOutcome {
  kFound,    // it was there already
  kCreated,  // this call created it
  kWaited,   // another call was creating it; this one waited for it
};

template <typename Key, typename Value, typename Hash = std::hash<Key>>
class SingleFlight {
 public:
  using ValuePtr = std::shared_ptr<const Value>;

  // The value of `key`, created by `create()` (returning StatusOr<Value>) when absent. `create`
  // runs on the calling thread, outside every lock of this table; it may take long (a tune).
  template <typename Create>
  StatusOr<ValuePtr> get_or_create(const Key& key, Create&& create, FlightOutcome* outcome)
      EXCLUDES(mu_) {
    std::shared_ptr<Slot> slot;
    bool leader = false;
    {
      MutexLock lock(mu_);
      std::shared_ptr<Slot>& found = slots_[key];
      if (found == nullptr) {
        found = std::make_shared<Slot>();
        leader = true;
      }
      slot = found;
    }
    if (!leader) return wait_for(*slot, outcome);
    if (outcome != nullptr) *outcome = FlightOutcome::kCreated;
    StatusOr<Value> made = std::forward<Create>(create)();
    if (!made.ok()) {
      fail(key, slot, made.status());
      return made.status();
    }
    auto value = std::make_shared<const Value>(std::move(made).value());
    {
      MutexLock lock(slot->mu);
      slot->value = value;
      slot->state = State::kReady;
    }
    slot->ready.notify_all();
    return value;
  }

  // The value of `key` if made already; null while absent or still being created.
  ValuePtr find(const Key& key) const EXCLUDES(mu_) {
    std::shared_ptr<Slot> slot;
    {
      MutexLock lock(mu_);
      auto it = slots_.find(key);
      if (it == slots_.end()) return nullptr;
      slot = it->second;
    }
    MutexLock lock(slot->mu);
    return slot->state == State::kReady ? slot->value : nullptr;
  }

  // Replaces the value of a key made already (a provisional value by the final one); does
  // nothing while the key is absent or still being created.
  void replace(const Key& key, ValuePtr value) EXCLUDES(mu_) {
    std::shared_ptr<Slot> slot;
    {
      MutexLock lock(mu_);
      auto it = slots_.find(key);
      if (it == slots_.end()) return;
      slot = it->second;
    }
    MutexLock lock(slot->mu);
    if (slot->state == State::kReady) slot->value = std::move(value);
  }

  // Keys held: made, or being made.
  size_t size() const EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return slots_.size();
  }

 private:
  enum class State { kPending, kReady, kFailed };
  struct Slot {
    Mutex mu;
    std::condition_variable ready;
    State state GUARDED_BY(mu) = State::kPending;
    ValuePtr value GUARDED_BY(mu);
    Status error GUARDED_BY(mu);
  };

  static StatusOr<ValuePtr> wait_for(Slot& slot, FlightOutcome* outcome) {
    MutexLock lock(slot.mu);
    if (outcome != nullptr) {
      *outcome = slot.state == State::kPending ? FlightOutcome::kWaited : FlightOutcome::kFound;
    }
    while (slot.state == State::kPending) lock.wait(slot.ready);
    if (slot.state == State::kReady) return slot.value;
    return slot.error;  // the creator's failure, shared by those that waited for it
  }

  void fail(const Key& key, const std::shared_ptr<Slot>& slot, const Status& error) EXCLUDES(mu_) {
    {
      MutexLock lock(mu_);
      auto it = slots_.find(key);
      if (it != slots_.end() && it->second == slot) slots_.erase(it);
    }
    {
      MutexLock lock(slot->mu);
      slot->state = State::kFailed;
      slot->error = error;
    }
    slot->ready.notify_all();
  }

  mutable Mutex mu_;
  std::unordered_map<Key, std::shared_ptr<Slot>, Hash> slots_ GUARDED_BY(mu_);
};

}  // namespace convplan::cache_detail
