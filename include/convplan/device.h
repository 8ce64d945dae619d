// DeviceInfo: the identity of the GPU a handle runs on, as the cache and the database key it.
// A plain value type.
#pragma once

#include <cstdint>
#include <string>

#include "convplan/export.h"

namespace convplan {

struct CONVPLAN_EXPORT DeviceInfo {
  int ordinal = -1;  // CUDA device index in this process
  std::string uuid;  // "GPU-8f0c..." style; distinguishes two cards of one model
  std::string name;  // "NVIDIA H200"
  int cc_major = 0;
  int cc_minor = 0;
  int sm_count = 0;
  int64_t l2_bytes = 0;
  int64_t memory_bytes = 0;
  int64_t cudnn_version = 0;  // cudnnGetVersion(), e.g. 91900

  // What makes tuning results transferable: devices with equal model keys share tuning records
  // (name, compute capability, SM count, cuDNN version; not the ordinal, UUID or memory size).
  // "NVIDIA H200|sm90|sms132|cudnn91900"
  std::string model_key() const;
  bool operator==(const DeviceInfo&) const = default;
};

}  // namespace convplan
