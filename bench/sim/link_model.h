// LinkModel: the constants the simulator (simulator.h) times messages, folds and CPU work with.
// All in seconds or seconds per byte.
//
//   o            : CPU time per message on the sender (posting the send) and again on the
//                  receiver (completing the receive); both on that rank's one CPU timeline,
//                  where folds also run, so a busy rank handles its messages late.
//   gamma        : CPU time per byte per reduce pass (a unit folding k receives: k gamma bytes).
//   copy         : CPU time per byte to copy a message that arrived before its receive was
//                  posted out of the transport's buffer (an "unexpected" message).
//   alpha_local, beta_local   : a message to a rank on the same host: serialized on the sending
//                  rank's own link (bytes x beta_local), then alpha_local to arrive.
//   alpha_remote, beta_remote : a message to another host: serialized on the sender host's NIC
//                  egress (shared by that host's ranks, FIFO), alpha_remote on the wire, then
//                  through the receiving host's NIC ingress (shared, FIFO), cut through: the
//                  ingress starts on a message when its first byte arrives (see network.h).
//   cpus         : 0 (the default): every rank has a CPU of its own. k > 0: every rank's CPU
//                  work (o, folds, copies) runs on a pool of k CPUs the whole job shares, as on
//                  the emulated cluster, where every namespace runs on one machine: ranks that
//                  want CPU at once wait for one. A whole number.
//
// Text form (a --model file, and what rf_sim prints): one `key = value` per line, or several
// `key=value` separated by spaces; `#` starts a comment. Keys are the names above.
#pragma once

#include <string>

namespace ringfold::sim {

struct LinkModel {
  double o = 1e-6;
  double gamma = 1e-10;          // 10 GB/s per reduce pass
  double copy = 1e-10;           // 10 GB/s memcpy
  double alphaLocal = 1e-6;
  double betaLocal = 5e-11;      // 20 GB/s shared memory
  double alphaRemote = 5e-6;
  double betaRemote = 8e-11;     // 100 Gb/s
  double cpus = 0;               // shared CPUs (0: one per rank)

  // Sets the constant named `key` (the text form's names); throws InvalidArgument naming
  // `origin` when the key is unknown or the value is not a number >= 0.
  void set(const std::string& key, const std::string& value, const std::string& origin);
  // Reads the text form (see above) from `text`; keys not given keep their value.
  void parse(const std::string& text, const std::string& origin);
  // Reads the text form from the file at `path`; throws InvalidArgument if it cannot be read.
  void load(const std::string& path);
  // "o=1e-06 gamma=1e-10 copy=1e-10 alpha_local=... beta_remote=8e-11" (parse() reads it back).
  std::string text() const;
};

// The names set() accepts, in text() order.
const char* const* linkModelKeys();

}  // namespace ringfold::sim
