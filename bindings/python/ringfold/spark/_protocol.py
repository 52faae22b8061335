"""The wire format between a ringfold.spark job's tasks and its driver.

Contract
  * One TCP connection per task to the driver's service (_driver.DriverService). The server
    opens with a 32-byte random nonce; the client answers with HMAC-SHA256(secret, TAG + nonce)
    and its partition index as a frame of kind HELLO. A wrong answer closes the connection
    before anything from it is read as data, so only holders of the job secret (the driver and
    its tasks) can post output, results or failures; nothing else on the connection is trusted
    before that check.
  * After the handshake the client sends frames: 1 byte kind, 4 bytes rank (big endian,
    signed), 4 bytes payload length, payload. Kinds: LINE (payload = 1 byte stream code, then
    UTF-8 text without its newline), RESULT (cloudpickled return value), FAILURE (pickled dict:
    see _worker.failure_info), HELLO (payload = JSON of what the task knows: partition, rank,
    host). Frames are at most MAX_FRAME bytes; larger ones are refused.
  * The secret never travels on this connection: only the HMAC of a fresh nonce does.
"""
import hashlib
import hmac
import os
import struct

TAG = b'ringfold.spark.v1'
NONCE_BYTES = 32
MAX_FRAME = 1 << 31  # results are pickles; 2 GiB is the frame limit

HELLO, LINE, RESULT, FAILURE = 1, 2, 3, 4
STREAMS = {b'o': 'stdout', b'e': 'stderr', b'l': 'log'}
STREAM_CODES = {v: k for k, v in STREAMS.items()}

_HEADER = struct.Struct('>BiI')


def new_nonce():
    return os.urandom(NONCE_BYTES)


def answer(secret, nonce):
    return hmac.new(secret.encode(), TAG + nonce, hashlib.sha256).digest()


def check_answer(secret, nonce, got):
    return hmac.compare_digest(answer(secret, nonce), got)


def recv_exact(sock, n):
    """n bytes from sock, or None if the peer closed first."""
    chunks = []
    while n:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b''.join(chunks)


def pack(kind, rank, payload):
    if len(payload) >= MAX_FRAME:
        raise ValueError('ringfold.spark: a frame of %d bytes is over the %d-byte limit'
                         % (len(payload), MAX_FRAME))
    return _HEADER.pack(kind, rank, len(payload)) + payload


def recv_frame(sock):
    """(kind, rank, payload), or None when the peer closed."""
    header = recv_exact(sock, _HEADER.size)
    if header is None:
        return None
    kind, rank, length = _HEADER.unpack(header)
    payload = recv_exact(sock, length) if length else b''
    if payload is None:
        return None
    return kind, rank, payload
