// What the command line does after a GPU run that never finished (StatusCode::kDeadlineExceeded).
#pragma once

#include "convplan/status.h"

namespace convplan::cli {

// Where `s` says the GPU is still running work that did not finish: prints it and ends the
// process at once with kExitFailure, without cleanup. Every later CUDA call that waits for the
// device would wait forever, cudaFree in the destructors on the way out among them (an exhaustive
// tune of ResNet-50's backward-data ran cuDNN kernels that never finished, issue 21). Otherwise
// returns.
void exit_now_if_device_stuck(const Status& s);

}  // namespace convplan::cli
