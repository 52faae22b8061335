#include "transport/rdma/verbs_config.h"

#include <arpa/inet.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include "common/error.h"
#include "common/params.h"

namespace ringfold::transport::rdma::verbs {
namespace {

// An integer tunable within [lo, hi]; the message names the variable that supplied it.
int rangedParam(const params::Param& param, int64_t lo, int64_t hi) {
  int64_t value = param.asInt();
  if (value < lo || value > hi) {
    auto source = param.lookup();
    RF_THROW(InvalidArgument, source ? source->second : std::string(param.name), "=", value, " is out of range (", lo,
             "..", hi, ")");
  }
  return static_cast<int>(value);
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

}  // namespace

const char* linkLayerName(LinkLayer layer) {
  switch (layer) {
    case LinkLayer::kInfiniBand: return "InfiniBand";
    case LinkLayer::kEthernet: return "Ethernet";
    default: return "unspecified";
  }
}

// ---- (a) -------------------------------------------------------------------------------------

HcaSpec HcaSpec::parse(const std::string& textIn, const std::string& variable) {
  HcaSpec spec;
  spec.text = textIn;
  std::string text = trim(textIn);
  if (!text.empty() && text[0] == '^') {
    spec.exclude = true;
    text.erase(0, 1);
  }
  if (!text.empty() && text[0] == '=') {
    spec.exact = true;
    text.erase(0, 1);
  }
  std::stringstream list(text);
  std::string item;
  while (std::getline(list, item, ',')) {
    item = trim(item);
    if (item.empty()) continue;
    Entry entry;
    size_t colon = item.find(':');
    entry.name = trim(item.substr(0, colon));
    if (entry.name.empty()) continue;  // ":1" names no device (NCCL skips it too)
    if (colon != std::string::npos) {
      // NCCL's further ":rail:plane" fields are accepted and ignored.
      std::string port = trim(item.substr(colon + 1, item.find(':', colon + 1) - colon - 1));
      if (!port.empty()) {
        char* end = nullptr;
        long value = std::strtol(port.c_str(), &end, 10);
        if (end == port.c_str() || *end != '\0' || value < 1 || value > 255) {
          RF_THROW(InvalidArgument, variable, "='", textIn, "': '", item,
                   "' has no valid port number (write name or name:port, port 1..255)");
        }
        entry.port = static_cast<int>(value);
      }
    }
    spec.entries.push_back(std::move(entry));
  }
  return spec;
}

HcaSpec HcaSpec::fromEnv() {
  auto source = params::kIbHca.lookup();
  if (!source) return HcaSpec{};
  return parse(source->first, source->second);
}

bool HcaSpec::allows(const std::string& device, int port) const {
  if (entries.empty()) return true;  // nothing listed (also "^" alone): every port
  bool listed = false;
  for (const Entry& e : entries) {
    bool nameMatches = exact ? device == e.name : device.compare(0, e.name.size(), e.name) == 0;
    if (nameMatches && (e.port == -1 || e.port == port)) {
      listed = true;
      break;
    }
  }
  return listed != exclude;
}

// ---- (b) -------------------------------------------------------------------------------------

const char* gidTypeName(GidType type) {
  switch (type) {
    case GidType::kIb: return "IB";
    case GidType::kRoceV1: return "RoCE v1";
    case GidType::kRoceV2: return "RoCE v2";
    default: return "unknown";
  }
}

GidType gidTypeFromText(const std::string& textIn) {
  std::string text = trim(textIn.substr(0, textIn.find('\n')));
  if (text == "IB/RoCE v1" || text == "RoCE v1") return GidType::kRoceV1;
  if (text == "RoCE v2") return GidType::kRoceV2;
  if (text == "IB") return GidType::kIb;
  return GidType::kUnknown;
}

bool gidIsZero(const Gid& g) {
  bool restZero = std::all_of(g.begin() + 2, g.end(), [](uint8_t b) { return b == 0; });
  return restZero && ((g[0] == 0 && g[1] == 0) || (g[0] == 0xfe && g[1] == 0x80));
}

bool gidIsLinkLocal(const Gid& g) { return g[0] == 0xfe && (g[1] & 0xc0) == 0x80; }

bool gidIsIpv4Mapped(const Gid& g) {
  return std::all_of(g.begin(), g.begin() + 10, [](uint8_t b) { return b == 0; }) && g[10] == 0xff && g[11] == 0xff;
}

std::string gidText(const Gid& g) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (inet_ntop(AF_INET6, g.data(), buf, sizeof(buf)) == nullptr) return "?";
  return buf;
}

GidPolicy GidPolicy::fromEnv() {
  GidPolicy p;
  p.index = rangedParam(params::kIbGidIndex, -1, 255);
  p.roceVersion = rangedParam(params::kIbRoceVersion, 1, 2);
  auto source = params::kIbAddrFamily.lookup();
  std::string family = source ? source->first : std::string(params::kIbAddrFamily.defaultValue);
  if (family == "AF_INET" || family == "ipv4" || family == "4") {
    p.family = AF_INET;
  } else if (family == "AF_INET6" || family == "ipv6" || family == "6") {
    p.family = AF_INET6;
  } else {
    RF_THROW(InvalidArgument, source ? source->second : std::string(params::kIbAddrFamily.name), "='", family,
             "' is not AF_INET or AF_INET6");
  }
  return p;
}

GidChoice selectGid(LinkLayer layer, const std::vector<GidEntry>& table, const GidPolicy& policy,
                    const std::string& where) {
  if (policy.index >= 0) {
    if (static_cast<size_t>(policy.index) >= table.size()) {
      RF_THROW(InvalidArgument, params::kIbGidIndex.name, "=", policy.index, " but ", where, " has ", table.size(),
               " GIDs");
    }
    if (gidIsZero(table[policy.index].raw)) {
      RF_THROW(InvalidArgument, params::kIbGidIndex.name, "=", policy.index, " but GID ", policy.index, " of ", where,
               " is empty");
    }
    return {policy.index, true,
            std::string("GID ") + std::to_string(policy.index) + " from " + params::kIbGidIndex.name};
  }
  if (layer != LinkLayer::kEthernet) return {0, true, "GID 0 (InfiniBand)"};

  const GidType wanted = policy.roceVersion == 1 ? GidType::kRoceV1 : GidType::kRoceV2;
  const bool wantV4 = policy.family != AF_INET6;
  auto classOf = [&](const GidEntry& e) -> int {  // 1..7 as documented, 0: unusable
    if (gidIsZero(e.raw)) return 0;
    bool routable = !gidIsLinkLocal(e.raw);
    bool family = gidIsIpv4Mapped(e.raw) == wantV4;
    bool version = e.type == wanted;
    bool unknown = e.type == GidType::kUnknown;
    if (routable && family && version) return 1;
    if (routable && family && unknown) return 2;
    if (routable && family) return 3;
    if (routable && (version || unknown)) return 4;
    if (routable) return 5;
    if (version || unknown) return 6;
    return 7;
  };
  int best = -1, bestClass = 8;
  for (size_t i = 0; i < table.size(); ++i) {
    int c = classOf(table[i]);
    if (c != 0 && c < bestClass) {
      best = static_cast<int>(i);
      bestClass = c;
    }
  }
  if (best < 0) {
    RF_THROW(Error, where, " has no GID configured (", table.size(),
             " entries, all empty): does its network interface have an IP address?");
  }
  const GidEntry& e = table[best];
  std::string what =
      std::string("GID ") + std::to_string(best) + " (" + gidTypeName(e.type) + ", " + gidText(e.raw) + ")";
  std::string wantedText = std::string(gidTypeName(wanted)) + (wantV4 ? " IPv4" : " IPv6");
  if (bestClass <= 2) return {best, true, what};
  return {best, false,
          where + " has no routable " + wantedText + " GID (" + params::kIbRoceVersion.name + ", " +
              params::kIbAddrFamily.name + "); using " + what +
              (bestClass >= 6 ? ", which is link-local: only peers on the same L2 segment are reachable" : "")};
}

// ---- (d) -------------------------------------------------------------------------------------

namespace {
constexpr char kMagic[4] = {'R', 'F', 'Q', 'P'};
constexpr size_t kHeaderBytes = 16;
constexpr size_t kQpBytes = 32;

void put(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}
uint64_t get(const std::string& in, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<uint8_t>(in[at + i])} << (8 * i);
  return v;
}
}  // namespace

std::string encodeAddress(const PeerAddress& a) {
  RF_ENFORCE(!a.qps.empty() && a.qps.size() <= static_cast<size_t>(kMaxLanes), "an address holds 1..", kMaxLanes,
             " QPs, not ", a.qps.size());
  std::string out(kMagic, sizeof(kMagic));
  put(out, kAddressVersion, 1);
  put(out, a.qps.size(), 1);
  put(out, 0, 2);
  put(out, a.fromRank, 4);
  put(out, a.toRank, 4);
  for (const QpAddress& q : a.qps) {
    put(out, q.qpNum, 4);
    put(out, q.psn, 4);
    put(out, q.lid, 2);
    put(out, q.port, 1);
    put(out, q.mtu, 1);
    put(out, static_cast<uint8_t>(q.linkLayer), 1);
    put(out, 0, 3);
    out.append(reinterpret_cast<const char*>(q.gid.data()), q.gid.size());
  }
  return out;
}

PeerAddress decodeAddress(const std::string& in) {
  auto bad = [&](const std::string& why) {
    RF_THROW(InvalidArgument, "malformed verbs address (", in.size(), " bytes): ", why);
  };
  if (in.size() < kHeaderBytes) bad("shorter than its 16-byte header");
  if (std::memcmp(in.data(), kMagic, sizeof(kMagic)) != 0) bad("no RFQP magic (not a verbs fabric's address)");
  unsigned version = static_cast<unsigned>(get(in, 4, 1));
  if (version != kAddressVersion) {
    bad("version " + std::to_string(version) + ", this build reads version " + std::to_string(kAddressVersion) +
        " (ranks from different ringfold builds?)");
  }
  size_t count = get(in, 5, 1);
  if (count < 1 || count > static_cast<size_t>(kMaxLanes)) bad(std::to_string(count) + " QPs (1..16 allowed)");
  if (get(in, 6, 2) != 0) bad("reserved header bytes are not zero");
  if (in.size() != kHeaderBytes + count * kQpBytes) {
    bad(std::to_string(count) + " QPs need " + std::to_string(kHeaderBytes + count * kQpBytes) + " bytes");
  }
  PeerAddress a;
  a.fromRank = static_cast<uint32_t>(get(in, 8, 4));
  a.toRank = static_cast<uint32_t>(get(in, 12, 4));
  for (size_t i = 0; i < count; ++i) {
    size_t at = kHeaderBytes + i * kQpBytes;
    QpAddress q;
    q.qpNum = static_cast<uint32_t>(get(in, at, 4));
    q.psn = static_cast<uint32_t>(get(in, at + 4, 4));
    q.lid = static_cast<uint16_t>(get(in, at + 8, 2));
    q.port = static_cast<uint8_t>(get(in, at + 10, 1));
    q.mtu = static_cast<uint8_t>(get(in, at + 11, 1));
    uint8_t layer = static_cast<uint8_t>(get(in, at + 12, 1));
    std::string which = "QP " + std::to_string(i) + ": ";
    if (get(in, at + 13, 3) != 0) bad(which + "reserved bytes are not zero");
    if (q.qpNum > 0xffffff || q.qpNum == 0) bad(which + "QP number " + std::to_string(q.qpNum) + " is not 1..2^24-1");
    if (q.psn > 0xffffff) bad(which + "PSN " + std::to_string(q.psn) + " has more than 24 bits");
    if (q.port == 0) bad(which + "port 0");
    if (q.mtu < IBV_MTU_256 || q.mtu > IBV_MTU_4096) bad(which + "MTU code " + std::to_string(q.mtu) + " is not 1..5");
    if (layer != static_cast<uint8_t>(LinkLayer::kInfiniBand) && layer != static_cast<uint8_t>(LinkLayer::kEthernet)) {
      bad(which + "link layer " + std::to_string(layer) + " is neither InfiniBand (1) nor Ethernet (2)");
    }
    q.linkLayer = static_cast<LinkLayer>(layer);
    std::memcpy(q.gid.data(), in.data() + at + 16, q.gid.size());
    a.qps.push_back(q);
  }
  return a;
}

// ---- (c) -------------------------------------------------------------------------------------

QpParams QpParams::fromEnv() {
  QpParams p;
  p.timeout = static_cast<uint8_t>(rangedParam(params::kIbTimeout, 0, 31));
  p.retryCnt = static_cast<uint8_t>(rangedParam(params::kIbRetryCnt, 0, 7));
  p.trafficClass = static_cast<uint8_t>(rangedParam(params::kIbTc, 0, 255));
  p.serviceLevel = static_cast<uint8_t>(rangedParam(params::kIbSl, 0, 15));
  return p;
}

QpAttributes qpAttributes(const LocalPort& local, uint32_t localPsn, const QpAddress& peer, const QpParams& params) {
  if (peer.linkLayer != local.linkLayer) {
    RF_THROW(InvalidArgument, "the peer's port is ", linkLayerName(peer.linkLayer), ", this rank's ",
             linkLayerName(local.linkLayer), ": RC queue pairs cannot join them (choose ports with ",
             params::kIbHca.name, ")");
  }
  if (peer.mtu < IBV_MTU_256 || peer.mtu > IBV_MTU_4096) {
    RF_THROW(InvalidArgument, "the peer's MTU code ", int{peer.mtu}, " is not 1..5");
  }
  QpAttributes a;
  a.port = local.port;
  a.accessFlags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  uint8_t localMtu =
      local.activeMtu >= IBV_MTU_256 && local.activeMtu <= IBV_MTU_4096 ? local.activeMtu : uint8_t{IBV_MTU_1024};
  a.pathMtu = std::min(localMtu, peer.mtu);
  a.destQpNum = peer.qpNum;
  a.rqPsn = peer.psn & 0xffffff;
  a.maxDestRdAtomic = params.maxRdAtomic;
  a.minRnrTimer = params.minRnrTimer;
  a.serviceLevel = params.serviceLevel;
  if (local.linkLayer == LinkLayer::kEthernet) {
    if (gidIsZero(peer.gid)) RF_THROW(InvalidArgument, "the peer (RoCE) published an empty GID");
    a.isGlobal = true;
  } else {
    if (peer.lid == 0) {
      RF_THROW(InvalidArgument, "the peer's InfiniBand port has no LID (is a subnet manager running?)");
    }
    a.dlid = peer.lid;
    // Different subnet prefixes (the first 8 bytes of the GIDs) need a GRH to be routed.
    bool otherSubnet = !gidIsZero(peer.gid) && !gidIsZero(local.gid) &&
                       !std::equal(peer.gid.begin(), peer.gid.begin() + 8, local.gid.begin());
    a.isGlobal = local.grhRequired || otherSubnet;
  }
  if (a.isGlobal) {
    a.dgid = peer.gid;
    a.sgidIndex = static_cast<uint8_t>(local.gidIndex);
    a.trafficClass = params.trafficClass;
    a.hopLimit = params.hopLimit;
  }
  a.timeout = params.timeout;
  a.retryCnt = params.retryCnt;
  a.rnrRetry = params.rnrRetry;
  a.sqPsn = localPsn & 0xffffff;
  a.maxRdAtomic = params.maxRdAtomic;
  return a;
}

int fillQpAttr(const QpAttributes& a, QpStep step, ibv_qp_attr& out) {
  std::memset(&out, 0, sizeof(out));
  switch (step) {
    case QpStep::kInit:
      out.qp_state = IBV_QPS_INIT;
      out.pkey_index = a.pkeyIndex;
      out.port_num = a.port;
      out.qp_access_flags = static_cast<unsigned>(a.accessFlags);
      return IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
    case QpStep::kRtr:
      out.qp_state = IBV_QPS_RTR;
      out.path_mtu = static_cast<ibv_mtu>(a.pathMtu);
      out.dest_qp_num = a.destQpNum;
      out.rq_psn = a.rqPsn;
      out.max_dest_rd_atomic = a.maxDestRdAtomic;
      out.min_rnr_timer = a.minRnrTimer;
      out.ah_attr.is_global = a.isGlobal ? 1 : 0;
      out.ah_attr.dlid = a.dlid;
      out.ah_attr.sl = a.serviceLevel;
      out.ah_attr.src_path_bits = 0;
      out.ah_attr.port_num = a.port;
      if (a.isGlobal) {
        std::memcpy(out.ah_attr.grh.dgid.raw, a.dgid.data(), a.dgid.size());
        out.ah_attr.grh.flow_label = 0;
        out.ah_attr.grh.sgid_index = a.sgidIndex;
        out.ah_attr.grh.hop_limit = a.hopLimit;
        out.ah_attr.grh.traffic_class = a.trafficClass;
      }
      return IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
             IBV_QP_MIN_RNR_TIMER;
    case QpStep::kRts:
      out.qp_state = IBV_QPS_RTS;
      out.timeout = a.timeout;
      out.retry_cnt = a.retryCnt;
      out.rnr_retry = a.rnrRetry;
      out.sq_psn = a.sqPsn;
      out.max_rd_atomic = a.maxRdAtomic;
      return IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
             IBV_QP_MAX_QP_RD_ATOMIC;
  }
  return 0;
}

}  // namespace ringfold::transport::rdma::verbs
