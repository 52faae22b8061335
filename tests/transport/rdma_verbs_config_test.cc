// The pure parts of the verbs fabric (transport/rdma/verbs_config.h): RINGFOLD_IB_HCA lists, GID
// selection over canned GID tables, the QP transition attributes, the address wire form; and
// the fabric's answers where it cannot run (no library, a library without the symbols, no
// device).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <sys/socket.h>

#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "transport/rdma/fabric_verbs.h"
#include "transport/rdma/verbs_config.h"

namespace ringfold::transport::rdma::verbs {
namespace {

// Clears every variable these tests read, sets the given ones, restores all on destruction.
class Env {
 public:
  Env(std::initializer_list<std::pair<const char*, const char*>> set = {}) {
    for (const char* name :
         {"RINGFOLD_IB_HCA", "NCCL_IB_HCA", "RINGFOLD_IB_GID_INDEX", "NCCL_IB_GID_INDEX",
          "RINGFOLD_IB_ROCE_VERSION_NUM", "NCCL_IB_ROCE_VERSION_NUM", "RINGFOLD_IB_ADDR_FAMILY", "NCCL_IB_ADDR_FAMILY",
          "RINGFOLD_IB_TC", "NCCL_IB_TC", "RINGFOLD_IB_SL", "NCCL_IB_SL", "RINGFOLD_IB_TIMEOUT", "NCCL_IB_TIMEOUT",
          "RINGFOLD_IB_RETRY_CNT", "NCCL_IB_RETRY_CNT", "RINGFOLD_IB_QPS_PER_CONNECTION", "NCCL_IB_QPS_PER_CONNECTION",
          "RINGFOLD_IBVERBS_LIBRARY"}) {
      const char* old = getenv(name);
      saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
      unsetenv(name);
    }
    for (auto& [name, value] : set) setenv(name, value, 1);
  }
  ~Env() {
    for (auto& [name, value] : saved_) {
      if (value) {
        setenv(name.c_str(), value->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

Gid gidOf(const char* text) {
  Gid g{};
  EXPECT_EQ(inet_pton(AF_INET6, text, g.data()), 1) << text;
  return g;
}

GidEntry entry(const char* text, GidType type) { return GidEntry{gidOf(text), type}; }

std::string errorOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// ---- (a) HCA lists -------------------------------------------------------------------------------

TEST(VerbsHcaSpec, EmptyAllowsEveryPort) {
  HcaSpec spec = HcaSpec::parse("");
  EXPECT_TRUE(spec.allows("mlx5_0", 1));
  EXPECT_TRUE(spec.allows("rxe0", 2));
}

TEST(VerbsHcaSpec, PrefixMatchesByDefault) {
  HcaSpec spec = HcaSpec::parse("mlx5");
  EXPECT_FALSE(spec.exclude);
  EXPECT_FALSE(spec.exact);
  EXPECT_TRUE(spec.allows("mlx5_0", 1));
  EXPECT_TRUE(spec.allows("mlx5_1", 2));
  EXPECT_FALSE(spec.allows("mlx4_0", 1));
  // A prefix also matches longer names that start with it, as in NCCL.
  EXPECT_TRUE(HcaSpec::parse("mlx5_1").allows("mlx5_10", 1));
}

TEST(VerbsHcaSpec, PortsNarrowAnEntry) {
  HcaSpec spec = HcaSpec::parse("mlx5_0:1, mlx5_1:2");
  ASSERT_EQ(spec.entries.size(), 2u);
  EXPECT_EQ(spec.entries[0].name, "mlx5_0");
  EXPECT_EQ(spec.entries[0].port, 1);
  EXPECT_EQ(spec.entries[1].port, 2);
  EXPECT_TRUE(spec.allows("mlx5_0", 1));
  EXPECT_FALSE(spec.allows("mlx5_0", 2));
  EXPECT_TRUE(spec.allows("mlx5_1", 2));
  EXPECT_FALSE(spec.allows("mlx5_1", 1));
  EXPECT_FALSE(spec.allows("mlx5_2", 1));
  // An empty port means every port; NCCL's extra ":rail:plane" fields are ignored.
  EXPECT_TRUE(HcaSpec::parse("mlx5_0:").allows("mlx5_0", 2));
  EXPECT_TRUE(HcaSpec::parse("mlx5_0:2:0:1").allows("mlx5_0", 2));
  EXPECT_FALSE(HcaSpec::parse("mlx5_0:2:0:1").allows("mlx5_0", 1));
}

TEST(VerbsHcaSpec, EqualsMatchesExactly) {
  HcaSpec spec = HcaSpec::parse("=mlx5_1");
  EXPECT_TRUE(spec.exact);
  EXPECT_TRUE(spec.allows("mlx5_1", 1));
  EXPECT_FALSE(spec.allows("mlx5_10", 1));
  EXPECT_FALSE(spec.allows("mlx5", 1));
}

TEST(VerbsHcaSpec, CaretExcludes) {
  HcaSpec spec = HcaSpec::parse("^mlx5_1");
  EXPECT_TRUE(spec.exclude);
  EXPECT_TRUE(spec.allows("mlx5_0", 1));
  EXPECT_FALSE(spec.allows("mlx5_1", 1));
  EXPECT_FALSE(spec.allows("mlx5_10", 1));  // prefix
  HcaSpec exact = HcaSpec::parse("^=mlx5_1:2");
  EXPECT_TRUE(exact.exclude);
  EXPECT_TRUE(exact.exact);
  EXPECT_TRUE(exact.allows("mlx5_1", 1));
  EXPECT_FALSE(exact.allows("mlx5_1", 2));
  EXPECT_TRUE(exact.allows("mlx5_10", 2));
}

TEST(VerbsHcaSpec, BadPortsAreRejectedNamingTheVariable) {
  for (const char* bad : {"mlx5_0:x", "mlx5_0:0", "mlx5_0:256", "mlx5_0:1x"}) {
    std::string what = errorOf([&] { HcaSpec::parse(bad, "NCCL_IB_HCA"); });
    EXPECT_NE(what.find("NCCL_IB_HCA"), std::string::npos) << bad << ": " << what;
    EXPECT_THROW(HcaSpec::parse(bad), InvalidArgument) << bad;
  }
}

TEST(VerbsHcaSpec, FromEnvReadsTheNcclAlias) {
  Env env({{"NCCL_IB_HCA", "^mlx5_0"}});
  HcaSpec spec = HcaSpec::fromEnv();
  EXPECT_FALSE(spec.allows("mlx5_0", 1));
  EXPECT_TRUE(spec.allows("mlx5_1", 1));
  Env bad({{"NCCL_IB_HCA", "mlx5_0:zero"}});
  EXPECT_NE(errorOf([] { HcaSpec::fromEnv(); }).find("NCCL_IB_HCA"), std::string::npos);
  Env ours({{"RINGFOLD_IB_HCA", "=rxe0"}, {"NCCL_IB_HCA", "mlx5"}});
  EXPECT_TRUE(HcaSpec::fromEnv().allows("rxe0", 1));
  EXPECT_FALSE(HcaSpec::fromEnv().allows("mlx5_0", 1));
}

// ---- (b) GID selection ---------------------------------------------------------------------------

TEST(VerbsGid, Classification) {
  EXPECT_TRUE(gidIsZero(Gid{}));
  EXPECT_TRUE(gidIsZero(gidOf("fe80::")));
  EXPECT_FALSE(gidIsZero(gidOf("fe80::1")));
  EXPECT_TRUE(gidIsLinkLocal(gidOf("fe80::b8ce:f6ff:fe00:1")));
  EXPECT_TRUE(gidIsLinkLocal(gidOf("febf::1")));
  EXPECT_FALSE(gidIsLinkLocal(gidOf("fec0::1")));
  EXPECT_TRUE(gidIsIpv4Mapped(gidOf("::ffff:10.0.0.5")));
  EXPECT_FALSE(gidIsIpv4Mapped(gidOf("2001:db8::5")));
  EXPECT_EQ(gidText(gidOf("::ffff:10.0.0.5")), "::ffff:10.0.0.5");
  EXPECT_EQ(gidTypeFromText("RoCE v2\n"), GidType::kRoceV2);
  EXPECT_EQ(gidTypeFromText("IB/RoCE v1"), GidType::kRoceV1);
  EXPECT_EQ(gidTypeFromText(""), GidType::kUnknown);
}

// A typical RoCE table: link-local v1 and v2, then the interface's IPv4 address as v1 and v2,
// then an IPv6 global address as v1 and v2.
std::vector<GidEntry> roceTable() {
  return {entry("fe80::b8ce:f6ff:fe00:1", GidType::kRoceV1),
          entry("fe80::b8ce:f6ff:fe00:1", GidType::kRoceV2),
          entry("::ffff:10.0.0.5", GidType::kRoceV1),
          entry("::ffff:10.0.0.5", GidType::kRoceV2),
          entry("2001:db8::5", GidType::kRoceV1),
          entry("2001:db8::5", GidType::kRoceV2)};
}

// Its first four entries (no IPv6 global address).
std::vector<GidEntry> roceTableV4() {
  std::vector<GidEntry> t = roceTable();
  t.resize(4);
  return t;
}

TEST(VerbsGid, RoceV2Ipv4ByDefault) {
  std::vector<GidEntry> table = roceTableV4();
  GidChoice c = selectGid(LinkLayer::kEthernet, table, GidPolicy{}, "mlx5_0:1");
  EXPECT_EQ(c.index, 3);
  EXPECT_TRUE(c.preferred);
  EXPECT_EQ(selectGid(LinkLayer::kEthernet, roceTable(), GidPolicy{}, "mlx5_0:1").index, 3);
}

TEST(VerbsGid, RoceVersionOne) {
  GidPolicy p;
  p.roceVersion = 1;
  EXPECT_EQ(selectGid(LinkLayer::kEthernet, roceTable(), p, "x").index, 2);
}

TEST(VerbsGid, Ipv6Family) {
  GidPolicy p;
  p.family = AF_INET6;
  GidChoice c = selectGid(LinkLayer::kEthernet, roceTable(), p, "x");
  EXPECT_EQ(c.index, 5);
  EXPECT_TRUE(c.preferred);
  // Without a global IPv6 GID: the IPv4 one of the wanted version, flagged as a fallback.
  std::vector<GidEntry> noV6 = roceTableV4();
  c = selectGid(LinkLayer::kEthernet, noV6, p, "mlx5_0:1");
  EXPECT_EQ(c.index, 3);
  EXPECT_FALSE(c.preferred);
  EXPECT_NE(c.note.find("mlx5_0:1"), std::string::npos) << c.note;
}

TEST(VerbsGid, ExplicitIndexWins) {
  GidPolicy p;
  p.index = 1;
  EXPECT_EQ(selectGid(LinkLayer::kEthernet, roceTable(), p, "x").index, 1);
  EXPECT_EQ(selectGid(LinkLayer::kInfiniBand, roceTable(), p, "x").index, 1);
  p.index = 6;
  EXPECT_NE(errorOf([&] { selectGid(LinkLayer::kEthernet, roceTable(), p, "mlx5_0:1"); }).find("GID_INDEX=6"),
            std::string::npos);
  std::vector<GidEntry> holes = roceTable();
  holes[4] = GidEntry{};
  p.index = 4;
  EXPECT_THROW(selectGid(LinkLayer::kEthernet, holes, p, "x"), InvalidArgument);
}

TEST(VerbsGid, InfiniBandUsesIndexZero) {
  std::vector<GidEntry> ib = {entry("fe80::2:c903:a:1", GidType::kIb), entry("fec0::2:c903:a:1", GidType::kIb)};
  GidChoice c = selectGid(LinkLayer::kInfiniBand, ib, GidPolicy{}, "mlx5_0:1");
  EXPECT_EQ(c.index, 0);
  EXPECT_TRUE(c.preferred);
}

TEST(VerbsGid, SkipsZeroEntriesAndFallsBack) {
  // Empty slots first; the IPv4 v2 GID is found behind them.
  std::vector<GidEntry> t = {GidEntry{}, GidEntry{gidOf("fe80::"), GidType::kRoceV2},
                             entry("::ffff:192.168.1.7", GidType::kRoceV2)};
  EXPECT_EQ(selectGid(LinkLayer::kEthernet, t, GidPolicy{}, "x").index, 2);
  // Types unknown (no _ibv_query_gid_ex, no sysfs): the routable IPv4 GID, still preferred.
  std::vector<GidEntry> unknown = {entry("fe80::1", GidType::kUnknown), entry("::ffff:10.1.1.1", GidType::kUnknown)};
  GidChoice c = selectGid(LinkLayer::kEthernet, unknown, GidPolicy{}, "x");
  EXPECT_EQ(c.index, 1);
  EXPECT_TRUE(c.preferred);
  // Only v1 routable GIDs while v2 is wanted: the v1 one, as a fallback.
  std::vector<GidEntry> v1 = {entry("fe80::1", GidType::kRoceV1), entry("::ffff:10.1.1.1", GidType::kRoceV1)};
  c = selectGid(LinkLayer::kEthernet, v1, GidPolicy{}, "x");
  EXPECT_EQ(c.index, 1);
  EXPECT_FALSE(c.preferred);
  // Only link-local GIDs: the one of the wanted version, with a warning about its reach.
  std::vector<GidEntry> local = {entry("fe80::1", GidType::kRoceV1), entry("fe80::1", GidType::kRoceV2)};
  c = selectGid(LinkLayer::kEthernet, local, GidPolicy{}, "x");
  EXPECT_EQ(c.index, 1);
  EXPECT_FALSE(c.preferred);
  EXPECT_NE(c.note.find("link-local"), std::string::npos) << c.note;
  // Nothing configured at all.
  std::vector<GidEntry> none(4);
  std::string what = errorOf([&] { selectGid(LinkLayer::kEthernet, none, GidPolicy{}, "mlx5_3:1"); });
  EXPECT_NE(what.find("mlx5_3:1 has no GID"), std::string::npos) << what;
}

TEST(VerbsGid, PolicyFromEnv) {
  {
    Env env;
    GidPolicy p = GidPolicy::fromEnv();
    EXPECT_EQ(p.index, -1);
    EXPECT_EQ(p.roceVersion, 2);
    EXPECT_EQ(p.family, AF_INET);
  }
  {
    Env env({{"NCCL_IB_GID_INDEX", "3"}, {"RINGFOLD_IB_ROCE_VERSION_NUM", "1"}, {"NCCL_IB_ADDR_FAMILY", "AF_INET6"}});
    GidPolicy p = GidPolicy::fromEnv();
    EXPECT_EQ(p.index, 3);
    EXPECT_EQ(p.roceVersion, 1);
    EXPECT_EQ(p.family, AF_INET6);
  }
  {
    Env env({{"RINGFOLD_IB_ADDR_FAMILY", "AF_UNIX"}});
    EXPECT_NE(errorOf([] { GidPolicy::fromEnv(); }).find("RINGFOLD_IB_ADDR_FAMILY"), std::string::npos);
  }
  {
    Env env({{"NCCL_IB_ROCE_VERSION_NUM", "3"}});
    EXPECT_NE(errorOf([] { GidPolicy::fromEnv(); }).find("NCCL_IB_ROCE_VERSION_NUM=3"), std::string::npos);
  }
}

// ---- (c) QP attributes ---------------------------------------------------------------------------

LocalPort roceLocal() {
  LocalPort l;
  l.linkLayer = LinkLayer::kEthernet;
  l.port = 1;
  l.activeMtu = IBV_MTU_4096;
  l.gidIndex = 3;
  l.gid = gidOf("::ffff:10.0.0.5");
  return l;
}

QpAddress roceAddress(uint32_t qpn, uint8_t mtu) {
  QpAddress a;
  a.qpNum = qpn;
  a.psn = 0x123456;
  a.gid = gidOf("::ffff:10.0.0.6");
  a.port = 1;
  a.mtu = mtu;
  a.linkLayer = LinkLayer::kEthernet;
  return a;
}

TEST(VerbsQpAttributes, Roce) {
  QpParams params;
  params.trafficClass = 106;
  params.serviceLevel = 3;
  QpAttributes a = qpAttributes(roceLocal(), 0xabcdef, roceAddress(0x77, IBV_MTU_1024), params);
  EXPECT_EQ(a.port, 1);
  EXPECT_EQ(a.accessFlags, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  EXPECT_EQ(a.pathMtu, IBV_MTU_1024);  // min(4096, peer's 1024)
  EXPECT_EQ(a.destQpNum, 0x77u);
  EXPECT_EQ(a.rqPsn, 0x123456u);
  EXPECT_EQ(a.sqPsn, 0xabcdefu);
  EXPECT_TRUE(a.isGlobal);
  EXPECT_EQ(a.dgid, gidOf("::ffff:10.0.0.6"));
  EXPECT_EQ(a.sgidIndex, 3);
  EXPECT_EQ(a.trafficClass, 106);
  EXPECT_EQ(a.hopLimit, 255);
  EXPECT_EQ(a.serviceLevel, 3);
  EXPECT_EQ(a.timeout, 20);
  EXPECT_EQ(a.retryCnt, 7);
  EXPECT_EQ(a.rnrRetry, 7);
  EXPECT_EQ(a.minRnrTimer, 12);
  EXPECT_EQ(a.maxRdAtomic, 1);
  EXPECT_EQ(a.maxDestRdAtomic, 1);
  // The smaller MTU is the local one this time.
  LocalPort small = roceLocal();
  small.activeMtu = IBV_MTU_512;
  EXPECT_EQ(qpAttributes(small, 1, roceAddress(2, IBV_MTU_4096), params).pathMtu, IBV_MTU_512);
}

TEST(VerbsQpAttributes, InfiniBand) {
  LocalPort local;
  local.linkLayer = LinkLayer::kInfiniBand;
  local.port = 2;
  local.lid = 7;
  local.activeMtu = IBV_MTU_4096;
  local.gid = gidOf("fe80::2:c903:a:1");
  QpAddress peer;
  peer.qpNum = 99;
  peer.psn = 5;
  peer.lid = 9;
  peer.gid = gidOf("fe80::2:c903:a:2");
  peer.port = 1;
  peer.mtu = IBV_MTU_4096;
  peer.linkLayer = LinkLayer::kInfiniBand;
  QpParams params;
  params.serviceLevel = 5;
  QpAttributes a = qpAttributes(local, 1, peer, params);
  EXPECT_FALSE(a.isGlobal);  // same subnet, no GRH required
  EXPECT_EQ(a.dlid, 9);
  EXPECT_EQ(a.serviceLevel, 5);
  EXPECT_EQ(a.port, 2);
  EXPECT_EQ(a.pathMtu, IBV_MTU_4096);
  // Another subnet prefix, or a port that requires a GRH: global addressing.
  QpAddress routed = peer;
  routed.gid = gidOf("fec0::2:c903:a:2");
  EXPECT_TRUE(qpAttributes(local, 1, routed, params).isGlobal);
  LocalPort grh = local;
  grh.grhRequired = true;
  QpAttributes g = qpAttributes(grh, 1, peer, params);
  EXPECT_TRUE(g.isGlobal);
  EXPECT_EQ(g.dgid, peer.gid);
  EXPECT_EQ(g.dlid, 9);
  // Unreachable peers.
  QpAddress noLid = peer;
  noLid.lid = 0;
  EXPECT_THROW(qpAttributes(local, 1, noLid, params), InvalidArgument);
  EXPECT_NE(errorOf([&] { qpAttributes(local, 1, roceAddress(1, IBV_MTU_1024), params); }).find("Ethernet"),
            std::string::npos);
  QpAddress noGid = roceAddress(1, IBV_MTU_1024);
  noGid.gid = Gid{};
  EXPECT_THROW(qpAttributes(roceLocal(), 1, noGid, params), InvalidArgument);
  EXPECT_THROW(qpAttributes(roceLocal(), 1, roceAddress(1, 7), params), InvalidArgument);
}

TEST(VerbsQpAttributes, FillQpAttrWritesEachStepAndItsMask) {
  QpParams params;
  params.timeout = 14;
  params.retryCnt = 5;
  QpAttributes a = qpAttributes(roceLocal(), 0x42, roceAddress(0x77, IBV_MTU_2048), params);
  ibv_qp_attr attr;
  int mask = fillQpAttr(a, QpStep::kInit, attr);
  EXPECT_EQ(mask, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  EXPECT_EQ(attr.qp_state, IBV_QPS_INIT);
  EXPECT_EQ(attr.port_num, 1);
  EXPECT_EQ(attr.pkey_index, 0);
  EXPECT_EQ(attr.qp_access_flags, unsigned{IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ});
  mask = fillQpAttr(a, QpStep::kRtr, attr);
  EXPECT_EQ(mask, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  EXPECT_EQ(attr.qp_state, IBV_QPS_RTR);
  EXPECT_EQ(attr.path_mtu, IBV_MTU_2048);
  EXPECT_EQ(attr.dest_qp_num, 0x77u);
  EXPECT_EQ(attr.rq_psn, 0x123456u);
  EXPECT_EQ(attr.ah_attr.is_global, 1);
  EXPECT_EQ(std::memcmp(attr.ah_attr.grh.dgid.raw, gidOf("::ffff:10.0.0.6").data(), 16), 0);
  EXPECT_EQ(attr.ah_attr.grh.sgid_index, 3);
  EXPECT_EQ(attr.ah_attr.grh.hop_limit, 255);
  EXPECT_EQ(attr.ah_attr.port_num, 1);
  mask = fillQpAttr(a, QpStep::kRts, attr);
  EXPECT_EQ(mask, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                      IBV_QP_MAX_QP_RD_ATOMIC);
  EXPECT_EQ(attr.qp_state, IBV_QPS_RTS);
  EXPECT_EQ(attr.timeout, 14);
  EXPECT_EQ(attr.retry_cnt, 5);
  EXPECT_EQ(attr.rnr_retry, 7);
  EXPECT_EQ(attr.sq_psn, 0x42u);
  EXPECT_EQ(attr.max_rd_atomic, 1);
}

TEST(VerbsQpAttributes, ParamsFromEnv) {
  {
    Env env(
        {{"RINGFOLD_IB_TIMEOUT", "14"}, {"NCCL_IB_RETRY_CNT", "5"}, {"NCCL_IB_TC", "106"}, {"RINGFOLD_IB_SL", "3"}});
    QpParams p = QpParams::fromEnv();
    EXPECT_EQ(p.timeout, 14);
    EXPECT_EQ(p.retryCnt, 5);
    EXPECT_EQ(p.trafficClass, 106);
    EXPECT_EQ(p.serviceLevel, 3);
  }
  for (auto [name, value] : {std::pair{"RINGFOLD_IB_TIMEOUT", "32"}, std::pair{"NCCL_IB_RETRY_CNT", "8"},
                             std::pair{"RINGFOLD_IB_SL", "16"}, std::pair{"RINGFOLD_IB_TC", "-1"}}) {
    Env env({{name, value}});
    EXPECT_NE(errorOf([] { QpParams::fromEnv(); }).find(name), std::string::npos) << name;
  }
}

// ---- (d) addresses -------------------------------------------------------------------------------

PeerAddress sampleAddress(int qps) {
  PeerAddress a;
  a.fromRank = 3;
  a.toRank = 70000;
  for (int i = 0; i < qps; ++i) {
    QpAddress q = roceAddress(0x100 + i, IBV_MTU_1024);
    q.psn = 0xfff000 + i;
    q.lid = static_cast<uint16_t>(0xbeef + i);
    q.port = 2;
    a.qps.push_back(q);
  }
  return a;
}

TEST(VerbsAddress, RoundTrip) {
  for (int qps : {1, 3, kMaxLanes}) {
    PeerAddress a = sampleAddress(qps);
    std::string bytes = encodeAddress(a);
    EXPECT_EQ(bytes.size(), 16u + 32u * qps);
    PeerAddress b = decodeAddress(bytes);
    EXPECT_EQ(b.fromRank, 3u);
    EXPECT_EQ(b.toRank, 70000u);
    ASSERT_EQ(b.qps.size(), static_cast<size_t>(qps));
    for (int i = 0; i < qps; ++i) {
      EXPECT_EQ(b.qps[i].qpNum, a.qps[i].qpNum);
      EXPECT_EQ(b.qps[i].psn, a.qps[i].psn);
      EXPECT_EQ(b.qps[i].lid, a.qps[i].lid);
      EXPECT_EQ(b.qps[i].gid, a.qps[i].gid);
      EXPECT_EQ(b.qps[i].port, 2);
      EXPECT_EQ(b.qps[i].mtu, IBV_MTU_1024);
      EXPECT_EQ(b.qps[i].linkLayer, LinkLayer::kEthernet);
    }
  }
  EXPECT_ANY_THROW(encodeAddress(PeerAddress{}));
}

TEST(VerbsAddress, TruncatedOrLongerIsRejected) {
  std::string bytes = encodeAddress(sampleAddress(2));
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_THROW(decodeAddress(bytes.substr(0, n)), InvalidArgument) << n;
  }
  EXPECT_THROW(decodeAddress(bytes + '\0'), InvalidArgument);
}

TEST(VerbsAddress, GarbledFieldsAreRejected) {
  const std::string good = encodeAddress(sampleAddress(2));
  auto with = [&](size_t at, uint8_t value) {
    std::string b = good;
    b[at] = static_cast<char>(value);
    return b;
  };
  auto expectBad = [](const std::string& bytes, const char* says) {
    std::string what = errorOf([&] { decodeAddress(bytes); });
    EXPECT_NE(what.find(says), std::string::npos) << "wanted '" << says << "' in: " << what;
    EXPECT_THROW(decodeAddress(bytes), InvalidArgument);
  };
  expectBad(with(0, 'X'), "magic");
  expectBad(with(4, 2), "version 2");
  expectBad(with(5, 0), "0 QPs");
  expectBad(with(5, 17), "17 QPs");
  expectBad(with(5, 3), "need");  // count says 3, bytes hold 2
  expectBad(with(6, 1), "reserved");
  const size_t qp1 = 16 + 32;  // the second QP's record
  std::string zeroQpn = good;
  std::memset(&zeroQpn[qp1], 0, 4);
  expectBad(zeroQpn, "QP number 0");
  expectBad(with(qp1 + 3, 1), "QP number");  // 25 bits
  expectBad(with(qp1 + 7, 1), "PSN");        // 25 bits
  expectBad(with(qp1 + 10, 0), "port 0");
  expectBad(with(qp1 + 11, 0), "MTU code 0");
  expectBad(with(qp1 + 11, 6), "MTU code 6");
  expectBad(with(qp1 + 12, 0), "link layer 0");
  expectBad(with(qp1 + 12, 3), "link layer 3");
  expectBad(with(qp1 + 14, 9), "reserved");
}

TEST(VerbsAddress, RandomInputNeverEscapesAsAnythingButInvalidArgument) {
  std::mt19937 rng(12345);
  const std::string good = encodeAddress(sampleAddress(3));
  int decoded = 0;
  for (int round = 0; round < 4000; ++round) {
    std::string bytes;
    if (round % 2 == 0) {  // noise of any length, sometimes with a valid prefix
      size_t n = rng() % 120;
      bytes = (round % 4 == 0) ? good.substr(0, std::min(n, size_t{8})) : std::string();
      while (bytes.size() < n) bytes.push_back(static_cast<char>(rng()));
    } else {  // one to three flipped bits of a valid address
      bytes = good;
      for (unsigned k = 0, flips = 1 + rng() % 3; k < flips; ++k) bytes[rng() % bytes.size()] ^= char(1 << (rng() % 8));
    }
    try {
      decodeAddress(bytes);
      ++decoded;
    } catch (const InvalidArgument&) {
    }
  }
  EXPECT_GT(decoded, 0);  // flips in the GID or LID leave a well-formed address
}

// ---- the fabric where it cannot run --------------------------------------------------------------

TEST(VerbsFabricUnavailable, MissingLibraryIsAReasonNotACrash) {
  Env env({{"RINGFOLD_IBVERBS_LIBRARY", "libibverbs-ringfold-absent.so.1"}});
  std::string why;
  EXPECT_FALSE(usable(why));
  EXPECT_NE(why.find("libibverbs-ringfold-absent.so.1 not found"), std::string::npos) << why;
  std::string what = errorOf([] { open(0, 2); });
  EXPECT_NE(what.find("libibverbs-ringfold-absent.so.1 not found"), std::string::npos) << what;
}

TEST(VerbsFabricUnavailable, LibraryWithoutTheSymbolsIsNamed) {
  Env env({{"RINGFOLD_IBVERBS_LIBRARY", "libc.so.6"}});
  std::string why;
  EXPECT_FALSE(usable(why));
  EXPECT_NE(why.find("libc.so.6 lacks ibv_get_device_list"), std::string::npos) << why;
  EXPECT_THROW(open(0, 2), Error);
}

TEST(VerbsFabricUnavailable, OpenSaysWhatUsableSays) {
  Env env;
  std::string why;
  if (usable(why)) GTEST_SKIP() << "this host has a usable RDMA port: " << why;
  EXPECT_FALSE(why.empty());
  std::string what = errorOf([] { open(0, 2); });
  EXPECT_NE(what.find(why), std::string::npos) << "open: " << what << "\nusable: " << why;
  // Here (no RDMA in the kernel) that is the library's empty device list.
  if (why.find("not found") == std::string::npos) {
    EXPECT_NE(why.find("no RDMA devices found"), std::string::npos) << why;
  }
}

TEST(VerbsFabricUnavailable, NoDeviceMatchesTheHcaList) {
  Env env({{"RINGFOLD_IB_HCA", "=ringfold_no_such_hca"}});
  std::string why;
  if (usable(why)) GTEST_SKIP() << "unexpected: " << why;
  // With devices present the list is named; without any, there is nothing to match.
  EXPECT_TRUE(why.find("no device matches RINGFOLD_IB_HCA==ringfold_no_such_hca") != std::string::npos ||
              why.find("no RDMA devices found") != std::string::npos || why.find("not found") != std::string::npos)
      << why;
}

}  // namespace
}  // namespace ringfold::transport::rdma::verbs
