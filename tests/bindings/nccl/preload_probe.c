/* PyTorch's way of finding libnccl.so.2, and how ringfold's library replaces it: this program
 * is linked against NVIDIA's libnccl.so.2 with a DT_RPATH to it (as the torch wheel is), and run
 * with LD_PRELOAD naming ringfold's libnccl.so.2 (argv[1]). It checks that every call reaches
 * ringfold's library (dladdr of ncclAllReduce) and that a one-rank allreduce on host memory
 * works (NVIDIA's library would need a GPU). Exit 0 on success, 1 otherwise. C99. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s EXPECTED_LIBNCCL\n", argv[0]);
    return 1;
  }
  Dl_info info;
  char want[PATH_MAX], got[PATH_MAX];
  if (!dladdr((void*)&ncclAllReduce, &info) || !realpath(info.dli_fname, got) || !realpath(argv[1], want)) {
    fprintf(stderr, "cannot tell which library provides ncclAllReduce\n");
    return 1;
  }
  printf("ncclAllReduce comes from %s\n", got);
  if (strcmp(got, want) != 0) {
    fprintf(stderr, "expected %s\n", want);
    return 1;
  }
  ncclUniqueId id;
  ncclComm_t comm;
  float x[3] = {1, 2, 3}, y[3] = {0, 0, 0};
  if (ncclGetUniqueId(&id) != ncclSuccess || ncclCommInitRank(&comm, 1, id, 0) != ncclSuccess ||
      ncclAllReduce(x, y, 3, ncclFloat32, ncclSum, comm, NULL) != ncclSuccess || y[2] != 3.0f) {
    fprintf(stderr, "one-rank allreduce failed: %s\n", ncclGetLastError(NULL));
    return 1;
  }
  ncclCommDestroy(comm);
  printf("one-rank allreduce ok\n");
  return 0;
}
