"""Simulated CPEs' telemetry from a process of its own (``bench/bench_replicas.py``): one MQTT
client publishing every CPE's telemetry on its shard-keyed topic each period, capacities in a
random walk of a few percent per report.  A process, so that publishing thousands of messages
a second does not share an interpreter lock with whoever observes the weights.

    python -m tests.sharding.simulate --port P --ca CA --cert C --key K --cpes N [--period S]
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import ssl
import threading
import time

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion

from xapp.adapters.mqtt.payloads import shard_topic


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--ca", required=True)
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--cpes", type=int, required=True)
    ap.add_argument("--prefix", default="sim-")
    ap.add_argument("--period", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="sim-telemetry-proc",
                         protocol=MQTTProtocolVersion.MQTTv5)
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=args.ca)
    ctx.load_cert_chain(args.cert, args.key)
    client.tls_set_context(ctx)
    client.max_queued_messages_set(0)
    client.connect("127.0.0.1", args.port, keepalive=30)
    client.loop_start()
    rng = random.Random(args.seed)
    ids = [f"{args.prefix}{i:05d}" for i in range(args.cpes)]
    topics = {c: shard_topic(c, "telemetry") for c in ids}
    caps = {c: [rng.uniform(200, 800), rng.uniform(200, 800)] for c in ids}
    interval_ms = int(args.period * 1000)
    next_at = time.monotonic()
    while not stop.is_set():
        now_ms = int(time.time() * 1000)
        for c in ids:
            nr, wifi = caps[c]
            nr = min(900.0, max(50.0, nr * rng.uniform(0.95, 1.05)))
            wifi = min(900.0, max(50.0, wifi * rng.uniform(0.95, 1.05)))
            caps[c] = [nr, wifi]
            doc = {"schema": "mcw.telemetry.v2", "cpe_id": c, "time_ms": now_ms,
                   "interval_ms": interval_ms,
                   "wats": {"nr": {"rtt_ms": 20.0, "subflows": 1, "up": True,
                                   "ul": {"delivered_mbps": nr, "cwnd": 10,
                                          "bytes_acked": 1000}},
                            "wifi": {"rtt_ms": 5.0, "subflows": 1, "up": True,
                                     "ul": {"delivered_mbps": wifi, "cwnd": 10,
                                            "bytes_acked": 1000}}}}
            client.publish(topics[c], json.dumps(doc).encode(), qos=0)
        next_at += args.period
        stop.wait(max(0.0, next_at - time.monotonic()))
    client.disconnect()
    client.loop_stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
