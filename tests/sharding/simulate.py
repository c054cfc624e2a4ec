"""Simulated CPEs' telemetry from a process of its own (``bench/bench_replicas.py``): every
CPE's telemetry on its shard-keyed topic each period, capacities in a random walk of a few
percent per report, spread over the period in slices as a real fleet's reports are.

A process, so that publishing thousands of messages a second does not share an interpreter
lock with whoever observes the weights; and one connection that writes each slice's QoS 0
PUBLISH packets in bulk on the project's codec (:class:`tests.support.mqtt_bulk.
BulkPublisher`), topics and the constant part of every message encoded once, so that the
simulator costs a few µs per message instead of a paho client's tens.

    python -m tests.sharding.simulate --port P --ca CA --cert C --key K --cpes N [--period S]
"""

from __future__ import annotations

import argparse
import signal
import threading
import time

import numpy as np

from tests.support.mqtt_bulk import BulkPublisher, topic_header
from xapp.adapters.mqtt.topics import shard_topic

#: One CPE's ``mcw.telemetry.v2`` message (compact JSON, as the agent writes it), its CPE and
#: interval filled in once; per report: time_ms, then the two WATs' uplink Mb/s.
TEMPLATE = ('{"schema":"mcw.telemetry.v2","cpe_id":"%s","time_ms":%%d,"interval_ms":%d,'
            '"wats":{"nr":{"rtt_ms":20.0,"subflows":1,"up":true,'
            '"ul":{"delivered_mbps":%%.3f,"cwnd":10,"bytes_acked":1000}},'
            '"wifi":{"rtt_ms":5.0,"subflows":1,"up":true,'
            '"ul":{"delivered_mbps":%%.3f,"cwnd":10,"bytes_acked":1000}}}}')


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--ca", required=True)
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--cpes", type=int, required=True)
    ap.add_argument("--prefix", default="sim-")
    ap.add_argument("--period", type=float, default=1.0)
    ap.add_argument("--slices", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    publisher = BulkPublisher(args.port, args.ca, args.cert, args.key,
                              client_id="sim-telemetry-proc")
    rng = np.random.default_rng(args.seed)
    ids = [f"{args.prefix}{i:05d}" for i in range(args.cpes)]
    heads = [topic_header(shard_topic(c, "telemetry")) for c in ids]
    interval_ms = int(args.period * 1000)
    templates = [(TEMPLATE % (c, interval_ms)).encode() for c in ids]
    caps = rng.uniform(200.0, 800.0, size=(args.cpes, 2))
    slices = max(1, min(args.slices, args.cpes))
    chunk = -(-args.cpes // slices)
    next_at = time.monotonic()
    while not stop.is_set():
        # Every CPE's capacities move a few percent a report, so weights change every tick.
        caps *= rng.uniform(0.95, 1.05, size=caps.shape)
        np.clip(caps, 50.0, 900.0, out=caps)
        nr, wifi = caps[:, 0].tolist(), caps[:, 1].tolist()
        for k in range(slices):
            now_ms = int(time.time() * 1000)
            lo, hi = k * chunk, min(args.cpes, (k + 1) * chunk)
            publisher.send((heads[i], templates[i] % (now_ms, nr[i], wifi[i]))
                           for i in range(lo, hi))
            next_at += args.period / slices
            if stop.wait(max(0.0, next_at - time.monotonic())):
                break
    publisher.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
