"""Ports for the pytest suites that start jobs of their own (not the conftest's engine)."""
import random
import socket


def free_port_pair():
    """An even port P with P and P + 1 free on 127.0.0.1 (a job's first store takes P, a second
    one P + 1: torchrun's and ringfold's, or TF_CONFIG's chief and ringfold's), below the
    ephemeral range so other tests' outgoing connections cannot take them."""
    for _ in range(200):
        p = random.randrange(20000, 30000, 2)
        try:
            for q in (p, p + 1):
                with socket.socket() as s:
                    s.bind(('127.0.0.1', q))
            return p
        except OSError:
            pass
    raise RuntimeError('no free port pair on 127.0.0.1')
