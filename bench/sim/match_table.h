// MatchTable: one receiving rank's unpaired messages or receives per nonzero 64-bit key
// ((sender, phase, sub) in world.h), each key a FIFO of ids threaded through the records. An
// open-addressing table (linear probing, backward-shift deletion): a rank has only its windows'
// worth of keys live at once, and thousands of ranks each touch theirs for every message, so a
// small flat array beats a node-based map by a wide margin (measured on 4,096 ranks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ringfold::sim {

class MatchTable {
 public:
  // 16 bytes, four to a cache line. The FIFO holds messages when `head` and `tail` are message
  // ids, receives otherwise (Entry::messages).
  struct Entry {
    uint64_t key = 0;  // 0: empty; bit 63: the FIFO holds messages
    int32_t head = -1, tail = -1;
  };
  static constexpr uint64_t kMessages = uint64_t{1} << 63;

  static bool messages(const Entry& e) { return (e.key & kMessages) != 0; }
  static void setMessages(Entry& e, bool m) { e.key = m ? e.key | kMessages : e.key & ~kMessages; }

  // The entry of `key` (nonzero, bit 63 clear), or null.
  Entry* find(uint64_t key) {
    if (used_ == 0) return nullptr;
    for (size_t i = home(key);; i = (i + 1) & mask()) {
      if ((slots_[i].key & ~kMessages) == key) return &slots_[i];
      if (slots_[i].key == 0) return nullptr;
    }
  }
  // A new empty entry for `key`, which find() did not find.
  Entry& insert(uint64_t key) {
    if ((used_ + 1) * 2 > slots_.size()) grow();
    size_t i = home(key);
    while (slots_[i].key != 0) i = (i + 1) & mask();
    slots_[i] = Entry{key, -1, -1};
    ++used_;
    return slots_[i];
  }
  // Removes `e` (from find or insert).
  void erase(Entry* e) {
    size_t hole = static_cast<size_t>(e - slots_.data());
    slots_[hole].key = 0;
    --used_;
    for (size_t i = (hole + 1) & mask(); slots_[i].key != 0; i = (i + 1) & mask()) {
      const size_t h = home(slots_[i].key & ~kMessages);
      // Move i into the hole unless its home lies cyclically in (hole, i].
      const bool stays = hole <= i ? (h > hole && h <= i) : (h > hole || h <= i);
      if (stays) continue;
      slots_[hole] = slots_[i];
      slots_[i].key = 0;
      hole = i;
    }
  }
  size_t size() const { return used_; }
  template <typename Fn>
  void forEach(Fn&& fn) const {
    for (const Entry& e : slots_) {
      if (e.key != 0) fn(e);
    }
  }

 private:
  size_t mask() const { return slots_.size() - 1; }
  size_t home(uint64_t key) const { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 32) & mask(); }
  void grow() {
    std::vector<Entry> old;
    old.swap(slots_);
    slots_.assign(old.empty() ? 16 : old.size() * 2, Entry{});
    used_ = 0;
    for (const Entry& e : old) {
      if (e.key != 0) insert(e.key & ~kMessages) = e;
    }
  }
  std::vector<Entry> slots_;
  size_t used_ = 0;
};

}  // namespace ringfold::sim
