#include "convplan/input_limits.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "convplan/environment.h"

namespace convplan {
namespace {

Status file_error(StatusCode code, std::string_view what, const std::string& path,
                  const std::string& why) {
  return Status(code, std::string(what) + " '" + path + "': " + why);
}

// Closes a file descriptor on every way out.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

StatusOr<int64_t> max_input_bytes() {
  const char* name = "CONVPLAN_MAX_INPUT_BYTES";
  CONVPLAN_ASSIGN_OR_RETURN(int64_t bytes, env_byte_size(name, kDefaultMaxInputBytes));
  if (bytes < 1024) {
    return invalid_argument(std::string(name) + "='" + std::string(*env_value(name)) +
                            "': must be at least 1K");
  }
  return bytes;
}

Status check_json_nesting(std::string_view text, std::string_view what, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (in_string) {
      if (ch == '\\') {
        ++i;  // the escaped character cannot end the string
      } else if (ch == '"') {
        in_string = false;
      }
      continue;
    }
    if (ch == '"') {
      in_string = true;
    } else if (ch == '[' || ch == '{') {
      if (++depth > max_depth) {
        return invalid_argument(std::string(what) + ": nested deeper than " +
                                std::to_string(max_depth) + " levels (at byte " +
                                std::to_string(i) + ")");
      }
    } else if ((ch == ']' || ch == '}') && depth > 0) {
      --depth;
    }
  }
  return ok_status();
}

Status check_json_limits(std::string_view text, std::string_view what, int64_t max_bytes,
                         int max_depth) {
  if (static_cast<int64_t>(text.size()) > max_bytes) {
    return invalid_argument(std::string(what) + ": " + std::to_string(text.size()) +
                            " bytes, more than the limit of " + std::to_string(max_bytes));
  }
  return check_json_nesting(text, what, max_depth);
}

StatusOr<std::string> read_input_file(const std::string& path, std::string_view what,
                                      int64_t max_bytes) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
  if (fd.get() < 0) {
    const int err = errno;
    return file_error(err == ENOENT ? StatusCode::kNotFound : StatusCode::kIoError,
                      "cannot open " + std::string(what), path, std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    return file_error(StatusCode::kIoError, what, path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) {
    return file_error(StatusCode::kInvalidArgument, what, path,
                      "not a regular file (a FIFO, device or folder is not read)");
  }
  const std::string limit =
      "the limit of " + std::to_string(max_bytes) + " bytes (CONVPLAN_MAX_INPUT_BYTES)";
  if (st.st_size > max_bytes) {
    return file_error(StatusCode::kInvalidArgument, what, path,
                      std::to_string(st.st_size) + " bytes, more than " + limit);
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  for (;;) {
    if (got == text.size()) {
      // The file may have grown since fstat: read on, within the limit.
      if (static_cast<int64_t>(got) >= max_bytes + 1) break;
      text.resize(std::min<size_t>(static_cast<size_t>(max_bytes) + 1, got + 65536));
    }
    const ssize_t n = ::read(fd.get(), text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return file_error(StatusCode::kIoError, what, path, std::strerror(errno));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (static_cast<int64_t>(got) > max_bytes) {
    return file_error(StatusCode::kInvalidArgument, what, path, "larger than " + limit);
  }
  text.resize(got);
  return text;
}

}  // namespace convplan
