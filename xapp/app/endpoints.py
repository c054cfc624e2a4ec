"""The xApp's HTTP endpoints on port 8080: health, configuration and Prometheus metrics.

``GET /ric/v1/health/alive``  200 while every worker thread runs and none is stuck, else 503;
                              the body names each worker's state
``GET /ric/v1/health/ready``  200 when every dependency check passes, else 503; the body names
                              each check (``{"ready": false, "checks": {"sdl": false, ...}}``);
                              a component the supervisor gave up on is named in ``degraded``
                              with why, and its checks no longer decide (E2 lost is not A1
                              lost: ``{"ready": true, ..., "degraded": {"e2": "..."}}``);
                              a part switched off by its mode under ``disabled`` with the
                              reason (its check false, not counted for readiness)
``GET /ric/v1/config``        the running configuration (the descriptor, controls as applied)
``GET /ric/v1/cpes``          per CPE: the version and both directions' weights (and rate caps)
                              last published, and who applies each (``ul``: the CPE agent's
                              last reported state; ``dl``: the proxy applying it, or null) with
                              its semantics and the caps it applied
``GET /ric/v1/e2/subscriptions``  the E2 nodes, their KPM function and subscription (id, RIC
                              instance ids, state, last error, indications matched)
``GET /ric/v1/shards``        the shards this replica targets, holds and may act for
``POST /ric/v1/subscriptions/response``  the Subscription Manager's answers (when E2 is on)
``GET /metrics``              Prometheus text exposition

The server is a :class:`~http.server.ThreadingHTTPServer` (standard library): a few read-only
endpoints do not justify a web framework in the image.  The documents the process serves are
made here too (:func:`config_view`, :func:`cpes_view`, :func:`e2_view`, :func:`shards_view`),
from the parts :class:`xapp.app.process.XappProcess` hands them.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from xapp.app.config import LoadedConfig
from xapp.app.metrics import Metrics
from xapp.app.sharding import ShardManager
from xapp.app.wiring.e2 import E2Parts
from xapp.core.ownership import ShardFence
from xapp.core.ports import CpeRecord, DirectionRecord
from xapp.core.timings import Timings
from xapp.core.workers import Worker

if TYPE_CHECKING:  # the MQTT adapter is optional at run time (lab mode)
    from xapp.adapters.mqtt import AgentDirectory, CpeState, Downlink, MqttWeightPublisher

log = logging.getLogger(__name__)

ALIVE_PATH = "/ric/v1/health/alive"
READY_PATH = "/ric/v1/health/ready"
CONFIG_PATH = "/ric/v1/config"
METRICS_PATH = "/metrics"
CPES_PATH = "/ric/v1/cpes"
E2_SUBSCRIPTIONS_PATH = "/ric/v1/e2/subscriptions"
#: Where a replica says which shards it holds (``controls.sharding``).
SHARDS_PATH = "/ric/v1/shards"
#: A POST body larger than this is refused unread (submgr's notifications are ~300 bytes).
MAX_POST_BYTES = 64 * 1024

#: A POST handler: the request body -> (HTTP status, JSON answer).  It must not raise.
PostHandler = Callable[[bytes], tuple[int, Any]]


@dataclass
class Health:
    """Readiness checks by dependency name and the liveness check; each returns True when OK.

    A check that raises counts as failing (and is logged at DEBUG)."""

    ready_checks: dict[str, Callable[[], bool]] = field(default_factory=dict)
    #: ``(alive, {worker: state})``: the supervisor's verdict.
    alive_check: Callable[[], tuple[bool, dict[str, str]]] = lambda: (True, {})
    #: Components degraded now -> why (:meth:`xapp.core.workers.Supervisor.degraded`).
    degraded: Callable[[], Mapping[str, str]] = dict
    #: Ready check -> the component it belongs to; a degraded component's checks are reported
    #: but do not fail readiness (the pod would leave its Service, and A1 with it).
    components: Mapping[str, str] = field(default_factory=dict)
    #: Checks switched off by the configuration, with why (``--rmr auto`` without librmr):
    #: they still report what is true, but do not hold readiness back.
    disabled: Callable[[], dict[str, str]] = dict

    def readiness(self) -> tuple[bool, dict[str, bool]]:
        ok, results, _ = self.readiness_report()
        return ok, results

    def readiness_report(self) -> tuple[bool, dict[str, bool], dict[str, str]]:
        """``(ready, {check: up}, {degraded component: why})``."""
        try:
            degraded = dict(self.degraded())
        except Exception:
            log.exception("degradation check raised")
            degraded = {}
        results: dict[str, bool] = {}
        for name, check in self.ready_checks.items():
            try:
                results[name] = bool(check())
            except Exception:
                log.debug("readiness check %s raised", name, exc_info=True)
                results[name] = False
        off = self.switched_off()
        return all(up or self.components.get(name) in degraded or name in off
                   for name, up in results.items()), results, degraded

    def switched_off(self) -> dict[str, str]:
        try:
            return dict(self.disabled())
        except Exception:
            log.debug("the disabled checks raised", exc_info=True)
            return {}

    def alive(self) -> tuple[bool, dict[str, str]]:
        try:
            ok, workers = self.alive_check()
            return bool(ok), workers
        except Exception:
            log.exception("liveness check raised")
            return False, {}


class PeriodicCheck:
    """Runs a slow check (a network round trip) in a supervised worker; calling it returns the
    last result, so a readiness probe never waits on a dependency's timeout."""

    def __init__(self, name: str, check: Callable[[], bool], interval_s: float = 5.0) -> None:
        self._check = check
        self._ok = False
        self.worker = Worker(f"mcw-check-{name}", self.run_once, interval_s)

    def __call__(self) -> bool:
        return self._ok

    def run_once(self) -> bool:
        try:
            self._ok = bool(self._check())
        except Exception:
            log.debug("dependency check raised", exc_info=True)
            self._ok = False
        return self._ok

    def start(self) -> None:
        self.worker.start()

    def stop(self) -> None:
        self.worker.stop()


class _Server(ThreadingHTTPServer):
    """A client that hangs up mid-answer (a probe whose timeout fired, a scraper restarted) is
    the client's business: logged in one line, not as the standard library's traceback."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError):
            log.debug("http client %s went away: %s", client_address, exc)
            return
        log.warning("http request from %s failed: %r", client_address, exc)


class HttpServer:
    """Serves :class:`Health`, the config and the metrics on ``(host, port)``; port 0 picks one."""

    def __init__(self, health: Health, config: Callable[[], Mapping[str, Any]],
                 metrics: Metrics, host: str = "0.0.0.0", port: int = 8080,
                 views: Mapping[str, Callable[[], Any]] | None = None,
                 posts: Mapping[str, PostHandler] | None = None) -> None:
        self.health = health
        #: Extra read-only JSON documents by path (e.g. ``/ric/v1/cpes``).
        self.views = dict(views or {})
        #: POST endpoints by path (the Subscription Manager's callback).
        self.posts = dict(posts or {})
        self.config = config
        self.metrics = metrics
        handler = _make_handler(self)
        self._server = _Server((host, port), handler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.2}, name="mcw-http",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)


def _make_handler(app: HttpServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "mcw-xapp"
        #: Socket timeout: a client that stops sending (a POST body) frees its thread.
        timeout = 10.0

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == ALIVE_PATH:
                ok, workers = app.health.alive()
                self._json(200 if ok else 503, {"alive": ok, "workers": workers})
            elif path == READY_PATH:
                ok, checks, degraded = app.health.readiness_report()
                app.metrics.ready.set(1 if ok else 0)
                for name, up in checks.items():
                    app.metrics.dependency_up.labels(dependency=name).set(1 if up else 0)
                body: dict[str, Any] = {"ready": ok, "checks": checks}
                if degraded:
                    body["degraded"] = degraded
                off = app.health.switched_off()
                if off:
                    body["disabled"] = off
                self._json(200 if ok else 503, body)
            elif path == CONFIG_PATH:
                self._json(200, app.config())
            elif path == METRICS_PATH:
                self._send(200, app.metrics.exposition(),
                           "text/plain; version=0.0.4; charset=utf-8")
            elif path in app.views:
                self._json(200, app.views[path]())
            else:
                self._json(404, {"error": f"no such path {path}"})

        def do_POST(self) -> None:
            path = self.path.split("?", 1)[0]
            handler = app.posts.get(path)
            if handler is None:
                self._json(404, {"error": f"no such path {path}"})
                return
            try:
                length = int(self.headers.get("Content-Length") or "-1")
            except ValueError:
                length = -1
            if not 0 <= length <= MAX_POST_BYTES:
                self.close_connection = True  # the body is not read: do not reuse the stream
                self._json(413 if length > MAX_POST_BYTES else 411,
                           {"error": f"Content-Length must be 0..{MAX_POST_BYTES}"})
                return
            body = self.rfile.read(length)
            try:
                code, doc = handler(body)
            except Exception:  # handlers do not raise; a bug must still answer
                log.exception("POST %s handler failed", path)
                code, doc = 500, {"error": "internal error"}
            self._json(code, doc)

        def _json(self, code: int, doc: Any) -> None:
            self._send(code, json.dumps(doc).encode(), "application/json")

        def _send(self, code: int, body: bytes, ctype: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            # Probes hit these endpoints every few seconds; access logs only at DEBUG.
            log.debug("http %s - %s", self.address_string(), format % args)

    return Handler


def cpes_document(records: Mapping[str, CpeRecord], agents: Mapping[str, CpeState],
                  downlinks: Mapping[str, Downlink],
                  downlink_semantics: Callable[[Downlink], str | None]) -> dict[str, Any]:
    """``/ric/v1/cpes``: per CPE, what the xApp last published (one version, both directions'
    weights, shares, mode, reason, policy and, for a ``rate-caps`` applier, ``caps_mbps``, for an
    applier that takes them the traffic ``classes``) and
    who applies each direction: ``ul`` the CPE agent as it last reported (online or not; null
    before any report), ``dl`` the proxy whose report says it applies the CPE's downlink (null:
    nobody does, the proxy or the CPE runs its defaults), each with its ``semantics`` and the
    ``applied_caps_mbps`` and ``applied_classes`` it reports (``dl`` also its ``alarm``:
    ``address-conflict`` when another
    CPE the proxy serves claims one of this CPE's addresses).  ``agent`` is the CPE agent's last
    state in full.

    ``downlink_semantics`` is :meth:`AgentDirectory.downlink_semantics
    <xapp.adapters.mqtt.AgentDirectory.downlink_semantics>`: a proxy may report its semantics
    in its own state only, and the view must say what the loop decided caps by."""
    out: dict[str, Any] = {}
    for cpe_id in sorted(set(records) | set(agents) | set(downlinks)):
        record = records.get(cpe_id)
        agent = agents.get(cpe_id)
        down = downlinks.get(cpe_id)
        out[cpe_id] = {
            "published": None if record is None else {
                "version": record.version, "time_s": record.time_s,
                **{name: _direction_view(record.direction(name)) for name in ("dl", "ul")}},
            "applied_by": {
                "ul": None if agent is None else {
                    "role": "cpe", "online": agent.online,
                    "applied_version": agent.applied_version,
                    "applied_weights": dict(agent.applied_weights),
                    "semantics": agent.semantics,
                    "applied_caps_mbps": dict(agent.applied_caps_mbps),
                    "applied_classes": dict(agent.applied_classes)},
                "dl": None if down is None else {
                    "role": "proxy", "proxy_id": down.proxy_id, "online": down.state.online,
                    "applied_version": down.state.applied_version,
                    "applied_weights": dict(down.state.applied_weights),
                    "semantics": downlink_semantics(down),
                    "applied_caps_mbps": dict(down.state.applied_caps_mbps),
                    "applied_classes": dict(down.state.applied_classes),
                    "backend": down.state.backend, "alarm": down.state.alarm,
                    "last_error": down.state.last_error},
            },
            "agent": None if agent is None else {
                "online": agent.online, "applied_version": agent.applied_version,
                "applied_weights": dict(agent.applied_weights), "backend": agent.backend,
                "semantics": agent.semantics,
                "applied_caps_mbps": dict(agent.applied_caps_mbps),
                "on_off_only": agent.on_off_only, "links": dict(agent.links),
                "addresses": dict(agent.addresses),
                "directions_coupled": agent.directions_coupled,
                "last_error": agent.last_error},
        }
    return {"cpes": out}


def _direction_view(d: DirectionRecord) -> dict[str, Any]:
    view = {"weights": dict(d.weights), "shares": {w: round(v, 4) for w, v in d.shares.items()},
            "mode": d.mode, "reason": d.reason, "policy": d.policy_source,
            "aggregate_mbps": round(d.aggregate_mbps, 3)}
    # As on the wire: only a rate-caps applier's set carries caps, only an applier that takes
    # them classes (the reason says when the policy's were withheld).
    if d.caps_mbps:
        view["caps_mbps"] = dict(d.caps_mbps)
    if d.classes:
        view["classes"] = [c.to_dict() for c in d.classes]
    return view


def config_view(current: LoadedConfig, policy_type_ids: Sequence[int], timings: Timings,
                e2: E2Parts | None) -> dict[str, Any]:
    """``/ric/v1/config``: the configuration loaded last, the timings in force and E2 in
    short."""
    return {"path": None if current.path is None else str(current.path),
            "descriptor": current.document, "controls": current.controls.to_dict(),
            "policy_type_ids": list(policy_type_ids),
            # In force: a period change that needs a restart is not here until then.
            "timings": asdict(timings),
            "e2": {"active": e2 is not None,
                   "nodes": {} if e2 is None else e2.subscriber.states(),
                   "active_subscriptions": 0 if e2 is None else len(e2.book.active()),
                   "details": E2_SUBSCRIPTIONS_PATH}}


def e2_view(e2: E2Parts | None) -> dict[str, Any]:
    """``/ric/v1/e2/subscriptions``: nodes, KPM versions, styles, subscription and RIC
    instance ids, states, last errors, indication counters."""
    if e2 is None:
        return {"active": False, "reason": "controls.e2.submgr_url is empty or "
                "controls.e2.enabled is false"}
    return {"active": True, **e2.subscriber.view(),
            "indications": dict(e2.ingest.counters), "registry_cpes": len(e2.registry)}


def cpes_view(records: Mapping[str, CpeRecord], agents: AgentDirectory | None,
              fence: ShardFence, replica_id: str) -> dict[str, Any]:
    """``/ric/v1/cpes`` (:func:`cpes_document`), each CPE with its shard and whether this
    replica owns it now (``owner``: this replica's id, or null); ``agents`` is the MQTT
    channel's directory (None without the channel)."""
    if agents is None:
        doc = cpes_document(records, {}, {}, lambda _down: None)
    else:
        doc = cpes_document(records, agents.states(), agents.downlinks(),
                            agents.downlink_semantics)
    held = fence.held()
    for cpe_id, entry in doc["cpes"].items():
        shard = fence.shard(cpe_id)
        entry["shard"] = shard
        entry["owner"] = replica_id if shard in held else None
    doc["replica_id"] = replica_id
    return doc


def shards_view(manager: ShardManager | None, fence: ShardFence, replica_id: str,
                publisher: MqttWeightPublisher | None) -> dict[str, Any]:
    """``/ric/v1/shards``: the shards this replica targets, holds and may act for."""
    if manager is None:
        return {"enabled": False, "replica_id": replica_id, "shards": fence.shards,
                "held": "all"}
    # On this host's monotonic clock (CLOCK_MONOTONIC): when weights last left, to set
    # against a lease's end.
    return {**manager.view(),
            "last_publish_monotonic": None if publisher is None else publisher.last_sent_monotonic}
