// mpi_allreduce_perf: MPI_Allreduce (float, MPI_SUM), timed, checked and printed exactly like
// ringfold's all_reduce_perf (compare_driver.h), for same-run comparisons. To measure Open MPI
// over TCP on loopback rather than shared memory:
//
//   mpirun --allow-run-as-root --oversubscribe --mca btl tcp,self --mca btl_tcp_if_include lo
//          -np 4 build/bench/mpi_allreduce_perf -b 4K -e 64M -f 4
#include <mpi.h>

#include <cstdio>
#include <string>

#include "bench/compare/compare_driver.h"

namespace ringfold::bench {
namespace {

class MpiBackend final : public CompareBackend {
 public:
  MpiBackend() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string deviceName() const override {
    char version[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
    int len = 0;
    MPI_Get_library_version(version, &len);
    std::string v(version, static_cast<size_t>(len));
    v = v.substr(0, v.find(','));
    for (char& c : v) c = c == ' ' ? '-' : c;
    return "mpi-" + v;
  }
  void barrier() override { MPI_Barrier(MPI_COMM_WORLD); }
  double combine(double value, Combine how) override {
    double out = 0;
    MPI_Op op = how == Combine::kMin ? MPI_MIN : how == Combine::kMax ? MPI_MAX : MPI_SUM;
    MPI_Allreduce(&value, &out, 1, MPI_DOUBLE, op, MPI_COMM_WORLD);
    return out;
  }
  void allreduce(const float* send, float* recv, size_t count, bool inPlace) override {
    // MPI counts are int; the sizes benchmarked stay far below 2^31 elements.
    MPI_Allreduce(inPlace ? MPI_IN_PLACE : send, recv, static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
  }

 private:
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace
}  // namespace ringfold::bench

int main(int argc, char** argv) {
  using namespace ringfold::bench;
  setlinebuf(stdout);
  MPI_Init(&argc, &argv);
  const std::string program = "mpi_allreduce_perf";
  FlagParser parser(program, "MPI_Allreduce (float sum) in nccl-tests format");
  int status = 0;
  try {
    if (parser.parse(argc, argv)) {
      requireFloatSum(parser.flags());
      MpiBackend backend;
      status = runCompare(program, parser.flags(), backend);
    }
  } catch (const std::exception& e) {
    int rank = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::fprintf(stderr, "%s: rank %d: %s\n", program.c_str(), rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  MPI_Finalize();
  return status;
}
