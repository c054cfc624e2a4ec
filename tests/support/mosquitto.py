"""A real Mosquitto for tests: the shipped config and ACL, a test PKI, a free loopback port.

Usage::

    pki = make_pki(tmp_path / "pki", n_cpes=3)
    with MosquittoBroker(pki, tmp_path / "broker") as broker:
        client = connect_client(broker, "cpe-0001")
        ...

The broker runs ``/usr/sbin/mosquitto`` (or whatever ``mosquitto`` is on PATH) with
``broker/mosquitto.test.conf.in`` filled in and, unless a test gives its own, the ACL
``broker/make-acl.sh`` writes for every CPE certificate of the PKI (``broker/acl`` and one stanza
per CPE naming its shard), so the tests exercise exactly the security settings that ship.
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import ssl
import subprocess
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

from tests.support.polling import free_port, stop_process, wait_until
from xapp.core.shards import DEFAULT_SHARDS

REPO = Path(__file__).resolve().parents[2]
BROKER_DIR = REPO / "broker"
PKI_SCRIPT = BROKER_DIR / "make-test-pki.sh"
CONF_TEMPLATE = BROKER_DIR / "mosquitto.test.conf.in"
ACL_FILE = BROKER_DIR / "acl"
MAKE_ACL = BROKER_DIR / "make-acl.sh"


def mosquitto_binary() -> str | None:
    """Path of the mosquitto broker, or None when it is not installed."""
    found = shutil.which("mosquitto")
    if found:
        return found
    return "/usr/sbin/mosquitto" if os.access("/usr/sbin/mosquitto", os.X_OK) else None




def cpe_name(index: int) -> str:
    """The CN / cpe_id the PKI script gives CPE number ``index``."""
    return f"cpe-{index:04d}"


@dataclass(frozen=True)
class Pki:
    """Paths of a test PKI made by ``broker/make-test-pki.sh``."""

    root: Path

    @property
    def ca(self) -> Path:
        return self.root / "ca.crt"

    @property
    def server_cert(self) -> Path:
        return self.root / "server.crt"

    @property
    def server_key(self) -> Path:
        return self.root / "server.key"

    def cert(self, name: str) -> tuple[Path, Path]:
        """(certificate, key) for ``mcw-xapp``, ``rogue``, a proxy id (``proxy-*``) or a CPE id."""
        if name == "mcw-xapp":
            return self.root / "xapp.crt", self.root / "xapp.key"
        if name == "rogue":
            return self.root / "rogue.crt", self.root / "rogue.key"
        if name.startswith("proxy-"):
            return self.root / "proxy" / f"{name}.crt", self.root / "proxy" / f"{name}.key"
        return self.root / "cpe" / f"{name}.crt", self.root / "cpe" / f"{name}.key"


def make_pki(root: Path, n_cpes: int = 3, first: int = 1, jobs: int | None = None,
             n_proxies: int = 1) -> Pki:
    """Run the shipped PKI script into ``root`` (idempotent) and return its paths."""
    env = dict(os.environ)
    if jobs is not None:
        env["JOBS"] = str(jobs)
    subprocess.run(["bash", str(PKI_SCRIPT), str(root), str(n_cpes), str(first), str(n_proxies)],
                   check=True, capture_output=True, env=env)
    return Pki(Path(root))


def pki_cpes(pki: Pki) -> list[str]:
    """The CPE ids ``pki`` holds a certificate for, sorted."""
    return sorted(p.stem for p in (pki.root / "cpe").glob("*.crt"))


def make_acl(*proxies: str, cpes: Iterable[str] = (), shards: int = DEFAULT_SHARDS) -> str:
    """What ``broker/make-acl.sh`` prints: ``proxies`` as ``PROXY_ID:CPE,...`` arguments, and
    every CPE of ``cpes`` granted its own shard of ``shards``."""
    ids = ",".join(cpes)
    args = ["--shards", str(shards), *(["--cpes", ids] if ids else []), *proxies]
    return subprocess.run(["bash", str(MAKE_ACL), *args], capture_output=True, text=True,
                          check=True).stdout


def render_config(pki: Pki, workdir: Path, port: int, acl: Path = ACL_FILE) -> str:
    """The test config with every placeholder filled in (``acl``: e.g. make-acl.sh's output)."""
    values = {
        "@PORT@": str(port),
        "@CAFILE@": str(pki.ca),
        "@CERTFILE@": str(pki.server_cert),
        "@KEYFILE@": str(pki.server_key),
        "@ACLFILE@": str(acl),
        "@PERSISTDIR@": str(workdir / "db") + "/",
        "@LOGFILE@": str(workdir / "mosquitto.log"),
        "@USER@": getpass.getuser(),
    }
    text = CONF_TEMPLATE.read_text()
    for key, value in values.items():
        text = text.replace(key, value)
    if "@" in "".join(line.split("#", 1)[0] for line in text.splitlines()):
        raise ValueError("unfilled placeholder in mosquitto.test.conf.in")
    return text


@dataclass
class MosquittoBroker:
    """A mosquitto process on 127.0.0.1; ``restart()`` keeps port and persistence."""

    pki: Pki
    workdir: Path
    port: int = 0
    extra_config: str = ""
    #: None: make-acl.sh's ACL for every CPE certificate of ``pki`` (written at each start).
    acl: Path | None = None
    shards: int = DEFAULT_SHARDS
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False)

    def start(self, timeout_s: float = 10.0) -> MosquittoBroker:
        binary = mosquitto_binary()
        if binary is None:
            raise RuntimeError("mosquitto is not installed (apt-get install mosquitto)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "db").mkdir(exist_ok=True)
        if not self.port:
            self.port = free_port()
        conf = self.workdir / "mosquitto.conf"
        acl = self.acl
        if acl is None:
            acl = self.workdir / "acl"
            acl.write_text(make_acl(cpes=pki_cpes(self.pki), shards=self.shards))
        conf.write_text(render_config(self.pki, self.workdir, self.port, acl)
                        + self.extra_config)
        self.proc = subprocess.Popen([binary, "-c", str(conf)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        proc = self.proc

        def listening() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"mosquitto exited with {proc.returncode}: {self.log()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return True
            except OSError:
                return False

        if wait_until(listening, timeout_s, 0.02):
            return self
        self.stop()
        raise RuntimeError(f"mosquitto did not listen on {self.port}: {self.log()}")

    def stop(self) -> None:
        """Graceful stop (SIGTERM: mosquitto saves its persistence file)."""
        stop_process(self.proc)
        self.proc = None

    def kill(self) -> None:
        """Crash it (SIGKILL: no goodbye to clients)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self.proc = None

    def restart(self) -> MosquittoBroker:
        self.stop()
        return self.start()

    def log(self) -> str:
        path = self.workdir / "mosquitto.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def __enter__(self) -> MosquittoBroker:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


@dataclass
class Received:
    topic: str
    payload: bytes
    retain: bool
    qos: int


@dataclass
class TestClient:
    """A paho MQTT 5 client with a background loop and a record of what it received."""

    __test__ = False  # not a pytest test class

    client: mqtt.Client
    messages: list[Received] = field(default_factory=list)
    connect_rc: int | None = None
    suback: list[int] = field(default_factory=list)
    puback: dict[int, int] = field(default_factory=dict)
    cond: threading.Condition = field(default_factory=threading.Condition)

    def wait_for(self, predicate: Callable[[], bool], timeout_s: float = 5.0) -> bool:
        with self.cond:
            return self.cond.wait_for(predicate, timeout=timeout_s)

    def subscribe(self, topic: str, qos: int = 1, timeout_s: float = 5.0) -> list[int]:
        """Subscribe and wait for the SUBACK; returns its reason codes."""
        with self.cond:
            before = len(self.suback)
        self.client.subscribe(topic, qos=qos)
        if not self.wait_for(lambda: len(self.suback) > before, timeout_s):
            raise TimeoutError(f"no SUBACK for {topic}")
        return self.suback[before:]

    def publish(self, topic: str, payload: bytes | str, qos: int = 1, retain: bool = False,
                timeout_s: float = 5.0) -> int:
        """Publish and, for QoS 1, wait for the PUBACK; returns its reason code."""
        info = self.client.publish(topic, payload, qos=qos, retain=retain)
        if qos == 0:
            return 0
        if not self.wait_for(lambda: info.mid in self.puback, timeout_s):
            raise TimeoutError(f"no PUBACK for {topic}")
        return self.puback[info.mid]

    def on(self, topic: str) -> list[Received]:
        with self.cond:
            return [m for m in self.messages if m.topic == topic]

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def connect_client(broker: MosquittoBroker, name: str | None, client_id: str = "",
                   will: tuple[str, bytes] | None = None, timeout_s: float = 5.0,
                   wait: bool = True) -> TestClient:
    """Connect as ``name`` (a cert name of :meth:`Pki.cert`; None = no client certificate).

    With ``wait`` the call returns once CONNACK arrived (``connect_rc`` 0) or raises.
    """
    client = mqtt.Client(CallbackAPIVersion.VERSION2,
                         client_id=client_id or f"t-{name}-{id(broker)}",
                         protocol=MQTTProtocolVersion.MQTTv5)
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(broker.pki.ca))
    if name is not None:
        cert, key = broker.pki.cert(name)
        ctx.load_cert_chain(str(cert), str(key))
    client.tls_set_context(ctx)
    if will is not None:
        client.will_set(will[0], will[1], qos=1, retain=True)
    tc = TestClient(client)

    def on_connect(_c: mqtt.Client, _u: object, _f: object, rc: object,
                   _p: Properties | None = None) -> None:
        with tc.cond:
            tc.connect_rc = int(getattr(rc, "value", 0))
            tc.cond.notify_all()

    def on_message(_c: mqtt.Client, _u: object, msg: mqtt.MQTTMessage) -> None:
        with tc.cond:
            tc.messages.append(Received(msg.topic, bytes(msg.payload), bool(msg.retain), msg.qos))
            tc.cond.notify_all()

    def on_subscribe(_c: mqtt.Client, _u: object, _mid: int, rcs: list[ReasonCode],
                     _p: Properties) -> None:
        with tc.cond:
            tc.suback.extend(int(getattr(rc, "value", 0)) for rc in rcs)
            tc.cond.notify_all()

    def on_publish(_c: mqtt.Client, _u: object, mid: int, rc: object,
                   _p: Properties | None = None) -> None:
        with tc.cond:
            tc.puback[mid] = int(getattr(rc, "value", 0))
            tc.cond.notify_all()

    client.on_connect = on_connect
    client.on_message = on_message
    client.on_subscribe = on_subscribe
    client.on_publish = on_publish
    client.connect("127.0.0.1", broker.port, keepalive=30)
    client.loop_start()
    if wait and not tc.wait_for(lambda: tc.connect_rc is not None, timeout_s):
        tc.close()
        raise TimeoutError(f"{name}: no CONNACK")
    return tc
