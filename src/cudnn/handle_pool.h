// HandlePool: spare cuDNN handles per device ordinal, made by a Backend and kept for reuse, for
// work that runs on threads of its own (cuDNN lets threads share no handle at once). The tuner's
// compile pool finalizes runtime-compiled plans on them; the rewriting backend asks the
// heuristics about rewritten problems on them. A cudnnCreate costs more than one such task is
// worth, so handles are taken and given back, never made per task; several users at once each
// get their own (new ones are made while the free list is empty). Internal to src/.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "convplan/backend.h"
#include "core/mutex.h"

namespace convplan {

class HandlePool {
 public:
  explicit HandlePool(Backend& backend) : backend_(backend) {}

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

}  // namespace convplan
