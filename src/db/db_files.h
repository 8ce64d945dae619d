// File-system helpers of the tuning database: its default path, private folders and files, the
// detection of network file systems, the lock that serializes opening between processes, and
// moving a damaged file aside. Internal to the db subsystem.
#pragma once

#include <string>

#include "convplan/status.h"

namespace convplan::detail {

// "off" and ":memory:" name no file: an in-memory database.
bool is_in_memory_path(const std::string& path);

// The folder that holds `file_path` ("." for a bare file name).
std::string parent_folder(const std::string& file_path);

// Creates every missing folder above `file_path`, each with mode 0700 whatever the umask.
// Folders that exist are left as they are. kIoError names the folder that could not be made.
Status make_private_folders(const std::string& file_path);

// Creates `path` as an empty file of mode 0600 (whatever the umask) when nothing exists there;
// an existing file is left untouched. Never follows a symbolic link (O_NOFOLLOW). SQLite gives its
// -wal, -shm and -journal files the mode of the database file, so they are private too.
Status create_private_file(const std::string& path);

// The name of the network file system `folder` lies on ("nfs", "cifs", "lustre", ...), or ""
// when it is local. CONVPLAN_DB_ASSUME_NETWORK_FS (a boolean, environment.h) true makes every
// folder count as network ("assumed (CONVPLAN_DB_ASSUME_NETWORK_FS)"), false as local; a
// malformed value is kInvalidArgument naming the variable.
StatusOr<std::string> network_file_system_name(const std::string& folder);

// The database settings the environment gives (checked all at once, so that a bad value is
// reported before anything is opened).
struct DbEnvironment {
  bool allow_shared_folder = false;  // CONVPLAN_DB_ALLOW_SHARED_FOLDER
};
StatusOr<DbEnvironment> db_environment();

// `path` with its folder made absolute and free of symbolic links (realpath of the folder, then
// the file name), so that the database, its -wal, -shm and -journal files, its lock and any
// copy moved aside all stay in one real folder, and a name such as "file:x?mode=memory" can
// never be taken for a SQLite URI. The folder must exist. kInvalidArgument for a path that ends
// in '/', "." or "..".
StatusOr<std::string> canonical_database_path(const std::string& path);

// Refuses (kInvalidArgument, saying how to opt in) a folder owned by another user (root
// excepted) or writable by its group or by others, where someone else could plant a link or a
// file under the database's names, unless `allow_shared`.
Status check_private_folder(const std::string& folder, bool allow_shared);

// Refuses (kInvalidArgument) a database, -wal, -shm, -journal or lock file that is a symbolic
// link or not a regular file (a journal redirected to /dev/null), and, unless `allow_shared`, a
// database file that another user owns.
Status check_database_files(const std::string& db_path, bool allow_shared);

// A warning for a database (or -wal, -shm) file that others may read or write ("" when it is
// private). convplan never widens a mode; it does not narrow one it did not create either.
std::string loose_mode_warning(const std::string& db_path);

// Whether this process may create files in `folder` (a read-only folder or file system: no).
bool folder_writable(const std::string& folder);

// Moves `path` to "<path>.<tag>-<unix time>" (with "-2", "-3"... when that is taken), its -wal,
// -journal and -shm files along with it (first, so that a crash in between can never pair a new
// database with an old log). Never deletes anything. Returns the new path of the main file.
StatusOr<std::string> move_aside(const std::string& path, const std::string& tag);

// An exclusive advisory lock (flock) on "<db path>.lock", held while one process opens, checks
// and repairs the database, so two processes never both move a file aside or both create a
// schema. Best effort: when the lock file cannot be made or the lock is not granted within
// `wait_ms`, the holder proceeds without it (held() is false). A lock file that is a symbolic
// link is never opened (O_NOFOLLOW; check_database_files refuses it first). Move-only.
class OpenLock {
 public:
  OpenLock(const std::string& db_path, int wait_ms);
  ~OpenLock();
  OpenLock(OpenLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  OpenLock& operator=(OpenLock&& other) noexcept;
  OpenLock(const OpenLock&) = delete;
  OpenLock& operator=(const OpenLock&) = delete;

  bool held() const { return fd_ >= 0; }

 private:
  void release();
  int fd_ = -1;
};

}  // namespace convplan::detail
