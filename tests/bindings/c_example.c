/* docs/c_api.md's C example, built as strict C99 against bindings/c/ringfold.h: an allreduce and
 * an allgather on every rank. Run it alone (rank 0 of 1) or under `ringfoldrun -np N`.
 * Exits 0 when every result is right, 1 otherwise (after printing why). */
#include <stdio.h>
#include <stdlib.h>

#include "bindings/c/ringfold.h"

static int check(int status, const char* what) {
  if (status != RINGFOLD_OK) {
    fprintf(stderr, "%s failed (status %d): %s\n", what, status, ringfold_last_error());
    return 1;
  }
  return 0;
}

int main(void) {
  float x[4];
  float* gathered;
  int64_t shape[1] = {4};
  int64_t h;
  size_t bytes = 0;
  int rank, size, i, bad = 0;

  if (!horovod_init(NULL, 0, NULL, NULL, 0)) {
    fprintf(stderr, "init failed: %s\n", ringfold_last_error());
    return 1;
  }
  rank = horovod_rank();
  size = horovod_size();
  for (i = 0; i < 4; ++i) x[i] = (float)(rank + i);

  /* Allreduce (sum), in place: x[i] = sum over ranks of (r + i). */
  if (check(ringfold_allreduce_async(x, x, RINGFOLD_FLOAT32, shape, 1, "example.x", RINGFOLD_OP_SUM, 1.0, 1.0, 0,
                                     RINGFOLD_CPU_DEVICE, &h),
            "allreduce") ||
      check(ringfold_wait(h, -1.0), "allreduce wait")) {
    horovod_shutdown();
    return 1;
  }
  ringfold_release(h);
  for (i = 0; i < 4; ++i) {
    if (x[i] != (float)(size * (size - 1) / 2 + size * i)) bad = 1;
  }

  /* Allgather: the engine allocates [4 * size] floats; copy them out, then release. */
  if (check(ringfold_allgather_async(x, RINGFOLD_FLOAT32, shape, 1, NULL, 0, RINGFOLD_CPU_DEVICE, &h), "allgather") ||
      check(ringfold_wait(h, 60.0), "allgather wait") || check(ringfold_result_bytes(h, &bytes), "bytes")) {
    horovod_shutdown();
    return 1;
  }
  gathered = (float*)malloc(bytes);
  if (gathered == NULL || check(ringfold_result_copy(h, gathered, bytes), "copy")) {
    horovod_shutdown();
    return 1;
  }
  ringfold_release(h);
  if (bytes != 4 * sizeof(float) * (size_t)size || gathered[4 * size - 1] != x[3]) bad = 1;
  free(gathered);

  printf("rank %d of %d: %s\n", rank, size, bad ? "WRONG RESULT" : "ok");
  horovod_shutdown();
  return bad;
}
