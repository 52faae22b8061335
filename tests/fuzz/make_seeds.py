#!/usr/bin/env python3
"""Writes the hand-made seed inputs of tests/fuzz/corpus/<target>/seed-*: one well-formed input
per shape each target reads (run it again after changing a wire format). Inputs the fuzzer
found later live beside them under other names and are never rewritten here."""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    d = os.path.join(HERE, 'corpus', target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, 'seed-' + name), 'wb') as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def field(b):
    return struct.pack('<I', len(b)) + b


def store_requests():
    t = 'store_request_fuzz'
    write(t, 'set', b'\x01' + field(b'rf/addr/0') + field(b'10.0.0.1:4000'))
    write(t, 'get', b'\x02' + field(b'rf/addr/1'))
    write(t, 'add', b'\x03' + field(b'rf/barrier') + struct.pack('<q', 1))
    write(t, 'check', b'\x04' + struct.pack('<I', 2) + field(b'a') + field(b'bb'))
    write(t, 'cancel', b'\x05')
    write(t, 'pipeline', b'\x02' + field(b'k') + b'\x03' + field(b'n') + struct.pack('<q', -5) + b'\x05')


def store_replies():
    t = 'store_client_fuzz'
    write(t, 'set-ok', b'\x00\x00')
    write(t, 'get-value', b'\x01\x00' + field(b'value'))
    write(t, 'add-value', b'\x02\x00' + struct.pack('<q', 42))
    write(t, 'check-yes', b'\x03\x00\x01')
    write(t, 'error', b'\x01\x01' + field(b'key too long'))
    write(t, 'cancelled', b'\x01\x02')


def engine_messages():
    t = 'engine_messages_fuzz'

    def attrs(dtype=7, op=1, root=0, device=-1, pre=1.0, post=1.0):
        return struct.pack('<BBiidd', dtype, op, root, device, pre, post)

    def ints(v):
        return struct.pack('<I', len(v)) + b''.join(struct.pack('<q', x) for x in v)

    req = (struct.pack('<iB', 1, 0) + attrs() + field(b'grad.0') + ints([4, 3]) + ints([]) +
           field(b'') + struct.pack('<i', 0))
    a2a = (struct.pack('<iB', 0, 5) + attrs(dtype=4) + field(b'x') + ints([6]) + ints([2, 4]) +
           field(b'g1') + struct.pack('<i', 2))
    write(t, 'requests', b'\x00' + struct.pack('<II', 0x52465251, 2) + req + a2a)
    resp = (struct.pack('<BB', 1, 0) + field(b'') + field(b'gather') + attrs() + struct.pack('<q', 12) +
            ints([1, 2]) + ints([3, 4]) + field(b'') + struct.pack('<i', -1))
    err = (struct.pack('<BB', 0, 1) + field(b'ranks disagree') + field(b'y') + attrs() +
           struct.pack('<q', 0) + ints([]) + ints([]) + field(b'') + struct.pack('<i', -1))
    write(t, 'responses', b'\x01' + struct.pack('<II', 0x52465253, 2) + resp + err)


def host_lists():
    t = 'host_list_fuzz'
    write(t, 'dash-h', b'\x00' + b'node1:2,node2:4,10.0.0.3')
    write(t, 'hostfile', b'\x01' + b'# cluster\nnode1 slots=4\n\n10.0.0.7:2  # gpu box\nnode3\n')


def tf_configs():
    t = 'tf_config_fuzz'
    cfg = {'cluster': {'chief': ['h0:2222'], 'worker': ['h1:2222', 'h2:2222'], 'ps': ['p:1']},
           'task': {'type': 'worker', 'index': 1}}
    write(t, 'chief-workers', json.dumps(cfg))
    write(t, 'master', json.dumps({'cluster': {'master': ['m:1'], 'worker': ['w:2']},
                                   'task': {'type': 'master', 'index': 0}, 'environment': 'cloud'}))
    write(t, 'escapes', '{"cluster": {"worker": ["a\\u0062:1", "c:2"]}, "task": {"type": "worker", "index": 0.0}}')


def bootstrap_envs():
    # Records of (name index, value length, value): the FuzzedDataProvider reads integers from
    # the end of the input and strings from the front, so these seeds are only a start.
    t = 'bootstrap_env_fuzz'
    write(t, 'ringfold', b'0\\1\\2\\\x00\x01\x08')
    write(t, 'torchrun', b'3\\4\\127.0.0.1\\29500\\\x12\x13\x19\x1a')


def c_api():
    t = 'c_api_fuzz'
    write(t, 'allreduce', bytes(range(64)))
    write(t, 'alltoall', bytes([5] * 16 + [1, 2, 3, 4] * 12))


def tcp_frames():
    t = 'tcp_frames_fuzz'

    def frame(ftype, msg, tag, check, total, offset, payload, kind=0, seq=0):
        return struct.pack('<HBBIQQQQQQ', 0x5246, ftype, kind, seq, msg, tag, check, total, offset,
                           len(payload)) + payload
    write(t, 'data', frame(1, 0, 1, 0, 5, 0, b'hello'))
    write(t, 'chunks', frame(1, 0, 2, 0, 8, 4, b'5678') + frame(1, 0, 2, 0, 8, 0, b'1234'))
    write(t, 'abort', frame(2, 0, 0, 0, 0, 0, b'rank 1 failed', kind=3))
    write(t, 'waiting', frame(3, 1, 0, 0, 500, 250, b'', seq=1))


if __name__ == '__main__':
    store_requests()
    store_replies()
    engine_messages()
    host_lists()
    tf_configs()
    bootstrap_envs()
    c_api()
    tcp_frames()
