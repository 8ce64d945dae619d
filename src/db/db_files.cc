#include "db/db_files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string_view>
#include <thread>

namespace convplan::detail {
namespace {

Status io_error(const std::string& what, int err) {
  return Status(StatusCode::kIoError, what + ": " + std::strerror(err));
}

bool exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

// statfs f_type values of file systems whose POSIX locks or shared memory SQLite's WAL cannot
// rely on (from linux/magic.h and the file systems' own sources).
struct NetworkFs {
  int64_t magic;
  const char* name;
};
constexpr NetworkFs kNetworkFileSystems[] = {
    {0x6969, "nfs"},
    {0x517B, "smb"},
    {0xFF534D42, "cifs"},
    {0xFE534D42, "smb2"},
    {0x0BD00BD0, "lustre"},
    {0x47504653, "gpfs"},
    {0x01021997, "9p"},
    {0x65735546, "fuse"},
    {0x00C36400, "ceph"},
    {0x5346414F, "afs"},
    {0x6B414653, "afs"},
    {0x73757245, "coda"},
    {0x564C, "ncp"},
    {0x19830326, "beegfs"},
    {0xAAD7AAEA, "panfs"},
    {0x20030528, "orangefs"},
    {0x01161970, "gfs2"},
    {0x7461636F, "ocfs2"},
};

}  // namespace

bool is_in_memory_path(const std::string& path) { return path == "off" || path == ":memory:"; }

std::string parent_folder(const std::string& file_path) {
  size_t slash = file_path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return file_path.substr(0, slash);
}

Status make_private_folders(const std::string& file_path) {
  size_t slash = file_path.find_last_of('/');
  if (slash == std::string::npos || slash == 0) return ok_status();
  const std::string folder = file_path.substr(0, slash);
  // Each prefix ending before a '/', then the folder itself.
  for (size_t pos = 1; pos <= folder.size(); ++pos) {
    if (pos != folder.size() && folder[pos] != '/') continue;
    const std::string prefix = folder.substr(0, pos);
    if (prefix.empty() || prefix.back() == '/') continue;  // "a//b"
    if (::mkdir(prefix.c_str(), 0700) == 0) {
      // mkdir's mode is filtered by the umask; make it exactly 0700.
      if (::chmod(prefix.c_str(), 0700) != 0) return io_error("chmod 0700 '" + prefix + "'", errno);
      continue;
    }
    int err = errno;
    struct stat st;
    if (err == EEXIST && ::stat(prefix.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) continue;
    return io_error("cannot create the folder '" + prefix + "' for the tuning database", err);
  }
  return ok_status();
}

Status create_private_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (errno == EEXIST) return ok_status();
    return io_error("cannot create the tuning database '" + path + "'", errno);
  }
  int rc = ::fchmod(fd, 0600);  // the umask may have removed bits
  int err = errno;
  ::close(fd);
  if (rc != 0) return io_error("chmod 0600 '" + path + "'", err);
  return ok_status();
}

std::string network_file_system_name(const std::string& folder) {
  if (const char* assume = std::getenv("CONVPLAN_DB_ASSUME_NETWORK_FS")) {
    std::string_view v(assume);
    if (v == "1") return "assumed (CONVPLAN_DB_ASSUME_NETWORK_FS=1)";
    if (v == "0") return "";
  }
  struct statfs fs;
  if (::statfs(folder.c_str(), &fs) != 0) return "";
  // f_type's width and signedness differ between architectures; compare the low 32 bits.
  const uint32_t type = static_cast<uint32_t>(fs.f_type);
  for (const NetworkFs& n : kNetworkFileSystems) {
    if (type == static_cast<uint32_t>(n.magic)) return n.name;
  }
  return "";
}

StatusOr<std::string> move_aside(const std::string& path, const std::string& tag) {
  const std::string base = path + "." + tag + "-" + std::to_string(static_cast<int64_t>(std::time(nullptr)));
  std::string target = base;
  for (int n = 2; exists(target) || exists(target + "-wal") || exists(target + "-journal"); ++n) {
    target = base + "-" + std::to_string(n);
  }
  for (const char* suffix : {"-wal", "-journal", "-shm"}) {
    const std::string from = path + suffix;
    if (!exists(from)) continue;
    if (::rename(from.c_str(), (target + suffix).c_str()) != 0)
      return io_error("cannot move '" + from + "' aside to '" + target + suffix + "'", errno);
  }
  if (::rename(path.c_str(), target.c_str()) != 0)
    return io_error("cannot move '" + path + "' aside to '" + target + "'", errno);
  return target;
}

OpenLock::OpenLock(const std::string& db_path, int wait_ms) {
  const std::string lock_path = db_path + ".lock";
  int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if ((errno != EWOULDBLOCK && errno != EINTR) || std::chrono::steady_clock::now() >= deadline) {
      ::close(fd);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  fd_ = fd;
}

OpenLock::~OpenLock() { release(); }

OpenLock& OpenLock::operator=(OpenLock&& other) noexcept {
  if (this != &other) {
    release();
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

void OpenLock::release() {
  if (fd_ < 0) return;
  ::flock(fd_, LOCK_UN);
  ::close(fd_);
  fd_ = -1;
}

}  // namespace convplan::detail
