#include "errors.h"

#include <Python.h>

namespace nb = nanobind;

namespace convplan::python {
namespace {
// The type object, owned by the module for the life of the process (never freed: the module
// cannot be unloaded).
PyObject* g_error_type = nullptr;
}  // namespace

void register_error_type(nb::module_& m) {
  g_error_type = PyErr_NewExceptionWithDoc(
      "convplan.Error",
      "A runtime failure of convplan. `code` is the status code's name ('no device', 'cuDNN "
      "error', ...), `code_value` its number in convplan::StatusCode.",
      PyExc_RuntimeError, nullptr);
  if (g_error_type == nullptr) throw nb::python_error();
  m.attr("Error") = nb::handle(g_error_type);
}

void raise_status(const Status& status) {
  if (status.code() == StatusCode::kInvalidArgument)
    throw nb::value_error(status.message().c_str());
  nb::object type = nb::borrow(g_error_type);
  nb::object error = type(nb::str(status.to_string().c_str()));
  error.attr("code") = nb::str(status_code_name(status.code()));
  error.attr("code_value") = nb::int_(static_cast<int>(status.code()));
  PyErr_SetObject(g_error_type, error.ptr());
  throw nb::python_error();
}

}  // namespace convplan::python
