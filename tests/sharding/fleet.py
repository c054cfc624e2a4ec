"""Several ``mcw run`` replicas sharing one fleet, against one real Redis and one real Mosquitto.

Used by ``tests/sharding/test_replicas.py`` and ``bench/bench_replicas.py``:

* :class:`Fleet` starts Redis, Mosquitto (the shipped ACL plus a simulator user), and replicas
  as processes, each with ``controls.sharding.enabled``; a replica may reach Redis through a
  :class:`CuttableProxy`, which the test cuts to partition it from Redis (and only it);
* :class:`Simulator` publishes telemetry for many simulated CPEs from one MQTT client (a
  spare CPE certificate of the test PKI, allowed by the test ACL to write any CPE's telemetry), with
  capacities that move every period so that weights change every tick;
* :class:`Observer` subscribes to every weights topic and records, per CPE, each message's
  arrival (monotonic) and version.

InfluxDB is left out: its URL points at a closed port (the intake and the flusher fail and
retry; KPIs come over MQTT), which keeps three replicas and a few hundred CPEs within two cores.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.integration.stack import (
    AGENT_BINARY,
    dry_run_agent_log,
    http_get,
    start_dry_run_agent,
)
from tests.support.mosquitto import (
    MosquittoBroker,
    Pki,
    connect_client,
    make_acl,
    make_pki,
    pki_cpes,
)
from tests.support.polling import free_port
from tests.support.redis_server import RedisServer
from tests.support.tcp_proxy import CuttableProxy
from xapp.adapters.mqtt.connection import MqttSettings
from xapp.adapters.mqtt.reader import MqttReader, ReceivedMessage
from xapp.adapters.mqtt.topics import shard_topic

REPO = Path(__file__).resolve().parents[2]
#: The test PKI's CPE certificate the simulator and the observer use: one more than the agents
#: have, and the test ACL lets it write any CPE's telemetry and read any CPE's weights.
SIMULATOR = "cpe-0900"

SIM_ACL = f"""
user {SIMULATOR}
topic write mcw/v1/cpe/+/telemetry
topic write mcw/v1/cpe/+/state
topic write mcw/v1/s/+/cpe/+/telemetry
topic write mcw/v1/s/+/cpe/+/state
topic read mcw/v1/cpe/+/weights
"""


@dataclass
class Replica:
    replica_id: str
    http_port: int
    proc: subprocess.Popen[bytes]
    log_path: Path
    proxy: CuttableProxy | None = None

    def get_json(self, path: str) -> Any:
        code, body = http_get(self.http_port, path, timeout_s=5.0)
        if code == 0:
            return None
        try:
            return json.loads(body)
        except ValueError:
            return None

    def metric(self, name: str, **labels: str) -> float | None:
        code, body = http_get(self.http_port, "/metrics", timeout_s=2.0)
        if code != 200:
            return None
        want = name + ("{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
                       if labels else "")
        for line in body.decode().splitlines():
            if line.startswith(want + " "):
                return float(line.split()[-1])
        return None

    def held(self) -> set[int]:
        doc = self.get_json("/ric/v1/shards")
        return set(doc.get("valid", [])) if isinstance(doc, dict) else set()

    def running(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.running():
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self, timeout_s: float = 15.0) -> None:
        if self.running():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        if self.proxy is not None:
            self.proxy.close()


@dataclass
class Observer:
    """Every weights message of the fleet: per CPE, [(arrival monotonic, version, issued ms)].

    Its client is the xApp's own (:class:`xapp.adapters.mqtt.reader.MqttReader`) with batch
    delivery: at thousands of weights messages a second a paho client, one callback and one
    lock per message, costs the harness more than the replicas it watches."""

    client: MqttReader | None = None
    seen: dict[str, list[tuple[float, int, int]]] = field(
        default_factory=lambda: defaultdict(list))
    #: Per CPE, its last message's arrival: what a poll over every CPE reads, in O(CPEs),
    #: where :meth:`snapshot` copies every message (hundreds of thousands at 10,000 CPEs).
    last: dict[str, float] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    subscribed: threading.Event = field(default_factory=threading.Event)

    def on_messages(self, _c: object, _u: object, msgs: list[ReceivedMessage]) -> None:
        now = time.monotonic()  # one read of the socket: the same arrival for its messages
        rows = []
        for msg in msgs:
            try:
                doc = json.loads(msg.payload)
                version, issued = int(doc["version"]), int(doc.get("issued_at_ms", 0))
            except (ValueError, KeyError, TypeError):
                version, issued = -1, 0
            rows.append((msg.topic.split("/")[3], (now, version, issued)))
        with self.lock:
            for cpe, row in rows:
                self.seen[cpe].append(row)
                self.last[cpe] = now

    def on_subscribe(self, _c: object, _u: object, _pid: int, codes: list[Any],
                     _p: object) -> None:
        if [int(c.value) for c in codes] == [1]:
            self.subscribed.set()

    def close(self) -> None:
        if self.client is not None:
            self.client.disconnect()
            self.client.loop_stop()

    def snapshot(self) -> dict[str, list[tuple[float, int, int]]]:
        with self.lock:
            return {c: list(v) for c, v in self.seen.items()}

    def silent_since(self, cpes: list[str], since: float) -> list[str]:
        """Those of ``cpes`` without a message that arrived after ``since`` (monotonic)."""
        with self.lock:
            last = dict(self.last)
        return [c for c in cpes if last.get(c, -1.0) <= since]

    def count(self) -> int:
        with self.lock:
            return sum(len(v) for v in self.seen.values())


class Simulator:
    """Telemetry of ``cpes`` every ``period_s``, from one client, capacities moving each time."""

    def __init__(self, broker: MosquittoBroker, cpes: list[str], period_s: float = 1.0,
                 seed: int = 7) -> None:
        self.cpes = cpes
        self.period_s = period_s
        self.rng = random.Random(seed)
        self.client = connect_client(broker, SIMULATOR, client_id="sim-telemetry")
        self.stop_event = threading.Event()
        self.sent = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def doc(self, cpe_id: str) -> bytes:
        nr, wifi = self.rng.uniform(100, 900), self.rng.uniform(100, 900)
        return json.dumps({
            "schema": "mcw.telemetry.v2", "cpe_id": cpe_id,
            "time_ms": int(time.time() * 1000), "interval_ms": int(self.period_s * 1000),
            "wats": {"nr": {"rtt_ms": 20.0, "subflows": 1, "up": True,
                            "ul": {"delivered_mbps": nr, "cwnd": 10, "bytes_acked": 1000}},
                     "wifi": {"rtt_ms": 5.0, "subflows": 1, "up": True,
                              "ul": {"delivered_mbps": wifi, "cwnd": 10,
                                     "bytes_acked": 1000}}}}).encode()

    def _run(self) -> None:
        # Spread over the period in ten slices, as a real fleet's reports are: every tick has
        # fresh KPIs for some CPEs, so every replica publishes at every tick.
        slices = 10
        chunk = -(-len(self.cpes) // slices)
        next_at = time.monotonic()
        while not self.stop_event.is_set():
            for k in range(slices):
                for cpe in self.cpes[k * chunk:(k + 1) * chunk]:
                    self.client.client.publish(shard_topic(cpe, "telemetry"), self.doc(cpe),
                                               qos=0)
                    self.sent += 1
                next_at += self.period_s / slices
                if self.stop_event.wait(max(0.0, next_at - time.monotonic())):
                    return

    def start(self) -> Simulator:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(timeout=5)
        self.client.close()


class ProcessSimulator:
    """:class:`Simulator`'s telemetry, capacities in a random walk, from a process of its own
    (``tests/sharding/simulate.py``): thousands of messages a second need an interpreter of
    their own."""

    def __init__(self, broker: MosquittoBroker, n_cpes: int, period_s: float = 1.0,
                 prefix: str = "sim-") -> None:
        cert, key = broker.pki.cert(SIMULATOR)
        self.cmd = [sys.executable, "-m", "tests.sharding.simulate", "--port", str(broker.port),
                    "--ca", str(broker.pki.ca), "--cert", str(cert), "--key", str(key),
                    "--cpes", str(n_cpes), "--period", str(period_s), "--prefix", prefix]
        self.ids = [f"{prefix}{i:05d}" for i in range(n_cpes)]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ProcessSimulator:
        self.proc = subprocess.Popen(self.cmd, cwd=REPO, stdout=subprocess.DEVNULL)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Fleet:
    """Redis, Mosquitto and ``mcw run`` replicas; see the module docstring."""

    def __init__(self, root: Path, *, n_agents: int = 0, control_period_s: float = 0.5,
                 shard_lease_s: float = 1.0, weights_lease_s: float = 6.0,  # 0: the default
                 shards: int = 64, extra_env: dict[str, str] | None = None) -> None:
        self.root = root
        self.extra_env = dict(extra_env or {})
        self.control_period_s = control_period_s
        self.shard_lease_s = shard_lease_s
        self.weights_lease_s = weights_lease_s
        self.shards = shards
        self.pki: Pki = make_pki(root / "pki", n_cpes=max(1, n_agents))
        make_pki(root / "pki", n_cpes=1, first=900)
        acl = root / "acl"
        # The agents' config leaves mqtt.shards at its default: their grants are for 64 shards.
        acl.write_text(make_acl(cpes=pki_cpes(self.pki)) + SIM_ACL)
        self.broker = MosquittoBroker(self.pki, root / "broker", acl=acl).start()
        self.redis = RedisServer(root / "redis").start()
        self.replicas: dict[str, Replica] = {}
        self.agents: list[subprocess.Popen[bytes]] = []
        self.observer = Observer()
        self.dead_influx = free_port()  # nothing listens: InfluxDB is left out on purpose

    def start_observer(self) -> Observer:
        cert, key = self.pki.cert(SIMULATOR)
        settings = MqttSettings(host="127.0.0.1", port=self.broker.port,
                                ca_file=str(self.pki.ca), cert_file=str(cert),
                                key_file=str(key), client_id="sim")
        reader = MqttReader(settings, "observer")
        reader.on_connect = lambda c, *_: c.subscribe([("mcw/v1/cpe/+/weights", 1)])
        reader.on_subscribe = self.observer.on_subscribe
        reader.on_messages = self.observer.on_messages
        self.observer.client = reader
        reader.loop_start()
        assert self.observer.subscribed.wait(10), "the observer was not subscribed at QoS 1"
        return self.observer

    def env(self, replica_id: str, redis_port: int) -> dict[str, str]:
        cert, key = self.pki.cert("mcw-xapp")
        token = self.root / "influx-token"
        token.write_text("")
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("MCW_", "DBAAS_", "RMR_", "CONFIG_FILE"))}
        env.update({
            "DBAAS_SERVICE_HOST": "127.0.0.1", "DBAAS_SERVICE_PORT": str(redis_port),
            "MCW_INFLUXDB_URL": f"http://127.0.0.1:{self.dead_influx}",
            "MCW_INFLUXDB_TOKEN_FILE": str(token),
            "MCW_MQTT_HOST": "127.0.0.1", "MCW_MQTT_PORT": str(self.broker.port),
            "MCW_MQTT_CA_FILE": str(self.pki.ca), "MCW_MQTT_CERT_FILE": str(cert),
            "MCW_MQTT_KEY_FILE": str(key), "MCW_MQTT_CLIENT_ID": "mcw-xapp",
            "MCW_LOOP_CONTROL_PERIOD_S": str(self.control_period_s),
            "MCW_LOOP_KPI_MAX_AGE_S": "5",
            "MCW_LOOP_LEASE_S": str(self.weights_lease_s),
            "MCW_SHARDING_ENABLED": "true",
            "MCW_SHARDING_SHARDS": str(self.shards),
            "MCW_SHARDING_LEASE_S": str(self.shard_lease_s),
            "MCW_REPLICA_ID": replica_id,
            "MCW_SDL_NAMESPACE": "mcw",
            "MCW_LOG_LEVEL": "INFO",
            "HOSTNAME": replica_id,
            "PYTHONUNBUFFERED": "1",
            "OMP_NUM_THREADS": "1",
        })
        env.update(self.extra_env)
        return env

    def start_replica(self, replica_id: str, *, via_proxy: bool = False) -> Replica:
        proxy = CuttableProxy(self.redis.port) if via_proxy else None
        port = free_port()
        log_path = self.root / f"{replica_id}.log"
        cmd = [sys.executable, "-m", "xapp.cli", "run", "--http-host", "127.0.0.1",
               "--http-port", str(port), "--rmr", "off", "--sdl", "redis",
               "--estimator", "ewma", "--grace-s", "8", "--config-poll-s", "5"]
        env = self.env(replica_id, self.redis.port if proxy is None else proxy.port)
        with log_path.open("ab") as log:
            proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    cwd=REPO)
        r = Replica(replica_id, port, proc, log_path, proxy)
        self.replicas[replica_id] = r
        return r

    def start_agent(self, cpe_id: str) -> subprocess.Popen[bytes]:
        proc = start_dry_run_agent(self.root, cpe_id, self.broker.port, self.pki)
        self.agents.append(proc)
        return proc

    def agent_log(self, cpe_id: str) -> str:
        return dry_run_agent_log(self.root, cpe_id)

    def holders(self) -> dict[int, tuple[str, int]]:
        """shard -> (replica, epoch), read from Redis directly (not through any proxy)."""
        import redis as redis_py

        from xapp.adapters.shard_leases import ShardLeases

        client = redis_py.Redis(host="127.0.0.1", port=self.redis.port, socket_timeout=2)
        try:
            return ShardLeases(client, "mcw").holders(self.shards)
        finally:
            client.close()

    def pttl(self, shards: set[int]) -> dict[int, int]:
        import redis as redis_py

        client = redis_py.Redis(host="127.0.0.1", port=self.redis.port, socket_timeout=2)
        try:
            return {s: int(client.pttl(f"mcw:shard:{{{s}}}")) for s in shards}
        finally:
            client.close()

    def stop(self) -> None:
        for proc in self.agents:
            if proc.poll() is None:
                proc.terminate()
        for r in self.replicas.values():
            if r.running():
                r.proc.send_signal(signal.SIGTERM)
        for r in self.replicas.values():
            r.stop()
        for proc in self.agents:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.observer.close()
        self.broker.stop()
        self.redis.stop()


def version_regressions(seen: dict[str, list[tuple[float, int, int]]]) -> list[str]:
    """CPEs whose versions, in arrival order, ever repeat or go back."""
    bad = []
    for cpe, msgs in seen.items():
        versions = [v for _, v, _ in msgs]
        if any(b <= a for a, b in itertools.pairwise(versions)):
            bad.append(f"{cpe}: {versions}")
    return bad


def max_gap(msgs: list[tuple[float, int, int]], until: float) -> float:
    """The longest time without a weights message, from the first one to ``until``."""
    times = [t for t, _, _ in msgs]
    if not times:
        return float("inf")
    return max([b - a for a, b in itertools.pairwise(times)] + [until - times[-1]])


__all__ = ["AGENT_BINARY", "CuttableProxy", "Fleet", "Observer", "ProcessSimulator", "Replica",
           "Simulator", "max_gap", "version_regressions"]
