#include "db/db_files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <optional>
#include <string_view>
#include <thread>

#include "convplan/environment.h"

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
    {0x6969, "nfs"},        {0x517B, "smb"},        {0xFF534D42, "cifs"},  {0xFE534D42, "smb2"},
    {0x0BD00BD0, "lustre"}, {0x47504653, "gpfs"},   {0x01021997, "9p"},    {0x65735546, "fuse"},
    {0x00C36400, "ceph"},   {0x5346414F, "afs"},    {0x6B414653, "afs"},   {0x73757245, "coda"},
    {0x564C, "ncp"},        {0x19830326, "beegfs"}, {0xAAD7AAEA, "panfs"}, {0x20030528, "orangefs"},
    {0x01161970, "gfs2"},   {0x7461636F, "ocfs2"},
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
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
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

StatusOr<std::string> network_file_system_name(const std::string& folder) {
  const char* var = "CONVPLAN_DB_ASSUME_NETWORK_FS";
  if (std::optional<std::string_view> v = env_value(var)) {
    CONVPLAN_ASSIGN_OR_RETURN(bool network, parse_bool_value(var, *v));
    return network ? std::string("assumed (") + var + "=" + std::string(*v) + ")" : std::string();
  }
  struct statfs fs;
  if (::statfs(folder.c_str(), &fs) != 0) return std::string();
  // f_type's width and signedness differ between architectures; compare the low 32 bits.
  const uint32_t type = static_cast<uint32_t>(fs.f_type);
  for (const NetworkFs& n : kNetworkFileSystems) {
    if (type == static_cast<uint32_t>(n.magic)) return std::string(n.name);
  }
  return std::string();
}

StatusOr<DbEnvironment> db_environment() {
  DbEnvironment env;
  CONVPLAN_ASSIGN_OR_RETURN(env.allow_shared_folder,
                            env_bool("CONVPLAN_DB_ALLOW_SHARED_FOLDER", false));
  CONVPLAN_ASSIGN_OR_RETURN(std::string ignored, network_file_system_name("/"));
  (void)ignored;  // read only to check CONVPLAN_DB_ASSUME_NETWORK_FS early
  return env;
}

StatusOr<std::string> canonical_database_path(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  if (name.empty() || name == "." || name == "..") {
    return invalid_argument("tuning database path '" + path + "' names a folder, not a file");
  }
  const std::string folder = parent_folder(path);
  char* real = ::realpath(folder.c_str(), nullptr);
  if (real == nullptr) return io_error("tuning database folder '" + folder + "'", errno);
  std::string out = real;
  std::free(real);
  return (out == "/" ? out : out + "/") + name;
}

Status check_private_folder(const std::string& folder, bool allow_shared) {
  if (allow_shared) return ok_status();
  struct stat st;
  if (::stat(folder.c_str(), &st) != 0)
    return io_error("tuning database folder '" + folder + "'", errno);
  const char* opt_in =
      " (set CONVPLAN_DB_ALLOW_SHARED_FOLDER=1 or give --db-allow-shared-folder "
      "to use it anyway)";
  if (st.st_uid != ::geteuid() && st.st_uid != 0) {
    return invalid_argument("tuning database folder '" + folder +
                            "' belongs to another user (uid " + std::to_string(st.st_uid) +
                            "), who could replace its files" + opt_in);
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return invalid_argument("tuning database folder '" + folder + "' (mode " + mode +
                            ") is writable by other users, who could plant links under the "
                            "database's names" +
                            opt_in);
  }
  return ok_status();
}

Status check_database_files(const std::string& db_path, bool allow_shared) {
  for (const char* suffix : {"", "-wal", "-shm", "-journal", ".lock"}) {
    const std::string file = db_path + suffix;
    struct stat st;
    if (::lstat(file.c_str(), &st) != 0) continue;
    if (S_ISLNK(st.st_mode)) {
      return invalid_argument("'" + file + "' is a symbolic link; the tuning database and its " +
                              "companion files are never followed through links");
    }
    if (!S_ISREG(st.st_mode)) {
      return invalid_argument("'" + file + "' is not a regular file (a device, FIFO or folder)");
    }
    if (*suffix == '\0' && !allow_shared && st.st_uid != ::geteuid()) {
      return invalid_argument("tuning database '" + file + "' belongs to another user (uid " +
                              std::to_string(st.st_uid) +
                              "); set CONVPLAN_DB_ALLOW_SHARED_FOLDER=1 or give "
                              "--db-allow-shared-folder to use it anyway");
    }
  }
  return ok_status();
}

std::string loose_mode_warning(const std::string& db_path) {
  std::string loose;
  for (const char* suffix : {"", "-wal", "-shm"}) {
    struct stat st;
    if (::stat((db_path + suffix).c_str(), &st) != 0 || (st.st_mode & 077) == 0) continue;
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    loose += (loose.empty() ? "" : ", ") + ("'" + db_path + suffix + "' has mode " + mode);
  }
  if (loose.empty()) return loose;
  return loose +
         ": other users may read or change the tuning records (chmod 600 to make it "
         "private; convplan leaves modes as they are)";
}

bool folder_writable(const std::string& folder) { return ::access(folder.c_str(), W_OK) == 0; }

StatusOr<std::string> move_aside(const std::string& path, const std::string& tag) {
  const std::string base =
      path + "." + tag + "-" + std::to_string(static_cast<int64_t>(std::time(nullptr)));
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
  int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
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
