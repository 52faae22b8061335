#include "rendezvous/file_store.h"

#include <fcntl.h>
#include <openssl/sha.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
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

void FileStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  writeAtomically(pathOf(key), value);
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

int64_t FileStore::add(const std::string& key, int64_t delta) {
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
  int64_t value = 0;
  try {
    const std::string path = pathOf(key);
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

}  // namespace ringfold::rendezvous
