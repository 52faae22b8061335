// transport/rdma/pair.h: an rdma link started over a socket instead of the store (the NCCL net
// plugin's rdma carrier), both ends in this thread over libfabric's tcp;ofi_rxm on loopback: the
// start-up never blocks; receives larger than their message, posted before and after it arrived
// (eager, rendezvous, bounced); a message larger than its receive; the peer closing its socket
// (the heartbeat) with a receive pending; a peer that sends garbage or nothing during start-up.
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "transport/connection.h"
#include "transport/rdma/fabric.h"
#include "transport/rdma/pair.h"

namespace {

using namespace ringfold;
using namespace ringfold::transport::rdma;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

class RdmaPairLink : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("RINGFOLD_RDMA_FABRIC", "ofi", 1);
    if (!getenv("RINGFOLD_OFI_PROVIDER") && !getenv("FI_PROVIDER")) setenv("RINGFOLD_OFI_PROVIDER", "tcp;ofi_rxm", 1);
    if (!getenv("FI_TCP_IFACE")) setenv("FI_TCP_IFACE", "lo", 1);
    std::string why;
    if (!fabricUsable("ofi", why)) GTEST_SKIP() << "no usable libfabric provider: " << why;
    int fds[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    fd_[0] = fds[0];
    fd_[1] = fds[1];
  }
  void TearDown() override {
    links_[0].reset();
    links_[1].reset();
    for (int& f : fd_) {
      if (f >= 0) ::close(f);
      f = -1;
    }
  }
  // Both ends, started by polling them in turn (neither poll may block on the other).
  void start(std::chrono::milliseconds timeout = 20s) {
    links_[0] = std::make_unique<PairLink>(fd_[0], 0, timeout);
    links_[1] = std::make_unique<PairLink>(fd_[1], 1, timeout);
    const auto end = Clock::now() + 20s;
    bool up0 = false, up1 = false;
    while (!(up0 && up1) && Clock::now() < end) {
      up0 = links_[0]->poll();
      up1 = links_[1]->poll();
    }
    ASSERT_TRUE(up0 && up1) << "the pair did not start within 20 s";
  }
  // Drives both ends until every request is done (false after 20 s).
  bool drive(const std::vector<RdmaRequest*>& reqs) {
    const auto end = Clock::now() + 20s;
    while (Clock::now() < end) {
      bool all = true;
      for (RdmaRequest* r : reqs) all = r->test() && all;
      if (all) return true;
      for (auto& l : links_) {
        if (l) l->progress();
      }
    }
    return false;
  }
  int fd_[2] = {-1, -1};
  std::unique_ptr<PairLink> links_[2];
};

std::vector<char> bytes(size_t n, char seed) {
  std::vector<char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<char>(seed + i * 13);
  return v;
}

TEST_F(RdmaPairLink, StartsAndDescribesItsFabric) {
  start();
  EXPECT_TRUE(links_[0]->up());
  EXPECT_NE(links_[0]->describe().find("ofi"), std::string::npos) << links_[0]->describe();
}

TEST_F(RdmaPairLink, ReceivesLargerThanTheirMessagesPostedFirstOrLast) {
  start();
  PairLink& recv = *links_[0];
  PairLink& send = *links_[1];
  // Empty, eager (in a slot), rendezvous (straight into the receive), and a larger rendezvous.
  const std::vector<size_t> sizes = {0, 10, 70000, 3 << 20};
  for (int late = 0; late < 2; ++late) {
    std::vector<std::vector<char>> in(sizes.size()), out(sizes.size());
    std::vector<std::unique_ptr<RdmaRequest>> reqs;
    auto postReceives = [&] {
      for (size_t i = 0; i < sizes.size(); ++i) {
        in[i].assign(sizes[i] * 2 + 8, '#');
        reqs.push_back(recv.irecv(in[i].data(), in[i].size(), 100 + i));
      }
    };
    if (!late) postReceives();
    for (size_t i = 0; i < sizes.size(); ++i) {
      out[i] = bytes(sizes[i], static_cast<char>(i + late));
      reqs.push_back(send.isend(out[i].data(), out[i].size(), 100 + i));
    }
    if (late) {
      // Let the messages arrive (the rendezvous ones are bounced), then receive them.
      const auto until = Clock::now() + 50ms;
      while (Clock::now() < until) {
        recv.progress();
        send.progress();
      }
      postReceives();
    }
    std::vector<RdmaRequest*> all;
    for (auto& r : reqs) all.push_back(r.get());
    ASSERT_TRUE(drive(all)) << (late ? "posted last" : "posted first");
    for (size_t i = 0; i < sizes.size(); ++i) {
      RdmaRequest* r = late ? reqs[sizes.size() + i].get() : reqs[i].get();
      EXPECT_EQ(r->state().length, sizes[i]) << "message " << i << (late ? " posted last" : "");
      EXPECT_EQ(std::vector<char>(in[i].begin(), in[i].begin() + sizes[i]), out[i]) << "message " << i;
      EXPECT_EQ(in[i][sizes[i]], '#') << "message " << i << " wrote past its size";
    }
  }
  EXPECT_GE(send.stats().rendezvousMessages, 2u);
  EXPECT_GE(recv.stats().bouncedMessages, 1u);
}

TEST_F(RdmaPairLink, MessageLargerThanItsReceiveFails) {
  start();
  for (size_t n : {size_t{100}, size_t{200000}}) {  // eager, then rendezvous (on fresh links)
    if (n != 100) {
      TearDown();
      SetUp();
      start();
    }
    std::vector<char> small(n / 2), big = bytes(n, 1);
    auto r = links_[0]->irecv(small.data(), small.size(), 7);
    auto s = links_[1]->isend(big.data(), big.size(), 7);
    try {
      drive({r.get()});
      FAIL() << n << " bytes into " << n / 2 << ": no error";
    } catch (const transport::CheckMismatch& e) {
      EXPECT_EQ(e.actualLength, n);
      EXPECT_EQ(e.expectedLength, n / 2);
    }
    EXPECT_TRUE(links_[0]->failed());
  }
}

TEST_F(RdmaPairLink, PeerClosingItsSocketFailsAPendingReceive) {
  start();
  std::vector<char> buf(1 << 20);
  auto r = links_[0]->irecv(buf.data(), buf.size(), 1);
  links_[1].reset();  // the peer's process is gone: its link and its socket
  ::close(fd_[1]);
  fd_[1] = -1;
  const auto closed = Clock::now();
  try {
    drive({r.get()});
    FAIL() << "no error after the peer closed its socket";
  } catch (const IoError& e) {
    // The heartbeat's error, or the fabric's own if it noticed first (ofi_rxm may).
    EXPECT_EQ(e.peerRank(), 1) << e.what();
  }
  EXPECT_LT(Clock::now() - closed, 5s);
}

TEST_F(RdmaPairLink, GarbageDuringStartUpIsRefused) {
  PairLink link(fd_[0], 0, 5s);
  const unsigned char huge[4] = {0xff, 0xff, 0xff, 0x7f};
  ASSERT_EQ(::write(fd_[1], huge, 4), 4);
  try {
    const auto end = Clock::now() + 5s;
    while (!link.poll() && Clock::now() < end) {
    }
    FAIL() << "a frame of 2 GiB was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a ringfold rdma peer"), std::string::npos) << e.what();
  }
}

TEST_F(RdmaPairLink, SilentPeerTimesOutAndAClosedOneFailsAtOnce) {
  {
    PairLink link(fd_[0], 0, 300ms);
    const auto start = Clock::now();
    try {
      while (!link.poll()) {
        ASSERT_LT(Clock::now() - start, 10s);
      }
      FAIL() << "started without a peer";
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find("did not finish the rdma start-up"), std::string::npos) << e.what();
    }
  }
  ::close(fd_[1]);
  fd_[1] = -1;
  PairLink link(fd_[0], 0, 20s);
  EXPECT_THROW(
      {
        for (int i = 0; i < 1000 && !link.poll(); ++i) {
        }
      },
      IoError);
}

TEST_F(RdmaPairLink, RequestsBeforeTheLinkIsUpAreRefused) {
  PairLink link(fd_[0], 0, 5s);
  char b = 0;
  EXPECT_THROW(link.isend(&b, 1, 0), Error);
  EXPECT_THROW(link.irecv(&b, 1, 0), Error);
}

}  // namespace
