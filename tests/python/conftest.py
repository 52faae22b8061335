"""pytest under ringfoldrun: every rank runs the same tests in the same order, so each test's
collectives match across ranks. Run as

    ringfoldrun -np 2 python -m pytest tests/python      (and -np 3; tests/python/run.sh)

The engine is initialized once per session with dynamic process sets on. A failing test must
not leave the ranks out of step, so tests call the same collectives on every rank whatever
they assert, and a stalled collective fails after RINGFOLD_STALL_SHUTDOWN_TIME (run.sh sets it)
instead of hanging.
"""
import os

import pytest

os.environ.setdefault('RINGFOLD_DYNAMIC_PROCESS_SETS', '1')


@pytest.fixture(scope='session', autouse=True)
def engine():
    import ringfold
    ringfold.init()
    yield
    ringfold.shutdown()
