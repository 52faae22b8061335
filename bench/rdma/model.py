#!/usr/bin/env python3
"""Expected ring-allreduce busbw of ringfold's rdma transport on InfiniBand, from the protocol's
per-message costs (docs/rdma.md, "A model of busbw on InfiniBand").

Nothing here is measured: it is arithmetic over the protocol as built (transport/rdma/protocol.h)
and published link parameters, so that the figures a cluster gives can be checked against it.

  link      data rate of one port (EDR 100, HDR 200, NDR 400 Gb/s), 4 KiB IB MTU; every packet
            carries 26 bytes of LRH+BTH+ICRC+VCRC, the first of a write 16 more (RETH), the last
            of a write-with-imm 4 more (ImmDt)
  segment   S = RINGFOLD_SEGMENT_BYTES (512 KiB): each is one message: a 64-byte RTS slot, the
            receiver's 64-byte CTS slot, then the data as RDMA writes of up to
            RINGFOLD_RDMA_CHUNK_BYTES (1 MiB) straight into the destination, the last with an
            immediate
  handshake the RTS/CTS round trip costs 2 one-way latencies (L) plus the CPU time of posting and
            completing the five work requests involved (o each)
  window    w messages per peer in flight: the ring's reduce-scatter lane posts up to 32
            receives ahead and sends 16 ahead (collective_schedules.h), so handshakes of later
            segments overlap the data of earlier ones; the allgather lane 128
  ring      2(n-1) steps; the first segment of every step waits one hop (L + 2o + S/B + the
            reduction of S bytes at R) before it can be forwarded: that is the pipeline's fill

Usage: python3 bench/rdma/model.py [--latency-us 1.5] [--overhead-us 0.4] [--markdown]
"""
import argparse

MIB = 1 << 20
MTU = 4096
HDR_BYTES = 26      # LRH 8 + BTH 12 + ICRC 4 + VCRC 2
RETH_BYTES = 16
IMM_BYTES = 4


def wire_efficiency(payload):
    """Payload bytes / bytes on the wire for one RDMA write of `payload` bytes."""
    packets = max(1, -(-payload // MTU))
    return payload / (payload + packets * HDR_BYTES + RETH_BYTES + IMM_BYTES)


def segment_time(seg, link_bps, chunk, latency, overhead, window):
    """Steady-state seconds per segment on one link, handshakes overlapped by the window."""
    b = link_bps / 8
    chunks = max(1, -(-seg // chunk))
    data = sum(wire_efficiency(min(chunk, seg - i * chunk)) ** -1 * min(chunk, seg - i * chunk)
               for i in range(chunks)) / b
    control = 2 * (64 + HDR_BYTES + RETH_BYTES + IMM_BYTES) / b
    handshake = 2 * latency + 5 * overhead
    return max(data + control, (handshake + data + control) / window), data


def ring_busbw(size, ranks, link_gbps, seg, chunk, latency, overhead, window, reduce_gbs):
    link = link_gbps * 1e9
    t_seg, t_data = segment_time(seg, link, chunk, latency, overhead, window)
    per_rank = size / ranks
    segs = max(1, -(-int(per_rank) // seg))
    # reduce-scatter: a segment is folded before it is forwarded, so the slower of the link and
    # the reduction paces it; allgather only forwards.
    t_fold = min(seg, per_rank) / (reduce_gbs * 1e9)
    steady = (ranks - 1) * segs * (max(t_seg, t_fold) + t_seg)
    hop = latency + 2 * overhead + t_data + t_fold
    fill = 2 * (ranks - 1) * hop
    t = steady + fill
    algbw = size / t
    return algbw * 2 * (ranks - 1) / ranks / 1e9


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--latency-us", type=float, default=1.5, help="one-way latency incl. a switch hop")
    p.add_argument("--overhead-us", type=float, default=0.4, help="CPU time per work request posted or completed")
    p.add_argument("--segment", type=int, default=512 << 10)
    p.add_argument("--chunk", type=int, default=1 << 20)
    p.add_argument("--window", type=int, default=16, help="messages per peer in flight (send window)")
    p.add_argument("--reduce-gbs", type=float, default=1000.0,
                   help="reduction bandwidth in GB/s (GPU kernels: ~1000; CPU staging: ~10)")
    p.add_argument("--ranks", default="8,64")
    args = p.parse_args()
    lat, ovh = args.latency_us * 1e-6, args.overhead_us * 1e-6
    sizes = [1 * MIB, 16 * MIB, 256 * MIB, 1024 * MIB]
    print(f"one-way latency {args.latency_us} us, {args.overhead_us} us per work request, segment "
          f"{args.segment >> 10} KiB, chunk {args.chunk >> 10} KiB, window {args.window}, reduction "
          f"{args.reduce_gbs:g} GB/s")
    print()
    print("| link | ranks | line rate GB/s | wire ceiling | " + " | ".join(f"{s // MIB} MiB" for s in sizes)
          + " | 1 GiB / line rate | NCCL's ~98% |")
    print("|---|---|---|---|" + "---|" * len(sizes) + "---|---|")
    for gbps in (100, 200, 400):
        line = gbps / 8
        ceiling = line * wire_efficiency(args.chunk)
        for n in (int(x) for x in args.ranks.split(",")):
            bws = [ring_busbw(s, n, gbps, args.segment, args.chunk, lat, ovh, args.window, args.reduce_gbs)
                   for s in sizes]
            print(f"| {gbps} Gb/s | {n} | {line:.2f} | {ceiling:.2f} | " + " | ".join(f"{b:.2f}" for b in bws)
                  + f" | {bws[-1] / line:.1%} | {0.98 * line:.2f} |")


if __name__ == "__main__":
    main()
