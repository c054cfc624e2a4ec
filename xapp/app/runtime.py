"""``mcw run``: the xApp process in the near-RT RIC.

Start-up wires, in order: configuration (``$CONFIG_FILE``'s ``controls`` plus ``MCW_*``
overrides), JSON logging, metrics, the SDL state store (restores A1 policies, per-CPE weights and
versions), the A1 policy book and handler, the KPI source / capacity estimator / weight
publisher / telemetry sink, the control loop, E2 (when ``controls.e2.submgr_url`` is set: the
subscription book, the CPE registry and the KPM ingest, whose subscriber starts once the HTTP
server can take the Subscription Manager's callbacks), the HTTP server (health, config,
metrics, E2 subscriptions), RMR (A1 requests, health checks, ``A1_POLICY_QUERY``, RIC
indications, appmgr registration) and the config watcher.
SIGTERM or SIGINT stops everything in the reverse order within ``--grace-s`` seconds.

Lab mode (``--kpi-file``, ``--publish-file``) replaces InfluxDB and MQTT with files, for benches
and tests where those servers are not wanted; RMR, A1 and SDL stay real.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xapp.adapters.a1 import A1Handler, A1Resync, PolicyType, mediator_lister
from xapp.adapters.sdl import Restored, SdlStateStore, ricsdl_backend
from xapp.app.collector import ComponentCollector, E2Counters, ShardCollector
from xapp.app.config import (
    POD_IP_ENV,
    ConfigError,
    ConfigWatcher,
    Controls,
    LoadedConfig,
    load_config,
)
from xapp.app.endpoints import (
    CPES_PATH,
    E2_SUBSCRIPTIONS_PATH,
    Health,
    HttpServer,
    PeriodicCheck,
    PostHandler,
    cpes_document,
)
from xapp.app.json_logs import set_level, setup_logging
from xapp.app.metrics import Metrics
from xapp.app.runner import LoopRunner, tune_gc
from xapp.core.forecast import CapacityEstimator, KpiFrame
from xapp.core.intake import LatestKpis
from xapp.core.issue_clock import IssueClock
from xapp.core.loop import ControlLoop, LoopSettings
from xapp.core.ownership import ShardedKpis, ShardFence
from xapp.core.policy import PolicyError
from xapp.core.policy_book import PolicyBook
from xapp.core.ports import KpiSource, TelemetrySink, WeightPublisher
from xapp.core.timings import Timings, derive_timings, restart_only
from xapp.core.workers import Supervisor, Worker

if TYPE_CHECKING:  # adapters are imported where they start, so lab mode needs no servers
    from xapp.adapters.e2.decoder import DecoderProcess
    from xapp.adapters.e2.ingest import KpmIngest
    from xapp.adapters.e2.registry import CpeRegistry
    from xapp.adapters.e2.subscriber import E2Subscriber
    from xapp.adapters.e2.subscription_book import SubscriptionBook
    from xapp.adapters.influx.intake import InfluxIntake
    from xapp.adapters.influx.store import InfluxStore
    from xapp.adapters.mqtt import (
        ChannelSubscriber,
        CpeState,
        MqttWeightPublisher,
        ProxyState,
    )
    from xapp.adapters.mqtt.versions import VersionStore
    from xapp.adapters.rmr import RmrGlue
    from xapp.app.sharding import ShardManager
    from xapp.model.adaptive import FamilyCalibration

log = logging.getLogger(__name__)

#: How long after start the process counts as alive without a tick (model load, first query).
STARTUP_GRACE_S = 30.0
#: How often InfluxDB is probed for /ric/v1/health/ready.
INFLUX_CHECK_S = 2.0
#: How often a replica that shares the fleet reads the A1 book from SDL.
A1_BOOK_SYNC_S = 1.0
#: How often SDL Redis' clock is read (the reference of the weights' issue times): a host
#: clock drifts by milliseconds a day, so this is about noticing a step soon.
CLOCK_READ_S = 2.0
#: The clock floor of a version block is the issue clock in ms times this (microseconds).
VERSIONS_PER_MS = 1000
#: A host clock further than this from Redis' is logged (the metric always says it).
CLOCK_SKEW_WARN_S = 1.0
#: Where a replica says which shards it holds (``controls.sharding``).
SHARDS_PATH = "/ric/v1/shards"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Run the multi-connectivity weights xApp: every control period, read per-WAT KPIs, "
        "forecast capacities, compute MPTCP WRR weights per CPE under the A1 policies in force "
        "and publish them to the CPE agents.  Serves /ric/v1/health/alive, "
        "/ric/v1/health/ready, /ric/v1/config and /metrics over HTTP.")
    parser.epilog = (
        "Environment: CONFIG_FILE (descriptor), MCW_<SECTION>_<KEY> overrides of controls "
        "(e.g. MCW_MQTT_HOST, MCW_LOOP_CONTROL_PERIOD_S, MCW_LOG_LEVEL), DBAAS_SERVICE_HOST/PORT "
        "(SDL), RMR_SEED_RT / RMR_RTG_SVC (RMR routes), HOSTNAME and SERVICE_* (appmgr "
        "registration), MCW_SCHEMAS_DIR.")
    parser.add_argument("--config", default=os.environ.get("CONFIG_FILE"),
                        help="config-file.json (default: $CONFIG_FILE; built-in defaults if "
                             "neither is set)")
    parser.add_argument("--schemas-dir", default=None,
                        help="directory with a1-policy-type-20100.json and controls.schema.json "
                             "(default: $MCW_SCHEMAS_DIR, /opt/mcw/schemas, the repo's schemas/)")
    parser.add_argument("--http-host", default="0.0.0.0", help="HTTP bind address")
    parser.add_argument("--http-port", type=int, default=8080, help="HTTP port (0: any free)")
    parser.add_argument("--rmr", choices=("auto", "on", "off"), default="auto",
                        help="RMR messaging: on fails without librmr_si.so, auto runs without "
                             "it (A1 disabled) when the library is absent (default: auto)")
    parser.add_argument("--rmr-port", type=int, default=4560, help="RMR data port")
    parser.add_argument("--sdl", choices=("redis", "memory"), default="redis",
                        help="state in SDL through ricsdl (DBAAS_SERVICE_HOST/PORT) or in memory "
                             "only (state is lost on restart)")
    parser.add_argument("--estimator", choices=("auto", "model", "ewma"), default="auto",
                        help="capacity forecasts from the model artifact (controls.model.path), "
                             "the EWMA baseline, or the model when it loads and EWMA otherwise")
    parser.add_argument("--kpi-file", type=Path, default=None,
                        help="lab mode: read KPIs from this JSON file instead of InfluxDB")
    parser.add_argument("--publish-file", type=Path, default=None,
                        help="lab mode: append weights to this JSON-lines file instead of MQTT")
    parser.add_argument("--grace-s", type=float, default=25.0,
                        help="shutdown deadline after SIGTERM (keep below the pod's "
                             "terminationGracePeriodSeconds)")
    parser.add_argument("--config-poll-s", type=float, default=2.0,
                        help="how often the config file is checked for changes")


@dataclass(frozen=True)
class RunOptions:
    """What ``mcw run``'s command line decides (see :func:`configure`), typed; everything else
    comes from the configuration file."""

    config: str | None = None
    schemas_dir: str | None = None
    http_host: str = "0.0.0.0"
    http_port: int = 8080
    rmr: str = "auto"
    rmr_port: int = 4560
    sdl: str = "redis"
    estimator: str = "auto"
    kpi_file: Path | None = None
    publish_file: Path | None = None
    grace_s: float = 25.0
    config_poll_s: float = 2.0

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> RunOptions:
        """The options of parsed arguments (each field from the flag of the same name)."""
        return cls(**{f: getattr(args, f) for f in cls.__dataclass_fields__})


@dataclass
class Components:
    """The loop's I/O, each with a readiness check and a stop function."""

    kpis: KpiSource
    estimator: CapacityEstimator
    model_version: Callable[[], str]
    publisher: WeightPublisher
    sink: TelemetrySink | None
    checks: dict[str, Callable[[], bool]] = field(default_factory=dict)
    stoppers: list[Callable[[], object]] = field(default_factory=list)
    #: Threads the components own (supervised), and probes of the threads that are not
    #: workers (the MQTT network loops): name -> (healthy, restart).
    workers: list[Worker] = field(default_factory=list)
    probes: dict[str, tuple[Callable[[], bool], Callable[[], object]]] = field(
        default_factory=dict)
    #: The MQTT publisher, channel subscriber and InfluxDB store and intake when they run (for
    #: metrics and ``/ric/v1/cpes``); None in lab mode.
    mqtt_publisher: MqttWeightPublisher | None = None
    subscriber: ChannelSubscriber | None = None
    influx: InfluxStore | None = None
    influx_intake: InfluxIntake | None = None
    #: The capacity model's input-check counters (None for the EWMA baseline).
    estimator_counters: Callable[[], Mapping[str, int]] | None = None
    #: The capacity model's lower-bound coverage and multiplier per family (None for the EWMA).
    estimator_calibration: Callable[[], Mapping[str, FamilyCalibration]] | None = None
    #: The in-memory intake every live source writes (the loop reads it unless in lab mode).
    intake: LatestKpis = field(default_factory=LatestKpis)


@dataclass
class E2Parts:
    """The E2 path when ``controls.e2`` is active: who subscribes, who matches, who decodes."""

    book: SubscriptionBook
    subscriber: E2Subscriber
    worker: Worker
    registry: CpeRegistry
    ingest: KpmIngest
    #: Decodes the indications RMR brings, in a process of its own, for ``ingest``.
    decoder: DecoderProcess
    stoppers: list[Callable[[], object]] = field(default_factory=list)


class XappProcess:
    """Everything ``mcw run`` runs, startable and stoppable in-process (tests use it too)."""

    def __init__(self, opts: RunOptions, config: LoadedConfig) -> None:
        self.opts = opts
        self.config = config
        self.started_monotonic = time.monotonic()
        self.stopping = threading.Event()
        self.metrics = Metrics()
        #: Knows every thread; /ric/v1/health/alive fails when one is dead or stuck.
        self.supervisor = Supervisor()
        controls = config.controls
        sharding = controls.sharding
        #: The timings in force (xapp.core.timings); a reload changes only the live ones.
        self.timings = timings_of(controls)
        #: controls.sharding is restart-only: the shard lease setting of the running process.
        self._shard_lease_setting = sharding.lease_s
        self.replica_id = sharding.effective_replica_id()
        # Off: one replica holds every shard for good, and nothing is leased (the former
        # behaviour).  On: the lease worker grants shards; the publisher and the loop ask.
        self.fence = ShardFence(sharding.shards, everything=not sharding.enabled)
        #: Stamps the weights' issue times: never below SDL Redis' clock nor what a previous
        #: owner of a shard issued, whatever this host's clock says (issue 33).
        self.issue_clock = IssueClock()
        self.clock_worker: Worker | None = None
        self._skew_warned = False
        self.shards: ShardManager | None = None
        self.book_sync: Worker | None = None
        if sharding.enabled and opts.sdl != "redis":
            raise RuntimeError("controls.sharding.enabled needs SDL (--sdl redis): the shard "
                               "leases and the weight versions live there")
        factory = ricsdl_backend if opts.sdl == "redis" else None
        self.state = SdlStateStore(controls.sdl_namespace, factory,
                                on_error=self.metrics.sdl_errors.inc,
                                on_restore=self._restore)
        self.book = PolicyBook(controls.default_policy)
        self.policy_type = PolicyType.load(opts.schemas_dir)
        self.handler_id = os.environ.get("HOSTNAME") or config.name
        self.a1 = A1Handler(self.book, self.policy_type, self.handler_id,
                            persistence=self.state, observe=self.metrics.observe_a1)
        # Restored instances stay provisional until the mediator confirms them (A1Resync).
        url = controls.a1.mediator_url
        self.resync = A1Resync(self.a1, mediator_lister(url) if url else None)
        if factory is not None:
            from xapp.adapters.dbaas import RedisVersionStore, redis_from_env

            # The tick waits for the store when a CPE needs a new block: a fraction of a
            # shard lease at most (the lease as it would be with sharding on), so a partition
            # holds back only the CPEs that need a block and, sharded, costs the replica little
            # of its lease's end.
            self.versions: VersionStore = RedisVersionStore(
                redis_from_env(controls.sdl_namespace,
                               timeout_s=self.timings.version_redis_timeout_s),
                controls.sdl_namespace, floor=self.version_floor)
            self.clock_worker = Worker("mcw-clock", self._read_clock, CLOCK_READ_S,
                                       deadline_s=30.0)
        else:
            from xapp.adapters.mqtt.versions import MemoryVersionStore

            self.versions = MemoryVersionStore()
        self.components: Components | None = None
        self.loop: ControlLoop | None = None
        self.runner: LoopRunner | None = None
        self.http: HttpServer | None = None
        self.rmr: RmrGlue | None = None
        #: Why RMR is off although asked for (``--rmr auto`` without librmr); "" otherwise.
        self.rmr_off_reason = ""
        self.e2: E2Parts | None = None
        self.watcher = ConfigWatcher(config, schemas=opts.schemas_dir,
                                     interval_s=opts.config_poll_s)
        self.watcher.subscribe(self._on_config)

    # --- start and stop -----------------------------------------------------------------------

    def start(self) -> None:
        c = self.config.controls
        # One synchronous SDL pass, so restored policies and weights are in force at the first
        # tick; if Redis is not there yet the flusher keeps trying and restores later.
        if self.state.enabled and not self.state.sync():
            log.warning("SDL not reachable at start (%s); running from memory",
                        self.state.last_error)
        self.state.start()
        if self.clock_worker is not None:
            # Before the first weights: a replica whose clock is behind issues on Redis' clock.
            try:
                self._read_clock()
            except Exception as exc:
                log.warning("could not read SDL Redis' clock at start (%s); the worker retries",
                            exc)
        self.components = build_components(self.opts, c, self.versions, self.fence,
                                           self.replica_id, self.issue_clock)
        comp = self.components
        if c.e2.active:
            self.e2 = build_e2(self.opts, c, comp, self.fence, self.replica_id)
        e2 = self.e2
        self.metrics.registry.register(ComponentCollector(
            publisher=comp.mqtt_publisher, subscriber=comp.subscriber,
            estimator_counters=comp.estimator_counters,
            estimator_calibration=comp.estimator_calibration, influx=comp.influx,
            published_version=self._published_version, workers=self.supervisor.check,
            degraded=self.supervisor.degradable,
            e2=None if e2 is None else E2Counters(
                states=e2.subscriber.states, subscriber=e2.subscriber.counts,
                indications=lambda: dict(e2.ingest.counters),
                unmatched=lambda: e2.book.misses,
                dropped=lambda: dict(e2.decoder.drops))))
        self.loop = ControlLoop(
            comp.kpis, comp.estimator, comp.publisher, comp.sink, self.book.resolver,
            self.state, model_version=comp.model_version, on_tick=self.metrics.record_tick,
            publisher_connects=_connects(comp.mqtt_publisher), settings=c.loop,
            # Only the MQTT channel knows which agents apply rate caps; without it no set
            # carries caps.
            semantics=comp.subscriber)
        self._start_shards(c)
        self.runner = LoopRunner(self.loop, on_error=self.metrics.tick_errors.inc)
        self.runner.start()
        for worker in (self.runner, self.state.worker, self.watcher.worker, *comp.workers):
            self.supervisor.add(worker)
        if self.clock_worker is not None:
            self.supervisor.add(self.clock_worker).start()
        for name, (healthy, restart) in comp.probes.items():
            self.supervisor.watch(name, healthy, restart)
        views: dict[str, Callable[[], Any]] = {CPES_PATH: self.cpes_view,
                                               E2_SUBSCRIPTIONS_PATH: self.e2_view,
                                               SHARDS_PATH: self.shards_view}
        posts: dict[str, PostHandler] = {}
        if e2 is not None:
            from xapp.adapters.e2.submgr_client import CALLBACK_PATH

            posts[CALLBACK_PATH] = e2.subscriber.on_response
        self.http = HttpServer(self.health(), lambda: self.config_view(), self.metrics,
                               host=self.opts.http_host, port=self.opts.http_port,
                               views=views, posts=posts)
        self.http.start()
        self._start_rmr()
        if e2 is not None:
            # After the HTTP server (submgr's callbacks) and RMR (the indications) are up.
            for worker in (e2.worker, e2.registry.worker):
                self.supervisor.add(worker)
            e2.registry.start()
            e2.worker.start()
        self.watcher.start()
        # Dead workers are replaced on the supervisor's own clock, not when a probe asks.
        self.supervisor.start()
        log.info("mcw xApp running: HTTP port %d, RMR %s, SDL %s, policy type %d",
                 self.http.port, "on" if self.rmr is not None else "off",
                 "redis" if self.state.enabled else "memory",
                 self.policy_type.policy_type_id)

    def _start_shards(self, c: Controls) -> None:
        """The lease worker (sharding on): one round before the first tick, so a replica
        that starts alone decides from its first tick, then every fifth of a lease."""
        manager = None
        if c.sharding.enabled:
            from xapp.adapters.dbaas import redis_from_env
            from xapp.adapters.shard_leases import ShardLeases
            from xapp.app.sharding import ShardManager

            lease_s = self.timings.shard_lease_s
            client = redis_from_env(c.sdl_namespace,
                                    timeout_s=self.timings.shard_redis_timeout_s)
            manager = ShardManager(ShardLeases(client, c.sdl_namespace), self.fence,
                                   self.replica_id, lease_s=lease_s,
                                   on_acquired=self._shards_acquired,
                                   on_released=self._shards_released,
                                   on_granted=self._shards_granted,
                                   issue_clock=self.issue_clock)
            try:
                manager.step()
            except Exception as exc:
                log.warning("first shard lease round failed (%s); the worker retries", exc)
            self.shards = manager
            self.supervisor.add(manager.start())
            # A step is one SCAN of the policy keys: a few per second cost Redis nothing.
            self.book_sync = Worker("mcw-a1-book", self._sync_book, A1_BOOK_SYNC_S,
                                    deadline_s=30.0)
            self.supervisor.add(self.book_sync).start()
            log.info("replica %s shares the fleet: %d shards, leases of %.2f s in %s:*",
                     self.replica_id, c.sharding.shards, lease_s, c.sdl_namespace)
        self.metrics.registry.register(ShardCollector(
            self.replica_id, self.fence.shards, self.fence.held, lambda: self.fence.fenced,
            None if manager is None else lambda: {"acquisitions": manager.acquisitions,
                                                  "losses": manager.losses,
                                                  "live": len(manager.live)}))

    def _sync_book(self) -> None:
        """Every replica answers A1 (the Service picks one per request) and every replica
        decides with the same policies: the book in SDL is the fleet's, and each replica
        follows it, an instance one replica took in reaching the others within a step."""
        stored = self.state.read_policies()
        if stored is None:
            return
        pending = self.state.pending_policies
        for iid, inst in stored.items():
            if self.book.get(iid) != inst:
                try:
                    self.book.put(inst)
                except PolicyError as exc:
                    log.error("A1 instance %s from SDL does not build: %s", iid, exc)
                    continue
                log.info("A1 instance %s taken from SDL (another replica received it)", iid)
        for inst in self.book.instances():
            if inst.instance_id not in stored and inst.instance_id not in pending:
                self.book.remove(inst.instance_id)
                log.info("A1 instance %s deleted in SDL (by another replica)", inst.instance_id)

    def _shards_acquired(self, shards: frozenset[int]) -> None:
        """Before the fence grants ``shards``: forget what was cached about their CPEs, so
        versions start above the previous owner's ceiling and no decision is held against
        weights another replica has replaced."""
        fence = self.fence

        def which(cpe_id: str) -> bool:
            return fence.shard(cpe_id) in shards

        comp = self.components
        if comp is not None and comp.mqtt_publisher is not None:
            comp.mqtt_publisher.forget(shards)
        # The records loaded at start (or written while this replica last held the shard)
        # would seed the loop's rows of CPEs it has not seen yet with stale weights.
        self.state.forget_cpes(which)
        if self.loop is not None:
            self.loop.forget(which)
        self._subscribe_shards(acquired=shards)

    def _shards_granted(self, _shards: frozenset[int]) -> None:
        if self.e2 is not None:
            # The new shards' E2 nodes are subscribed now, not after a whole poll period.
            self.e2.worker.wake()

    def _shards_released(self, shards: frozenset[int]) -> None:
        fence = self.fence
        # Not written later over the records of the shards' next owner (a replica cut off from
        # Redis would flush them when it comes back).
        self.state.forget_cpes(lambda cpe_id: fence.shard(cpe_id) in shards)
        self._subscribe_shards(released=shards)
        if self.e2 is not None:
            self.e2.worker.wake()  # delete the released nodes' subscriptions now

    def _subscribe_shards(self, acquired: frozenset[int] = frozenset(),
                          released: frozenset[int] = frozenset()) -> None:
        """Agent state and telemetry of the held shards only (the subscriber's topic
        filters, when it has them)."""
        comp = self.components
        sub = None if comp is None else comp.subscriber
        if sub is None:
            return
        manager = self.shards
        held = set(() if manager is None else manager.held) | set(acquired)
        sub.set_shards(frozenset(held - released))

    def _start_rmr(self) -> None:
        if self.opts.rmr == "off":
            return
        from xapp.adapters.rmr import RmrGlue, rmr_library_available

        ok, why = rmr_library_available()
        if not ok:
            if self.opts.rmr == "on":
                raise RuntimeError(why)
            log.warning("RMR disabled: %s; A1 policies arrive only through SDL", why)
            self.rmr_off_reason = (f"--rmr auto without the RMR library ({why}): no A1 "
                                   "requests or health checks over RMR; policies only from SDL")
            return
        replica, http_endpoint = appmgr_identity(self.replica_id, not self.fence.everything,
                                                 self.opts.http_port)
        self.rmr = RmrGlue(self.a1, lambda: self.state.connected, port=self.opts.rmr_port,
                           on_config_event=self.watcher.check,
                           on_query_sent=self.resync.query_sent,
                           indications=None if self.e2 is None else self.e2.decoder,
                           log_level=logging.getLogger().level,
                           replica_id=replica, http_endpoint=http_endpoint)
        self.rmr.start()
        decoder = [] if self.e2 is None else self.e2.decoder.workers()
        for worker in self.rmr.workers():
            # The decoder out of its budget costs E2, not A1 and the loop (a pod restart).
            self.supervisor.add(worker, degrades="e2" if worker in decoder else None)
        self.supervisor.watch("rmr-receive", self.rmr.rmr_healthy)

        def resync_step() -> None:
            if self.resync.step():
                resync.stop()  # done: the worker ends (a stopped worker is healthy)

        resync = self.supervisor.add(Worker("mcw-a1-resync", resync_step, 1.0))
        resync.start()

    def stop(self, grace_s: float = 25.0) -> None:
        """Stop in reverse order; every step is bounded so the whole fits in ``grace_s``."""
        deadline = time.monotonic() + grace_s
        self.stopping.set()

        def left(share: float) -> float:
            return max(0.5, (deadline - time.monotonic()) * share)

        self.supervisor.stop(timeout_s=left(0.05))  # restarts nothing that is being stopped
        if self.clock_worker is not None:
            # Left running it went on reading a Redis that was gone, for the process's life.
            self.clock_worker.stop(timeout_s=left(0.05))
        self.watcher.stop()
        if self.book_sync is not None:
            self.book_sync.stop(timeout_s=left(0.1))
        if self.e2 is not None:
            # Unsubscribe first, while the HTTP server and RMR still run.
            self.e2.worker.stop(timeout_s=left(0.2))
            try:
                self.e2.subscriber.stop(timeout_s=left(0.25))
            except Exception:
                log.exception("deleting the E2 subscriptions failed")
            for stopper in self.e2.stoppers:
                try:
                    stopper()
                except Exception:
                    log.exception("stopping an E2 component failed")
        if self.runner is not None and not self.runner.stop(timeout_s=left(0.3)):
            log.warning("control loop did not finish its tick before the deadline")
        if self.shards is not None:
            comp = self.components
            if comp is not None and comp.mqtt_publisher is not None:
                comp.mqtt_publisher.flush(min(2.0, left(0.1)))
            # Hand the shards back now: the others take them at their next round.
            self.shards.stop(timeout_s=left(0.1))
        if self.rmr is not None:
            self.rmr.stop(timeout_s=left(0.4))
        if self.components is not None:
            for stopper in self.components.stoppers:
                try:
                    stopper()
                except Exception:
                    log.exception("stopping a component failed")
        self.state.stop(timeout_s=left(0.5))
        if self.http is not None:
            self.http.stop()
        log.info("mcw xApp stopped")

    # --- health, config ------------------------------------------------------------------------

    def health(self) -> Health:
        checks: dict[str, Callable[[], bool]] = {"running": lambda: not self.stopping.is_set()}
        components: dict[str, str] = {}
        if self.opts.rmr != "off":
            # False until RMR runs, and false for good in auto mode without librmr: A1 is
            # dead then, which "disabled" explains without failing readiness (issue 33).
            checks["rmr"] = lambda: self.rmr is not None and self.rmr.rmr_healthy()
        if self.state.enabled:
            checks["sdl"] = lambda: self.state.connected
        if self.shards is not None:
            manager = self.shards
            checks["shard-leases"] = manager.healthy
        if self.e2 is not None and self.opts.rmr != "off":
            # Indications arrive only through RMR: no decoder is needed (or started) without.
            e2 = self.e2
            checks["e2-decoder"] = lambda: self.rmr is None or e2.decoder.healthy()
            components["e2-decoder"] = "e2"
        comp = self.components
        if comp is not None:
            checks.update(comp.checks)
        return Health(checks, self.alive, self.supervisor.degraded, components,
                      disabled=lambda: ({"rmr": self.rmr_off_reason} if self.rmr_off_reason
                                        else {}))

    def alive(self) -> tuple[bool, dict[str, str]]:
        """Every worker runs and none is stuck (the supervisor restarts dead ones within its
        budget first); the body of /ric/v1/health/alive names each worker's state."""
        statuses = self.supervisor.check()
        return (all(st.healthy for st in statuses),
                {st.name: st.describe() for st in statuses})

    def config_view(self) -> dict[str, Any]:
        current = self.watcher.current
        e2 = self.e2
        return {"path": None if current.path is None else str(current.path),
                "descriptor": current.document, "controls": current.controls.to_dict(),
                "policy_type_id": self.policy_type.policy_type_id,
                # In force: a period change that needs a restart is not here until then.
                "timings": asdict(self.timings),
                "e2": {"active": e2 is not None,
                       "nodes": {} if e2 is None else e2.subscriber.states(),
                       "active_subscriptions": 0 if e2 is None else len(e2.book.active()),
                       "details": E2_SUBSCRIPTIONS_PATH}}

    def e2_view(self) -> dict[str, Any]:
        """``/ric/v1/e2/subscriptions``: nodes, KPM versions, styles, subscription and RIC
        instance ids, states, last errors, indication counters."""
        e2 = self.e2
        if e2 is None:
            return {"active": False, "reason": "controls.e2.submgr_url is empty or "
                    "controls.e2.enabled is false"}
        return {"active": True, **e2.subscriber.view(),
                "indications": dict(e2.ingest.counters), "registry_cpes": len(e2.registry)}

    def cpes_view(self) -> dict[str, Any]:
        """``/ric/v1/cpes`` (:func:`xapp.app.endpoints.cpes_document`), each CPE with its
        shard and whether this replica owns it now (``owner``: this replica's id, or null)."""
        comp = self.components
        sub = None if comp is None else comp.subscriber
        if sub is None:
            doc = cpes_document(self.state.cpes(), {}, {}, lambda _down: None)
        else:
            doc = cpes_document(self.state.cpes(), sub.states(), sub.downlinks(),
                                sub.downlink_semantics)
        fence = self.fence
        held = fence.held()
        for cpe_id, entry in doc["cpes"].items():
            shard = fence.shard(cpe_id)
            entry["shard"] = shard
            entry["owner"] = self.replica_id if shard in held else None
        doc["replica_id"] = self.replica_id
        return doc

    def shards_view(self) -> dict[str, Any]:
        """``/ric/v1/shards``: the shards this replica targets, holds and may act for."""
        if self.shards is None:
            return {"enabled": False, "replica_id": self.replica_id,
                    "shards": self.fence.shards, "held": "all"}
        comp = self.components
        pub = None if comp is None else comp.mqtt_publisher
        # On this host's monotonic clock (CLOCK_MONOTONIC): when weights last left, to set
        # against a lease's end.
        return {**self.shards.view(),
                "last_publish_monotonic": None if pub is None else pub.last_sent_monotonic}

    def _on_config(self, old: LoadedConfig, new: LoadedConfig) -> None:
        c = new.controls
        set_level(c.log_level)
        in_force = (self.loop.settings.lease_s if self.loop is not None
                    else old.controls.loop.lease_s)
        loop, self.timings, warnings = loop_on_reload(
            c.loop, self.timings, self.timings_in_use(), self._shard_lease_setting,
            sharded=self.shards is not None, lease_in_force_s=in_force)
        for warning in warnings:
            log.warning("%s", warning)
        if self.loop is not None:
            self.loop.settings = loop
        try:
            self.book.set_default(c.default_policy)
        except PolicyError as exc:
            log.error("new default_policy refused, the previous one stays: %s", exc)
        restart_only = [name for name in ("influxdb", "mqtt", "model", "sdl_namespace", "a1",
                                          "e2", "sharding")
                        if _restart_only_changed(old.controls, new.controls, name)]
        if restart_only:
            log.warning("controls %s changed; connections keep their settings until the "
                        "next restart", ", ".join(restart_only))
        self.config = new

    def timings_in_use(self) -> frozenset[str]:
        """The timings a running component holds (xapp.core.timings.Timings fields): those a
        reload cannot change without a restart."""
        names = {"control_period_s"}
        if self.shards is not None:
            names |= {"shard_lease_s", "shard_redis_timeout_s"}
        if self.state.enabled:  # the weights version store is on Redis
            names.add("version_redis_timeout_s")
        comp = self.components
        if comp is not None and comp.influx is not None:
            names |= {"influx_timeout_ms", "influx_flush_s"}
        if comp is not None and comp.influx_intake is not None:
            names |= {"intake_poll_s", "intake_overlap_s"}
        return frozenset(names)

    def _restore(self, restored: Restored) -> None:
        for inst in restored.policies:
            if self.book.get(inst.instance_id) is not None:
                continue  # an A1 request got here first; it is newer
            if not self.resync.admits(inst.instance_id):
                log.warning("A1 instance %s restored from SDL is not at the mediator; removed",
                            inst.instance_id)
                self.state.delete_policy(inst.instance_id)
                continue
            try:
                self.book.put(inst)
            except PolicyError as exc:
                log.error("restored A1 instance %s no longer builds: %s", inst.instance_id, exc)

    def _published_version(self, cpe_id: str) -> int:
        record = self.state.cpe(cpe_id)
        return 0 if record is None else record.version

    def version_floor(self, cpe_id: str) -> int:
        """The least version a block read from the store may start from: the last version
        the state store remembers, the version the CPE's agent reports applied, and the issue
        clock in microseconds.  The last holds when SDL lost everything and no agent has
        reported yet: a CPE's versions grow by one per publish, a few a second, so versions
        that started from the clock stay below it (docs/guarantees.md); in microseconds they
        stay below JSON's 2^53 until the year 2255."""
        floor = max(self._published_version(cpe_id),
                    self.issue_clock.now_ms() * VERSIONS_PER_MS)
        comp = self.components
        subscriber = None if comp is None else comp.subscriber
        if subscriber is not None:
            st = subscriber.state(cpe_id)
            if st is not None:
                floor = max(floor, st.applied_version)
        return floor

    def _read_clock(self) -> None:
        from xapp.adapters.dbaas import RedisVersionStore, sample_redis_clock

        store = self.versions
        if not isinstance(store, RedisVersionStore):
            return
        sample_redis_clock(store.client, self.issue_clock)
        skew = self.issue_clock.skew_s()
        if skew is None:
            return
        self.metrics.clock_skew.set(skew)
        far = abs(skew) > CLOCK_SKEW_WARN_S
        if far and not self._skew_warned:
            log.warning("this host's clock is %+.3f s off SDL Redis' clock: weights are issued "
                        "on Redis' clock (mcw_clock_skew_seconds); fix the host's time "
                        "synchronisation", skew)
        elif not far and self._skew_warned:
            log.info("this host's clock is back within %.1f s of SDL Redis' clock (%+.3f s)",
                     CLOCK_SKEW_WARN_S, skew)
        self._skew_warned = far


def _restart_only_changed(old: Controls, new: Controls, name: str) -> bool:
    a, b = getattr(old, name), getattr(new, name)
    if name == "model":  # reload_check_s is the loader's
        return bool(a.path != b.path)
    return bool(a != b)


def timings_of(c: Controls) -> Timings:
    """The timings of controls ``c`` (:func:`xapp.core.timings.derive_timings`, the one
    derivation)."""
    return derive_timings(c.loop.control_period_s, c.sharding.lease_s)


def loop_on_reload(wanted: LoopSettings, running: Timings, in_use: frozenset[str],
                   shard_lease_setting: float, *, sharded: bool, lease_in_force_s: float
                   ) -> tuple[LoopSettings, Timings, list[str]]:
    """What a running process makes of a reloaded ``controls.loop``: the loop settings it
    applies, the timings then in force, and a warning for each change it keeps back.

    A new period is applied only when no timing derived from it that a running component
    holds (``in_use``) would change: otherwise the loop would tick at one period and the rest
    run at another (a 15 s shard lease beside a 1 s period, past the weights' lease).  Such a
    change needs a restart; the period in force stays and the warning names what would have
    changed.  A weights lease at or below the running shard lease is kept back too."""
    warnings: list[str] = []
    loop = wanted
    timings = derive_timings(wanted.control_period_s, shard_lease_setting)
    fixed = restart_only(running, timings, in_use)
    if fixed:
        names = ", ".join(f"{name} {a:g} -> {b:g}" for name, (a, b) in fixed.items())
        warnings.append(
            f"controls.loop.control_period_s {running.control_period_s:g} s -> "
            f"{wanted.control_period_s:g} s needs a restart: {names} cannot change in a "
            f"running process; the period stays {running.control_period_s:g} s until then")
        loop = replace(loop, control_period_s=running.control_period_s)
        timings = running
    if sharded and timings.shard_lease_s >= loop.lease_s:
        warnings.append(
            f"controls.loop.lease_s {loop.lease_s:g} s refused: it must stay above the running "
            f"shard lease ({timings.shard_lease_s:g} s); {lease_in_force_s:g} s stays")
        loop = replace(loop, lease_s=lease_in_force_s)
    return loop, timings, warnings


def _connects(publisher: MqttWeightPublisher | None) -> Callable[[], int] | None:
    if publisher is None:
        return None
    return lambda: publisher.stats.connects


def build_components(opts: RunOptions, controls: Controls, versions: VersionStore,
                     fence: ShardFence | None = None, replica_id: str = "",
                     issue_clock: IssueClock | None = None) -> Components:
    """KPI intake, estimator, publisher and sink from the controls (or lab files).

    The loop reads KPIs from the in-memory intake (:class:`~xapp.core.intake.LatestKpis`):
    MQTT telemetry lands there as it arrives, and the InfluxDB intake adds, once a second, the
    RAN KPIs that only InfluxDB has.  In lab mode a JSON file stands in for both.
    """
    stoppers: list[Callable[[], object]] = []
    checks: dict[str, Callable[[], bool]] = {}
    workers: list[Worker] = []
    probes: dict[str, tuple[Callable[[], bool], Callable[[], object]]] = {}
    estimator, model_version, estimator_counters, calibration = _estimator(
        opts, controls, stoppers, workers)
    sink: TelemetrySink | None
    kpis: KpiSource
    influx: InfluxStore | None = None
    influx_intake: InfluxIntake | None = None
    intake = LatestKpis()
    if opts.kpi_file is not None:
        from xapp.adapters.lab import FileKpiSource, NullSink

        kpis, sink = FileKpiSource(opts.kpi_file), NullSink()
    else:
        from xapp.adapters.influx.intake import InfluxIntake

        influx = _influx(controls, checks, stoppers, workers)
        if fence is not None and not fence.everything:
            influx.shard_of = fence.shard
        # Other writers (RAN KPI exporters) do not tag a shard, so the intake filters the rows
        # it read rather than the query.
        held = None if fence is None or fence.everything else fence
        t = timings_of(controls)
        influx_intake = InfluxIntake(influx, intake, interval_s=t.intake_poll_s,
                                     overlap_s=t.intake_overlap_s,
                                     accept=None if held is None else held.mask)
        workers.append(influx_intake.start())
        stoppers.insert(0, influx_intake.stop)
        kpis, sink = intake, influx
    if fence is not None and not fence.everything:
        # The loop decides only CPEs of the shards held now.
        kpis = ShardedKpis(kpis, fence)
    publisher: WeightPublisher
    mqtt_publisher: MqttWeightPublisher | None = None
    subscriber: ChannelSubscriber | None = None
    if opts.publish_file is not None:
        from xapp.adapters.lab import JsonlPublisher

        publisher = JsonlPublisher(opts.publish_file, versions)
    else:
        mqtt_publisher, subscriber = _mqtt(controls, versions, intake, sink, checks, stoppers,
                                           workers, fence, replica_id, issue_clock)
        # paho's network thread and the publisher's own select loop are not Workers: the
        # supervisor probes them and restarts a dead one within its budget.
        probes["mqtt-publisher"] = (mqtt_publisher.healthy, mqtt_publisher.restart)
        probes["mqtt-subscriber"] = (subscriber.healthy, subscriber.restart)
        publisher = mqtt_publisher
    return Components(kpis, estimator, model_version, publisher, sink, checks, stoppers,
                      workers, probes, mqtt_publisher=mqtt_publisher, subscriber=subscriber,
                      influx=influx, influx_intake=influx_intake,
                      estimator_counters=estimator_counters, estimator_calibration=calibration,
                      intake=intake)


def appmgr_identity(replica_id: str, sharded: bool, http_port: int,
                    environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(replica id, HTTP endpoint) this pod registers with at the appmgr
    (:func:`xapp.adapters.rmr.appmgr_register_body`): its own entry with several replicas,
    the frame's one shared entry ("", "") with one."""
    if not sharded:
        return "", ""
    env = os.environ if environ is None else environ
    pod_ip = env.get(POD_IP_ENV, "").strip()
    return replica_id, f"{pod_ip}:{http_port}" if pod_ip else ""


def build_e2(opts: RunOptions, controls: Controls, comp: Components,
             fence: ShardFence | None = None, replica_id: str = "") -> E2Parts:
    """The E2 path (not started): nodes from the R-NIB and/or ``controls.e2.nodes``, the
    subscriber, the book, the CPE registry and the KPM ingest writing into the intake and
    InfluxDB like agent telemetry (:class:`AgentTelemetry`)."""
    from xapp.adapters.e2 import kpm_decode
    from xapp.adapters.e2.decoder import DecoderProcess
    from xapp.adapters.e2.ingest import KpmIngest
    from xapp.adapters.e2.nodes import (
        CombinedNodes,
        NodeSource,
        OwnedNodes,
        RnibNodes,
        StaticNode,
        StaticNodes,
        ricsdl_rnib_backend,
    )
    from xapp.adapters.e2.registry import CpeRegistry
    from xapp.adapters.e2.subscriber import E2Subscriber
    from xapp.adapters.e2.subscription_book import SubscriptionBook
    from xapp.adapters.e2.subscription_request import E2SubscribeSettings
    from xapp.adapters.e2.subscription_store import (
        IdStore,
        MemoryIdStore,
        NodeRecords,
        SdlIdStore,
        SdlNodeRecords,
    )

    e = controls.e2
    redis = opts.sdl == "redis"
    sources: list[NodeSource] = []
    stoppers: list[Callable[[], object]] = []
    if e.nodes:
        sources.append(StaticNodes([StaticNode(n.inventory_name, n.ran_function_id,
                                               n.kpm_version, n.report_styles,
                                               cell=n.cell or None,
                                               prb_total=n.prb_total or None)
                                    for n in e.nodes]))
    if e.rnib and redis:
        rnib = RnibNodes(ricsdl_rnib_backend, kpm_decode.decode_ran_function_description)
        sources.append(rnib)
        stoppers.append(rnib.close)
    elif e.rnib:
        log.warning("controls.e2.rnib needs SDL (--sdl redis); only controls.e2.nodes are used")
    if not sources:
        log.warning("E2 is on but no node source is configured; nothing will be subscribed")
    nodes: NodeSource = CombinedNodes(sources)
    if fence is not None and not fence.everything:
        # Several replicas: each subscribes the nodes of the shards it holds (OwnedNodes).
        nodes = OwnedNodes(nodes, fence.allows)
    sharded = fence is not None and not fence.everything
    client_host = e.effective_client_host(sharded)
    if sharded and client_host == e.client_host:
        log.warning("several replicas but %s is not set: submgr answers %s, which may reach "
                    "another pod (the chart sets it from the pod IP)", POD_IP_ENV, client_host)
    settings = E2SubscribeSettings(
        submgr_url=e.submgr_url, client_host=client_host, http_port=e.http_port,
        rmr_port=e.rmr_port, requestor_id=e.requestor_id, match_requestor=e.match_requestor,
        measurements=e.measurements, report_styles=e.report_styles,
        report_period_ms=e.report_period_ms, granularity_ms=e.granularity_ms)
    book = SubscriptionBook(e.requestor_id, match_requestor=e.match_requestor)
    ids: IdStore = (SdlIdStore(controls.sdl_namespace, ricsdl_backend,
                               key=f"e2/subscriptions/{replica_id}" if sharded
                               else "e2/subscriptions") if redis
                    else MemoryIdStore())
    # Per node, shared: the node's next owner deletes what a dead replica left at submgr.
    records: NodeRecords | None = None
    if redis:
        from xapp.adapters.dbaas import redis_from_env

        records = SdlNodeRecords(controls.sdl_namespace,
                                 lambda: redis_from_env(controls.sdl_namespace,
                                                        timeout_s=settings.http_timeout_s))
    subscriber = E2Subscriber(settings, nodes, book, ids=ids, records=records,
                              owner=replica_id)
    # A step reads the nodes and makes a few HTTP calls of at most http_timeout_s each.
    worker = Worker("mcw-e2-subscriptions", subscriber.step, e.poll_period_s,
                    deadline_s=max(60.0, 3 * e.poll_period_s))
    # The registry's own namespace (xapp.adapters.e2.registry), where its CLI provisions CPEs.
    registry = CpeRegistry(backend_factory=ricsdl_backend if redis else None)
    stoppers.append(registry.stop)
    ingest = KpmIngest(book, registry, AgentTelemetry(comp.intake, comp.sink),
                       names=e.measurement_map())
    return E2Parts(book, subscriber, worker, registry, ingest, DecoderProcess(ingest), stoppers)


def _estimator(opts: RunOptions, controls: Controls,
               stoppers: list[Callable[[], object]], workers: list[Worker]
               ) -> tuple[CapacityEstimator, Callable[[], str],
                          Callable[[], Mapping[str, int]] | None,
                          Callable[[], Mapping[str, FamilyCalibration]] | None]:
    if opts.estimator in ("auto", "model"):
        try:
            from xapp.model.online import ModelEstimator, ModelHolder

            holder = ModelHolder(controls.model.path, controls.model.public_key_file,
                                 plausible_mbps=controls.model.plausible_mbps)
            workers.append(holder.start(interval_s=controls.model.reload_check_s))
            stoppers.append(holder.stop)
            from xapp.core.exploration import ExploringEstimator

            model = ModelEstimator(holder, stale_after_s=controls.loop.kpi_max_age_s * 2,
                                   level=controls.model.planning_level)
            log.info("capacity model %s loaded from %s", model.version, controls.model.path)
            # The model's forecasts, with bounded exploration where delivered throughput was
            # censored by the weights, so no WAT is locked out (xapp.core.exploration).
            return (ExploringEstimator(model), lambda: str(model.version),
                    model.counters.as_dict, model.calibration)
        except Exception as exc:
            if opts.estimator == "model":
                raise RuntimeError(f"capacity model not loadable: {exc}") from exc
            log.warning("capacity model not loadable (%s); using the EWMA baseline", exc)
    from xapp.core.ewma import EwmaEstimator

    return EwmaEstimator(), lambda: "ewma-baseline", None, None


def _influx(controls: Controls, checks: dict[str, Callable[[], bool]],
            stoppers: list[Callable[[], object]], workers: list[Worker]) -> InfluxStore:
    from xapp.adapters.influx.store import InfluxConfig, InfluxStore

    i = controls.influxdb
    # Reads and writes run on their own threads, never on the tick.
    t = timings_of(controls)
    timeout_ms = t.influx_timeout_ms
    # Points this replica writes carry its id, and its InfluxDB intake skips them (they are in
    # its intake already).
    writer = controls.sharding.effective_replica_id()
    store = InfluxStore(InfluxConfig(url=i.url, bucket=i.bucket, org=i.org,
                                     token=_read_token(i.token_file), timeout_ms=timeout_ms,
                                     writer=writer))
    workers.append(store.start(t.influx_flush_s))
    stoppers.append(store.close)
    check = PeriodicCheck("influxdb", store.ping, interval_s=INFLUX_CHECK_S)
    check.run_once()  # ready reflects InfluxDB from the first probe, not after one interval
    check.start()
    stoppers.append(check.stop)
    workers.append(check.worker)
    checks["influxdb"] = check
    return store


def _read_token(path: str) -> str:
    """The InfluxDB token from its Secret file; empty (no auth, InfluxDB 1.8) if absent."""
    try:
        return Path(path).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        log.warning("InfluxDB token file %s not found; connecting without a token", path)
        return ""


def _mqtt(controls: Controls, versions: VersionStore, intake: LatestKpis,
          sink: TelemetrySink | None, checks: dict[str, Callable[[], bool]],
          stoppers: list[Callable[[], object]], workers: list[Worker],
          fence: ShardFence | None = None, replica_id: str = "",
          issue_clock: IssueClock | None = None
          ) -> tuple[MqttWeightPublisher, ChannelSubscriber]:
    from xapp.adapters.mqtt import ChannelSubscriber, MqttSettings, MqttWeightPublisher

    m = controls.mqtt
    client_id = m.client_id
    if controls.sharding.enabled:
        # A broker drops the older of two sessions with one client id: each replica its own.
        client_id = f"{m.client_id}-{replica_id}"
    settings = MqttSettings(host=m.host, port=m.port, client_id=client_id, ca_file=m.ca_file,
                            cert_file=m.cert_file, key_file=m.key_file)
    try:
        publisher = MqttWeightPublisher(
            settings, versions, fence=fence,
            issue_ms=None if issue_clock is None else issue_clock.now_ms).start()
    except OSError as exc:  # the TLS files come from a Secret; say which one is missing
        raise RuntimeError(f"MQTT TLS material not usable: {exc.strerror or exc} "
                           f"({exc.filename or m.ca_file}); see controls.mqtt.*_file") from exc
    # Connected is not enough: a stopped broker keeps the connection open (issue 22).
    checks["broker"] = publisher.answering
    stoppers.append(publisher.stop)
    # Agent telemetry (subflow throughput, RTT, cwnd) goes into InfluxDB with the radio KPIs,
    # one point per message and WAT so each keeps its own time; agent states are logged when they
    # change and served on /ric/v1/cpes.
    states = _AgentStateLog()
    subscriber = ChannelSubscriber(
        settings, on_telemetry=AgentTelemetry(intake, sink), on_state=states,
        on_proxy_state=states.proxy, shard_count=controls.sharding.shards)
    if controls.sharding.enabled:
        # Nothing until the first lease round says which shards are this replica's: each
        # replica receives its own shards' telemetry and states only.
        subscriber.set_shards(frozenset())
    subscriber.start()
    stoppers.append(subscriber.stop)
    # Telemetry reaches the callback in batches, on the subscriber's own worker: supervised
    # with the others (a dead or stuck batcher fails /ric/v1/health/alive).
    workers.append(subscriber.telemetry_worker)
    return publisher, subscriber


class AgentTelemetry:
    """Agent telemetry as it arrives (a batch at a time, on the subscriber's batch worker): into
    the intake the next tick reads, and into InfluxDB's write buffer (flushed by its own
    thread)."""

    def __init__(self, intake: LatestKpis, sink: TelemetrySink | None) -> None:
        self.intake = intake
        self.sink = sink

    def __call__(self, frame: KpiFrame) -> None:
        self.intake.update(frame)
        if self.sink is not None:
            self.sink.write_kpis(frame)


class _AgentStateLog:
    """Logs agent states as they change: online/offline transitions at INFO, errors at
    WARNING, every applied version at DEBUG (a fleet applies thousands per second)."""

    def __init__(self) -> None:
        self._online: dict[tuple[str, str], bool] = {}
        self._lock = threading.Lock()

    def __call__(self, state: CpeState) -> None:
        key = (state.proxy_id or "", state.cpe_id)
        with self._lock:
            was = self._online.get(key)
            self._online[key] = bool(state.online)
        who = (f"agent of CPE {state.cpe_id}" if state.proxy_id is None
               else f"proxy {state.proxy_id} for CPE {state.cpe_id} (downlink)")
        if not state.online:
            if was is not False:
                log.warning("%s is offline", who)
        elif state.last_error:
            log.warning("%s applied version %d with error: %s", who, state.applied_version,
                        state.last_error)
        elif was is not True:
            log.info("%s is online (%s backend, applied version %d)", who,
                     state.backend or "unknown", state.applied_version)
        else:
            log.debug("%s applied version %d", who, state.applied_version)

    def proxy(self, state: ProxyState) -> None:
        """A proxy's own state: online/offline transitions and errors."""
        key = (state.proxy_id, "")
        with self._lock:
            was = self._online.get(key)
            self._online[key] = bool(state.online)
        if not state.online:
            if was is not False:
                log.warning("proxy %s is offline", state.proxy_id)
        elif state.last_error:
            log.warning("proxy %s reports an error: %s", state.proxy_id, state.last_error)
        elif was is not True:
            log.info("proxy %s is online (%s backend, %d CPEs, %d applied)", state.proxy_id,
                     state.backend or "unknown", state.cpes, state.cpes_applied)


def run(args: argparse.Namespace) -> int:
    opts = RunOptions.from_args(args)
    try:
        config = load_config(opts.config, schemas=opts.schemas_dir)
    except ConfigError as exc:
        print(f"mcw run: {exc}", flush=True)
        return 2
    setup_logging(config.controls.log_level, name=config.name)
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("signal %d received; stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    process: XappProcess | None = None
    try:
        process = XappProcess(opts, config)
        process.start()
        tune_gc()
    except Exception as exc:
        log.error("start-up failed: %s", exc)
        if process is not None:
            process.stop(opts.grace_s)
        return 1
    stop.wait()
    process.stop(opts.grace_s)
    return 0
