// How the module turns a convplan Status into a Python exception: kInvalidArgument becomes
// ValueError (the caller's input is wrong), every other code convplan.Error (a RuntimeError)
// carrying the status code. Call with the GIL held.
#pragma once

#include <nanobind/nanobind.h>

#include "convplan/status.h"

namespace convplan::python {

// Creates convplan._C.Error in `m`; called once at import.
void register_error_type(nanobind::module_& m);
[[noreturn]] void raise_status(const Status& status);
// Raises unless ok.
inline void check(const Status& status) {
  if (!status.ok()) raise_status(status);
}

}  // namespace convplan::python
