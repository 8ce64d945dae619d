// convplan/version.h (generated from the project's version) against the library's
// convplan_version(), which tuning records store.
#include <gtest/gtest.h>

#include <string>

#include "convplan/tuning_record.h"
#include "convplan/version.h"

namespace convplan {
namespace {

TEST(Version, TheHeaderNamesTheLinkedLibrarysVersion) {
  EXPECT_STREQ(CONVPLAN_VERSION, convplan_version());
  const std::string parts = std::to_string(CONVPLAN_VERSION_MAJOR) + "." +
                            std::to_string(CONVPLAN_VERSION_MINOR) + "." +
                            std::to_string(CONVPLAN_VERSION_PATCH);
  EXPECT_EQ(parts, CONVPLAN_VERSION);
}

}  // namespace
}  // namespace convplan
