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
    write(t, 'delete-prefix', b'\x06' + field(b'rf/split/ps1/'))
    write(t, 'pipeline', b'\x02' + field(b'k') + b'\x03' + field(b'n') + struct.pack('<q', -5) + b'\x05')


def store_replies():
    t = 'store_client_fuzz'
    write(t, 'set-ok', b'\x00\x00')
    write(t, 'get-value', b'\x01\x00' + field(b'value'))
    write(t, 'add-value', b'\x02\x00' + struct.pack('<q', 42))
    write(t, 'check-yes', b'\x03\x00\x01')
    write(t, 'delete-prefix-count', b'\x04\x00' + struct.pack('<Q', 3))
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


def length(n):
    """Input::length() of the shm and rdma slot targets: small, 16-bit or 64-bit."""
    if n < 0x40:
        return bytes([n])
    if n < 0x10000:
        return b'\x40' + struct.pack('<H', n)
    return b'\x80' + struct.pack('<Q', n)


def shm_slots():
    # flags (1: hello and ring header bent, 2: the peer exits at the end), receives {tag | after << 2
    # | check << 3, length}, then slot ops (shm_slots_fuzz.cc):
    # op = type | raw-type << 3 | raw-bytes << 4 (op >> 5: 5 geometry, 6 tail jump, 7 own head).
    t = 'shm_slots_fuzz'
    eager, more, rts, mismatch, notice, abort = 1, 2, 3, 5, 6, 7

    def slot(stype, tag, total, payload=b'', status=0, number=0, ident=0, extra=0, address=None):
        b = bytes([stype, status, len(payload), tag, 0]) + length(total) + bytes([number, ident])
        b += struct.pack('<Q', extra)
        if stype == rts:
            b += struct.pack('<Q', address or 0)
        return b + payload

    def recv(tag, n, after=False):
        return bytes([tag | (4 if after else 0)]) + length(n)

    msg = bytes(range(100))
    two = slot(eager, 1, 100, msg[:64]) + slot(more, 1, 100, msg[64:])
    write(t, 'eager-two-slots', b'\x00\x01' + recv(1, 100) + two)
    write(t, 'unexpected', b'\x00\x01' + recv(1, 100, after=True) + two)
    write(t, 'peer-exits-mid-message', b'\x02\x01' + recv(1, 100) + slot(eager, 1, 100, msg[:64]))
    write(t, 'fifo-per-tag', b'\x00\x03' + recv(1, 3) + recv(2, 2) + recv(1, 1, after=True) +
          slot(eager, 2, 2, b'xy') + slot(eager, 1, 3, b'abc') + slot(eager, 1, 1, b'z'))
    write(t, 'control-between', b'\x00\x01' + recv(0, 70) + slot(eager, 0, 70, msg[:64]) +
          slot(notice, 0, 5, number=1, ident=3, extra=(200 << 32) | 1) + slot(more, 0, 70, msg[64:70]))
    write(t, 'abort', b'\x00\x01' + recv(0, 8) + slot(abort, 0, 0, b'rank 1 failed', status=3))
    write(t, 'mismatch', b'\x00\x01' + recv(3, 4) + slot(mismatch, 3, 4, extra=4))
    write(t, 'rts-unexpected', b'\x00\x01' + recv(2, 5000, after=True) + slot(rts, 2, 5000, address=0x1000))
    write(t, 'hello-bent', b'\x01' + b'\x00\x01' + struct.pack('<II', 4, 128) + b'\x00' +
          struct.pack('<II', 4, 128) + b'\x00')
    write(t, 'tail-jump', b'\x00\x01' + recv(0, 1) + bytes([6 << 5]) + struct.pack('<h', 1000))
    write(t, 'geometry', b'\x00\x01' + recv(0, 1) + bytes([5 << 5, 0]) + struct.pack('<II', 0, 1 << 20) +
          slot(eager, 0, 1, b'q'))


def rdma_slots():
    # flags (1: ring geometry, 2: a text in place of the blob's first line (4) or fabric address,
    # 8: hello text), receives as for shm, then ops (rdma_slots_fuzz.cc): op = type index |
    # raw-number << 3 | raw-payload-bytes << 4; op >> 5: 0-3 a slot, 4 at a raw index, 5 a raw
    # immediate, 6 toggle answering clear-to-send, 7 vanish.
    t = 'rdma_slots_fuzz'
    data, rts, cts, notice, abort, hello = 0, 1, 2, 3, 4, 5

    def slot(kind, tag, total, payload=b'', status=0, number=None, stamp=0, rts_id=0, rdv=0, cut=None):
        op = kind | (8 if number is not None else 0)
        b = bytes([op, status])
        if number is not None or kind not in (data, rts):
            b += bytes([number or 0])
        b += bytes([tag, 0]) + length(total)
        if kind != data:
            b += bytes([len(payload)])
        b += bytes([stamp, 0, rts_id, rdv])
        if kind == cts:
            b += struct.pack('<Q', cut or 0)
        return b + payload

    def recv(tag, n, after=False):
        return bytes([tag | (4 if after else 0)]) + length(n)

    write(t, 'eager', b'\x00\x01' + recv(1, 10) + slot(data, 1, 10, bytes(range(10))))
    write(t, 'eager-stamped', b'\x00\x01' + recv(1, 64) + slot(data, 1, 64, bytes(64), stamp=1))
    write(t, 'unexpected', b'\x00\x02' + recv(1, 10, after=True) + recv(0, 0, after=True) +
          slot(data, 1, 10, b'0123456789') + slot(data, 0, 0))
    write(t, 'rendezvous', b'\x00\x01' + recv(2, 5000) + slot(rts, 2, 5000, rts_id=7))
    write(t, 'rendezvous-bounce', b'\x00\x01' + recv(2, 9000, after=True) + slot(rts, 2, 9000, rts_id=3))
    write(t, 'out-of-order', b'\x00\x02' + recv(0, 1) + recv(0, 2) + slot(data, 0, 2, b'bb', number=1) +
          slot(data, 0, 1, b'a', number=0))
    write(t, 'notice-abort', b'\x00\x01' + recv(0, 4) + slot(notice, 2, 30, number=1) +
          slot(abort, 0, 0, b'rank 1 gave up', status=3))
    write(t, 'cts-unknown', b'\x00\x00' + slot(cts, 0, 100, rts_id=9, cut=(1 << 48) | 4096))
    write(t, 'blob-ring', b'\x01' + struct.pack('<II', (1 << 29) - 1, 1 << 12) + b'\x00\x00' + b'\x00')
    write(t, 'blob-text', b'\x06' + bytes([9]) + b'garbage 1' + b'\x00')
    write(t, 'hello-text', b'\x08' + bytes([17]) + b'ringfold-rdma 2 -' + b'\x00')
    write(t, 'raw-immediates', b'\x00\x01' + recv(0, 1) + bytes([5 << 5]) + struct.pack('<I', (2 << 29) | 100) +
          bytes([5 << 5]) + struct.pack('<I', (3 << 29) | 5) + bytes([5 << 5]) + struct.pack('<I', (1 << 29) | 9))


if __name__ == '__main__':
    store_requests()
    store_replies()
    engine_messages()
    host_lists()
    tf_configs()
    bootstrap_envs()
    c_api()
    tcp_frames()
    shm_slots()
    rdma_slots()
