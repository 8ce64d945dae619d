#include "stuck_device.h"

#include <cstdio>
#include <cstdlib>

#include "commands.h"

namespace convplan::cli {

void exit_now_if_device_stuck(const Status& s) {
  if (s.code() != StatusCode::kDeadlineExceeded) return;
  std::fprintf(stderr,
               "convplan: %s\nconvplan: the GPU is still running that work; exiting now, without "
               "cleanup\n",
               s.to_string().c_str());
  std::fflush(stderr);
  std::_Exit(kExitFailure);  // no destructors, no atexit handlers
}

}  // namespace convplan::cli
