// The message when a device's architecture was not built (check_device_architecture), without a
// GPU: it names the device, its compute capability, what was built and how to rebuild. The check
// itself runs on the GPU machine (tests/gpu/output_check_gpu_test.cc).
#include <gtest/gtest.h>

#include <string>

#include "cudnn/output_check.h"

namespace convplan::cudnn_detail {
namespace {

TEST(ArchitectureMessage, NamesTheDeviceItsCapabilityTheBuiltListAndTheFix) {
  const std::string m =
      unsupported_architecture_message(1, "Tesla T4", 7, 5, "80-real,86-real,89-real,90");
  EXPECT_NE(m.find("GPU 1 (Tesla T4)"), std::string::npos) << m;
  EXPECT_NE(m.find("compute capability 7.5"), std::string::npos) << m;
  EXPECT_NE(m.find("80-real,86-real,89-real,90"), std::string::npos) << m;
  EXPECT_NE(m.find("-DCMAKE_CUDA_ARCHITECTURES=75"), std::string::npos) << m;
}

}  // namespace
}  // namespace convplan::cudnn_detail
