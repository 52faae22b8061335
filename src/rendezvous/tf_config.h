// TF_CONFIG: TensorFlow's cluster description (JSON), as Azure ML's TensorFlow jobs and
// tf.distribute set it, read by the bootstrap's "tf_config" source (bootstrap.h) when no other
// launcher's variables are present.
//
// Contract: parseTfConfig reads {"cluster": {"chief"|"master": [...], "worker": [...], ...},
// "task": {"type": ..., "index": ...}}. The training tasks are the chief (or master, at most
// one) then the workers, in list order, each "host:port"; this task's rank is its place among
// them. "ps" and "evaluator" tasks are not ranks. Anything malformed (not JSON, a missing or
// mistyped field, a task the cluster does not list) throws InvalidArgument naming TF_CONFIG and
// what is wrong (for bad JSON, the byte offset).
#pragma once

#include <string>
#include <vector>

namespace ringfold::rendezvous::detail {

struct TfConfig {
  std::vector<std::string> tasks;  // "host:port", chief first
  int rank = -1;
  std::string cluster;  // a canonical text of the cluster, the same on every task (for the derived secret)
};

TfConfig parseTfConfig(const std::string& json);

}  // namespace ringfold::rendezvous::detail
