#include "stuck_device.h"

#include <gtest/gtest.h>

namespace convplan::cli {
namespace {

TEST(StuckDevice, ARunPastItsDeadlineEndsTheProcessAtOnceNamingIt) {
  const Status stuck(StatusCode::kDeadlineExceeded, "timing eng77: did not finish within 60 s");
  EXPECT_EXIT(exit_now_if_device_stuck(stuck), ::testing::ExitedWithCode(1),
              "timing eng77: did not finish within 60 s(.|\n)*exiting now, without cleanup");
}

TEST(StuckDevice, OtherStatusesReturn) {
  exit_now_if_device_stuck(ok_status());
  exit_now_if_device_stuck(Status(StatusCode::kCudaError, "illegal address"));
  SUCCEED();
}

}  // namespace
}  // namespace convplan::cli
