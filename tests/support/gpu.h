// Test helpers for GPU tests: skip with the reason where no GPU can be used.
#pragma once

#include <gtest/gtest.h>

#include "convplan/cudnn_backend.h"

// Skips the current test, naming why, when there is no usable GPU.
#define CONVPLAN_REQUIRE_GPU()                                                       \
  do {                                                                               \
    ::convplan::Status gpu_status_ = ::convplan::gpu_available();                    \
    if (!gpu_status_.ok()) GTEST_SKIP() << "no GPU here: " << gpu_status_.message(); \
  } while (0)
