#include "bench/sim/network.h"

#include <algorithm>

#include "common/error.h"

namespace ringfold::sim {

Network::Network(const LinkModel& model, int ranks, int perHost)
    : m_(model), perHost_(perHost), localFree_(ranks, 0.0) {
  RF_ENFORCE(ranks >= 1 && perHost >= 1, "a network needs ranks and ranks per host, not ", ranks, " and ", perHost);
  const int hosts = (ranks + perHost - 1) / perHost;
  egressFree_.assign(hosts, 0.0);
  ingressFree_.assign(hosts, 0.0);
}

Network::Posted Network::post(double now, int from, int to, size_t bytes) {
  Posted p;
  const double b = static_cast<double>(bytes);
  if (sameHost(from, to)) {
    const double start = std::max(now, localFree_[from]);
    p.sendDone = start + b * m_.betaLocal;
    localFree_[from] = p.sendDone;
    p.arrival = p.sendDone + m_.alphaLocal;
    return p;
  }
  double& egress = egressFree_[host(from)];
  const double start = std::max(now, egress);
  p.sendDone = start + b * m_.betaRemote;
  egress = p.sendDone;
  p.firstByte = start + m_.alphaRemote;
  p.lastByte = p.sendDone + m_.alphaRemote;
  return p;
}

double Network::ingress(double now, int to, size_t bytes, double lastByte) {
  double& free = ingressFree_[host(to)];
  const double start = std::max(now, free);
  const double done = std::max(start + static_cast<double>(bytes) * m_.betaRemote, lastByte);
  free = done;
  return done;
}

}  // namespace ringfold::sim
