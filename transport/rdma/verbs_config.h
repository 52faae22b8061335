// The pure decisions of the verbs fabric, kept apart from any verbs call so that tests can feed
// them made-up devices, GID tables and peers:
//   (a) HcaSpec      which (device, port) RINGFOLD_IB_HCA / NCCL_IB_HCA allows, NCCL's syntax:
//                    a comma list of name[:port]; a leading '^' excludes the listed ones, a
//                    leading '=' (after any '^') compares names exactly instead of by prefix; an
//                    entry without a port matches every port. Empty: everything is allowed.
//   (b) selectGid    the GID index to source RoCE traffic from (rules above the function)
//   (c) qpAttributes the numbers of each QP transition, from the local port, the peer's address
//                    and the tunables; fillQpAttr() writes one step into an ibv_qp_attr + mask
//   (d) PeerAddress  what localAddress(peer) publishes: the QPs one rank made for another,
//                    encoded with a magic, a version and exact lengths; decoding never trusts
//                    its input (InvalidArgument on anything malformed)
#pragma once

#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

struct ibv_qp_attr;

namespace ringfold::transport::rdma::verbs {

// The values of IBV_LINK_LAYER_*.
enum class LinkLayer : uint8_t { kUnspecified = 0, kInfiniBand = 1, kEthernet = 2 };
const char* linkLayerName(LinkLayer layer);  // "InfiniBand", "Ethernet", "unspecified"

// ---- (a) RINGFOLD_IB_HCA ----------------------------------------------------------------------
struct HcaSpec {
  struct Entry {
    std::string name;
    int port = -1;  // -1: any port
  };
  bool exclude = false;
  bool exact = false;
  std::vector<Entry> entries;
  std::string text;  // as given, for messages

  // Throws InvalidArgument naming `variable` when a port is not a number in 1..255.
  static HcaSpec parse(const std::string& text, const std::string& variable = "RINGFOLD_IB_HCA");
  // From params::kIbHca (or its alias NCCL_IB_HCA).
  static HcaSpec fromEnv();
  bool allows(const std::string& device, int port) const;
};

// ---- (b) GID selection ------------------------------------------------------------------------
using Gid = std::array<uint8_t, 16>;
enum class GidType : uint8_t { kUnknown = 0, kIb, kRoceV1, kRoceV2 };
const char* gidTypeName(GidType type);  // "IB", "RoCE v1", "RoCE v2", "unknown"
// sysfs gid_attrs/types text ("IB/RoCE v1", "RoCE v2") -> type; anything else kUnknown.
GidType gidTypeFromText(const std::string& text);

struct GidEntry {
  Gid raw{};
  GidType type = GidType::kUnknown;
};

bool gidIsZero(const Gid& gid);        // all zero, or fe80:: with a zero interface id (unset)
bool gidIsLinkLocal(const Gid& gid);   // fe80::/10
bool gidIsIpv4Mapped(const Gid& gid);  // ::ffff:a.b.c.d
std::string gidText(const Gid& gid);   // "::ffff:10.0.0.5", "fe80::1"

struct GidPolicy {
  int index = -1;              // RINGFOLD_IB_GID_INDEX (>= 0: use it, on any link layer)
  int roceVersion = 2;         // RINGFOLD_IB_ROCE_VERSION_NUM: 1 or 2
  int family = AF_INET;        // RINGFOLD_IB_ADDR_FAMILY: AF_INET or AF_INET6
  static GidPolicy fromEnv();  // throws InvalidArgument naming a bad variable
};

struct GidChoice {
  int index = 0;
  bool preferred = true;  // false: a fallback (the fabric logs `note` as a warning)
  std::string note;       // how it was chosen
};

// The rules: an explicit index is used as given (InvalidArgument when it is past the table or its
// GID is empty). InfiniBand: index 0. Ethernet (RoCE): the lowest index of the first class that
// has one:
//   1. routable (not zero, not fe80::/10), of the policy's family and RoCE version
//   2. routable, of the family, type unknown (neither _ibv_query_gid_ex nor sysfs told it)
//   3. routable, of the family, the other RoCE version
//   4. routable, the other family, the policy's version (or unknown)
//   5. routable, anything
//   6. link-local of the policy's version (or unknown): reaches one L2 segment only
//   7. any non-zero GID
// Classes 3-7 are fallbacks (preferred = false). No non-zero GID at all throws Error naming
// `where` ("mlx5_0:1 has no GID configured: does its netdev have an IP address?").
GidChoice selectGid(LinkLayer layer, const std::vector<GidEntry>& table, const GidPolicy& policy,
                    const std::string& where);

// ---- (d) addresses ----------------------------------------------------------------------------
struct QpAddress {
  uint32_t qpNum = 0;  // 24 bits
  uint32_t psn = 0;    // 24 bits
  uint16_t lid = 0;    // InfiniBand
  Gid gid{};           // RoCE (and InfiniBand when routed)
  uint8_t port = 0;
  uint8_t mtu = 0;  // enum ibv_mtu: 1 (256) .. 5 (4096)
  LinkLayer linkLayer = LinkLayer::kUnspecified;
};

struct PeerAddress {
  uint32_t fromRank = 0;       // who made these QPs
  uint32_t toRank = 0;         // for whom
  std::vector<QpAddress> qps;  // one per lane, 1..kMaxLanes
};

constexpr int kMaxLanes = 16;
constexpr uint8_t kAddressVersion = 1;

// Encoding (little-endian): "RFQP", version u8, count u8, 2 zero bytes, fromRank u32, toRank u32,
// then per QP 32 bytes: qpNum u32, psn u32, lid u16, port u8, mtu u8, linkLayer u8, 3 zero
// bytes, gid[16].
std::string encodeAddress(const PeerAddress& address);
PeerAddress decodeAddress(const std::string& bytes);  // InvalidArgument saying what is wrong

// ---- (c) QP attributes ------------------------------------------------------------------------
struct LocalPort {
  LinkLayer linkLayer = LinkLayer::kUnspecified;
  uint8_t port = 1;
  uint16_t lid = 0;
  uint8_t activeMtu = 0;  // enum ibv_mtu
  int gidIndex = 0;
  Gid gid{};
  bool grhRequired = false;  // IBV_QPF_GRH_REQUIRED in the port's flags
};

struct QpParams {
  uint8_t timeout = 20;      // RINGFOLD_IB_TIMEOUT (0..31)
  uint8_t retryCnt = 7;      // RINGFOLD_IB_RETRY_CNT (0..7)
  uint8_t rnrRetry = 7;      // 7: retry forever while the peer has no receive posted
  uint8_t minRnrTimer = 12;  // 0.64 ms
  uint8_t trafficClass = 0;  // RINGFOLD_IB_TC
  uint8_t serviceLevel = 0;  // RINGFOLD_IB_SL (0..15)
  uint8_t hopLimit = 255;
  uint8_t maxRdAtomic = 1;
  static QpParams fromEnv();  // throws InvalidArgument naming a value out of range
};

struct QpAttributes {
  // RESET -> INIT
  uint16_t pkeyIndex = 0;
  uint8_t port = 1;
  int accessFlags = 0;  // LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ
  // INIT -> RTR
  uint8_t pathMtu = 0;  // min(local active MTU, peer's)
  uint32_t destQpNum = 0;
  uint32_t rqPsn = 0;
  uint8_t maxDestRdAtomic = 1;
  uint8_t minRnrTimer = 12;
  bool isGlobal = false;  // RoCE always; InfiniBand when the port needs a GRH or subnets differ
  Gid dgid{};
  uint8_t sgidIndex = 0;
  uint8_t trafficClass = 0;
  uint8_t hopLimit = 0;
  uint16_t dlid = 0;
  uint8_t serviceLevel = 0;
  // RTR -> RTS
  uint8_t timeout = 20;
  uint8_t retryCnt = 7;
  uint8_t rnrRetry = 7;
  uint32_t sqPsn = 0;
  uint8_t maxRdAtomic = 1;
};

// Throws InvalidArgument when the peer cannot be reached from this port (other link layer, an
// InfiniBand peer without a LID, a RoCE peer without a GID, an MTU out of range).
QpAttributes qpAttributes(const LocalPort& local, uint32_t localPsn, const QpAddress& peer, const QpParams& params);

enum class QpStep { kInit, kRtr, kRts };
// Zeroes `out`, writes the fields of `step`, returns the attribute mask for ibv_modify_qp.
int fillQpAttr(const QpAttributes& attributes, QpStep step, ibv_qp_attr& out);

}  // namespace ringfold::transport::rdma::verbs
