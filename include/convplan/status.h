// Status and StatusOr<T>: how every fallible convplan call reports failure.
//
// No exception crosses the public API. A Status carries a code that says what the caller should
// do and a message that names the field and the value at fault. An ok Status holds no string, so
// returning one costs nothing on a hot path. Both types are plain values: safe to copy between
// threads, not to mutate from two threads at once.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>

#include "convplan/export.h"

namespace convplan {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,   // the caller's input is wrong; fix it, do not retry
  kNotSupported,      // valid, but this engine, backend or build cannot do it
  kOutOfMemory,       // host or device memory ran out; retry with less
  kCudnnError,        // cuDNN failed; the message has its status name and its own words
  kCudaError,         // the CUDA runtime failed
  kCorruptData,       // stored data (a database, a JSON record) is damaged
  kNotFound,          // nothing stored under that key
  kWrongHandle,       // a plan was asked to execute with a handle it was not built with
  kNoDevice,          // no usable GPU on this machine
  kIoError,           // a file could not be read or written
  kInternal,          // a bug in convplan
  kCancelled,         // stopped on request (a background tune when its cache is destroyed)
  kDeadlineExceeded,  // a GPU run did not finish in time; it may still be running, and later
                      // work on its device waits behind it: this process cannot use the device
};

CONVPLAN_EXPORT const char* status_code_name(StatusCode code);

class [[nodiscard]] CONVPLAN_EXPORT Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "kInvalidArgument: groups=3 does not divide c=64", or "ok".
  std::string to_string() const;

  // Returns a copy whose message is "context: message"; ok stays ok.
  Status with_context(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status ok_status() { return Status(); }
inline Status invalid_argument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status not_supported(std::string m) { return {StatusCode::kNotSupported, std::move(m)}; }
inline Status out_of_memory(std::string m) { return {StatusCode::kOutOfMemory, std::move(m)}; }
inline Status corrupt_data(std::string m) { return {StatusCode::kCorruptData, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// A value or the Status saying why there is none.
// REQUIRES: constructed from a non-ok Status when it holds no value.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}         // NOLINT: implicit by design
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT
    assert(!status_.ok() && "StatusOr built from an ok Status without a value");
    if (status_.ok()) status_ = internal_error("StatusOr built from an ok Status without a value");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }

  // REQUIRES: ok().
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace convplan

#define CONVPLAN_CONCAT_INNER_(a, b) a##b
#define CONVPLAN_CONCAT_(a, b) CONVPLAN_CONCAT_INNER_(a, b)

// Returns the Status of `expr` from the enclosing function when it is not ok.
#define CONVPLAN_RETURN_IF_ERROR(expr)                   \
  do {                                                   \
    ::convplan::Status convplan_status_ = (expr);        \
    if (!convplan_status_.ok()) return convplan_status_; \
  } while (0)

// `lhs` = the value of the StatusOr `expr`, or returns its Status.
#define CONVPLAN_ASSIGN_OR_RETURN(lhs, expr) \
  CONVPLAN_ASSIGN_OR_RETURN_IMPL_(CONVPLAN_CONCAT_(convplan_or_, __LINE__), lhs, expr)
#define CONVPLAN_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                    \
  if (!tmp.ok()) return tmp.status();                   \
  lhs = std::move(tmp).value()
