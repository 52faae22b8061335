#include "rendezvous/file_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <openssl/sha.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <thread>
#include <utility>

#include "common/error.h"
#include "common/params.h"
#include "rendezvous/deadline.h"

namespace ringfold::rendezvous {
namespace {

constexpr size_t kMaxEscapedName = 200;  // file names are limited to 255 bytes

void mkdirs(const std::string& dir) {
  std::string partial;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    partial = dir.substr(0, pos);
    if (partial.empty()) continue;
    if (::mkdir(partial.c_str(), 0700) != 0 && errno != EEXIST) {
      RF_CHECK_ERRNO(-1, "FileStore cannot create directory '", partial, "'");
    }
  }
  struct stat st {};
  RF_CHECK_ERRNO(::stat(dir.c_str(), &st), "FileStore directory '", dir, "'");
  RF_ENFORCE(S_ISDIR(st.st_mode), "FileStore path '", dir, "' is not a directory");
}

// Reads a whole file; returns false if it does not exist.
bool readFile(const std::string& path, std::vector<uint8_t>& out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return false;
    RF_CHECK_ERRNO(-1, "FileStore cannot open '", path, "'");
  }
  out.clear();
  uint8_t buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int saved = errno;
      ::close(fd);
      errno = saved;
      RF_CHECK_ERRNO(-1, "FileStore cannot read '", path, "'");
    }
    if (n == 0) break;
    out.insert(out.end(), buf, buf + n);
  }
  ::close(fd);
  return true;
}

bool isHashedName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return path.compare(slash == std::string::npos ? 0 : slash + 1, 2, "h_") == 0;
}

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// The key of an escaped file name ("k_..."), or std::nullopt if it is not one.
std::optional<std::string> unescapeName(const std::string& name) {
  if (name.compare(0, 2, "k_") != 0) return std::nullopt;
  std::string key;
  for (size_t i = 2; i < name.size(); ++i) {
    if (name[i] != '%') {
      key += name[i];
      continue;
    }
    if (i + 2 >= name.size()) return std::nullopt;
    const int hi = hexValue(name[i + 1]), lo = hexValue(name[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    key += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return key;
}

}  // namespace

FileStore::FileStore(std::string dir) : dir_(std::move(dir)) {
  RF_ENFORCE(!dir_.empty(), "FileStore needs a directory");
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
  mkdirs(dir_);
}

std::string FileStore::pathOf(const std::string& key) const {
  static const char kHex[] = "0123456789abcdef";
  std::string name = "k_";
  for (unsigned char c : key) {
    if (std::isalnum(c) || c == '_' || c == '-' || c == '.') {
      name += static_cast<char>(c);
    } else {
      name += '%';
      name += kHex[c >> 4];
      name += kHex[c & 15];
    }
  }
  if (name.size() > kMaxEscapedName) {
    unsigned char digest[SHA256_DIGEST_LENGTH];
    SHA256(reinterpret_cast<const unsigned char*>(key.data()), key.size(), digest);
    name = "h_";
    for (unsigned char c : digest) {
      name += kHex[c >> 4];
      name += kHex[c & 15];
    }
  }
  return dir_ + "/" + name;
}

void FileStore::writeAtomically(const std::string& path, const std::vector<uint8_t>& value) {
  std::string tmpl = dir_ + "/.tmp.XXXXXX";
  int fd = ::mkostemp(tmpl.data(), O_CLOEXEC);
  RF_CHECK_ERRNO(fd, "FileStore cannot create a temporary file in '", dir_, "'");
  size_t done = 0;
  while (done < value.size()) {
    ssize_t n = ::write(fd, value.data() + done, value.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int saved = errno;
      ::close(fd);
      ::unlink(tmpl.c_str());
      errno = saved;
      RF_CHECK_ERRNO(-1, "FileStore cannot write '", tmpl, "'");
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  if (::rename(tmpl.c_str(), path.c_str()) != 0) {
    int saved = errno;
    ::unlink(tmpl.c_str());
    errno = saved;
    RF_CHECK_ERRNO(-1, "FileStore cannot rename '", tmpl, "' to '", path, "'");
  }
}

void FileStore::recordHashedKey(const std::string& key, const std::string& path) {
  if (!isHashedName(path)) return;
  const std::string keyPath = path + ".key";
  if (::access(keyPath.c_str(), F_OK) == 0) return;
  writeAtomically(keyPath, std::vector<uint8_t>(key.begin(), key.end()));
}

void FileStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  const std::string path = pathOf(key);
  recordHashedKey(key, path);
  writeAtomically(path, value);
}

std::vector<uint8_t> FileStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  const auto deadline = deadlineAfter(timeout);
  const std::string path = pathOf(key);
  auto sleep = std::chrono::microseconds(1000);
  std::vector<uint8_t> value;
  for (;;) {
    if (readFile(path, value)) return value;
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      RF_THROW(TimeoutError, "store key '", key, "' not set within ", timeout.count(),
               " ms (FileStore '", dir_, "')");
    }
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(sleep, deadline - now));
    sleep = std::min(sleep * 2, std::chrono::microseconds(20000));
  }
}

int FileStore::lockDirectory() {
  const std::string lockPath = dir_ + "/.lock";
  int fd = ::open(lockPath.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  RF_CHECK_ERRNO(fd, "FileStore cannot open lock file '", lockPath, "'");
  // flock locks belong to the open file description, so two threads of one process that each
  // opened the file exclude each other just as two processes do.
  int rc;
  do {
    rc = ::flock(fd, LOCK_EX);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    int saved = errno;
    ::close(fd);
    errno = saved;
    RF_CHECK_ERRNO(-1, "FileStore cannot lock '", lockPath, "'");
  }
  return fd;
}

int64_t FileStore::add(const std::string& key, int64_t delta) {
  const int fd = lockDirectory();
  int64_t value = 0;
  try {
    const std::string path = pathOf(key);
    recordHashedKey(key, path);
    std::vector<uint8_t> current;
    if (readFile(path, current)) {
      value = params::parseInt(std::string(current.begin(), current.end()),
                               "store counter '" + key + "'");
    }
    value += delta;
    std::string text = std::to_string(value);
    writeAtomically(path, std::vector<uint8_t>(text.begin(), text.end()));
  } catch (...) {
    ::close(fd);  // releases the lock
    throw;
  }
  ::close(fd);
  return value;
}

bool FileStore::check(const std::vector<std::string>& keys) {
  for (const auto& k : keys) {
    if (::access(pathOf(k).c_str(), F_OK) != 0) return false;
  }
  return true;
}

int64_t FileStore::deletePrefix(const std::string& prefix) {
  const int lockFd = lockDirectory();
  int64_t removed = 0;
  DIR* dir = nullptr;
  try {
    dir = ::opendir(dir_.c_str());
    if (dir == nullptr) RF_CHECK_ERRNO(-1, "FileStore cannot list '", dir_, "'");
    std::vector<std::string> doomed;  // file names; a hashed key's ".key" file goes with it
    while (dirent* entry = ::readdir(dir)) {
      const std::string name = entry->d_name;
      std::optional<std::string> key = unescapeName(name);
      if (!key && name.compare(0, 2, "h_") == 0 && !name.ends_with(".key")) {
        std::vector<uint8_t> text;
        if (readFile(dir_ + "/" + name + ".key", text)) key = std::string(text.begin(), text.end());
      }
      if (key && key->starts_with(prefix)) doomed.push_back(name);
    }
    ::closedir(dir);
    dir = nullptr;
    for (const std::string& name : doomed) {
      const std::string path = dir_ + "/" + name;
      if (::unlink(path.c_str()) == 0) {
        ++removed;
      } else if (errno != ENOENT) {
        RF_CHECK_ERRNO(-1, "FileStore cannot remove '", path, "'");
      }
      if (name.compare(0, 2, "h_") == 0) ::unlink((path + ".key").c_str());
    }
  } catch (...) {
    if (dir != nullptr) ::closedir(dir);
    ::close(lockFd);
    throw;
  }
  ::close(lockFd);
  return removed;
}

}  // namespace ringfold::rendezvous
