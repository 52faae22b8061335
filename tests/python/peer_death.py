"""A rank that dies mid-job: every other rank's next collective raises HorovodInternalError
within RINGFOLD_TIMEOUT, naming the dead rank, and the process still exits cleanly (atexit
shutdown must not hang). Run by tests/python/run.sh peer-death under ringfoldrun -np 3."""
import os
import sys
import time

import torch

import ringfold.torch as hvd

hvd.init()
hvd.allreduce(torch.ones(4), name='before')
if hvd.rank() == hvd.size() - 1:
    os._exit(0)                     # dies without shutdown; exit 0 so ringfoldrun lets the others run
start = time.monotonic()
try:
    for step in range(1000):
        hvd.allreduce(torch.ones(1 << 16), name='after.%d' % step)
except hvd.HorovodInternalError as e:
    elapsed = time.monotonic() - start
    print('rank %d: HorovodInternalError after %.2f s: %s' % (hvd.rank(), elapsed, e), flush=True)
    limit = float(os.environ['RINGFOLD_TIMEOUT']) + 5
    if elapsed > limit or str(hvd.size() - 1) not in str(e):
        sys.exit('rank %d: the error came too late (%.1f s > %.0f s) or does not name rank %d'
                 % (hvd.rank(), elapsed, limit, hvd.size() - 1))
    try:                            # the engine stays failed until re-init: later calls raise too
        hvd.allreduce(torch.ones(1))
        sys.exit('rank %d: a collective after the failure did not raise' % hvd.rank())
    except hvd.HorovodInternalError:
        pass
    sys.exit(0)
sys.exit('rank %d: 1000 allreduces completed without the dead rank' % hvd.rank())
