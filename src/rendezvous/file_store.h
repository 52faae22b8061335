// FileStore: a Store in a directory shared by processes of one machine (or a shared file
// system with working flock and atomic rename).
//
// Contract
//   * Each key is one file; set() writes a temporary file and renames it into place, so a reader
//     sees either the old value or the new one, never a torn write.
//   * get() polls for the file with short sleeps (1 ms growing to 20 ms) until the timeout,
//     then throws TimeoutError naming the key.
//   * add() holds an exclusive flock on `<dir>/.lock` for its read-modify-write, so concurrent
//     add()s from any number of threads and processes never lose an increment.
//   * Keys may hold any bytes: they are escaped into file names ('%XX'); keys whose escaped
//     form is long are named by their SHA-256 instead, with the key itself beside it in
//     "<that name>.key" (so that deletePrefix can tell which prefix such a file is under).
//   * deletePrefix() holds the same lock as add() while it lists the directory and unlinks the
//     files of the keys under the prefix (hashed files written before the ".key" files existed
//     cannot be matched and are left).
// The directory is created if missing; it is not removed (the caller owns its lifetime).
#pragma once

#include <string>

#include "rendezvous/store.h"

namespace ringfold::rendezvous {

class FileStore : public Store {
 public:
  explicit FileStore(std::string dir);

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  int64_t deletePrefix(const std::string& prefix) override;
  std::string describe() const override { return "the file store in '" + dir_ + "'"; }

  const std::string& dir() const { return dir_; }

 private:
  std::string pathOf(const std::string& key) const;
  void writeAtomically(const std::string& path, const std::vector<uint8_t>& value);
  // Writes `key` beside a hashed key's file (once), so that deletePrefix can match it.
  void recordHashedKey(const std::string& key, const std::string& path);
  // Opens and flocks "<dir>/.lock"; returns the descriptor (closing it releases the lock).
  int lockDirectory();

  std::string dir_;
};

}  // namespace ringfold::rendezvous
