// starter_rank: a rank program for rendezvous_starters_test. It bootstraps from whatever names
// its starter set (bootstrap.h), joins the communicator (rank 0 hosting the store unless
// RINGFOLD_STORE_SERVER=external), allreduces rank+1 over 7 int64 elements and checks that every
// element is 1 + 2 + ... + size. Prints "starter_rank ok rank R of S via SOURCE" and exits 0, or
// prints the error and exits 1.
#include <cstdint>
#include <cstdio>
#include <exception>
#include <vector>

#include "collectives/allreduce.h"
#include "collectives/communicator.h"
#include "rendezvous/bootstrap.h"

int main() {
  try {
    auto info = ringfold::rendezvous::bootstrapFromEnvironment();
    auto comm = ringfold::Communicator::fromEnvironment();
    const int64_t size = comm->size();
    std::vector<int64_t> in(7, comm->rank() + 1), out(7, -1);
    ringfold::AllreduceOptions o;
    o.sendbuf = in.data();
    o.recvbuf = out.data();
    o.count = in.size();
    o.dtype = ringfold::DataType::kInt64;
    ringfold::allreduce(*comm, o);
    for (int64_t v : out) {
      if (v != size * (size + 1) / 2) {
        std::fprintf(stderr, "starter_rank: rank %d got %lld, expected %lld\n", comm->rank(),
                     static_cast<long long>(v), static_cast<long long>(size * (size + 1) / 2));
        return 1;
      }
    }
    std::printf("starter_rank ok rank %d of %d via %s\n", comm->rank(), comm->size(), info.source.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "starter_rank failed: %s\n", e.what());
    return 1;
  }
}
