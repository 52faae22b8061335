"""One rank of bench/fault/fault_timing.py: allreduces until the engine raises, then prints when.

Started by hand in its own network namespace with ringfold's RINGFOLD_* names (no launcher, so
that no launcher's own failure detection is measured). Prints, flushed:
    STEADY <rank>                     after its first 20 allreduces
    ERROR <rank> <unix time> <text>   when an allreduce raised (then waits to be killed)
With FAULT_STALL_RANK=<r>, rank r stops submitting after STEADY (alive, silent to the engine:
the case a stall shutdown ends) until a line arrives on its standard input, then submits again,
which must raise at once.
"""
import os
import sys
import time

import numpy as np

import ringfold

ringfold.init()
rank = ringfold.rank()
x = np.ones(1 << 14, np.float32)
step = 0
stall_rank = int(os.environ.get('FAULT_STALL_RANK', '-1'))
try:
    while True:
        ringfold.allreduce(x, name='grad')
        step += 1
        if step == 20:
            print('STEADY %d' % rank, flush=True)
            if rank == stall_rank:
                sys.stdin.readline()
except Exception as e:  # noqa: BLE001 - every engine error is what this measures
    text = ' '.join(str(e).split())
    print('ERROR %d %.6f %s: %s' % (rank, time.time(), type(e).__name__, text), flush=True)
    sys.stdin.readline()    # stay up (the driver kills it) so the stalled rank meets live peers
    sys.exit(1)
