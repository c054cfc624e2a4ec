"""The xApp process ``mcw run`` runs in the near-RT RIC: what it starts, in which order, what
its health says, what a reload changes, and how it stops.

Start-up wires, in order: configuration (``$CONFIG_FILE``'s ``controls`` plus ``MCW_*``
overrides), JSON logging, metrics, the SDL state store (restores A1 policies, per-CPE weights and
versions), the A1 policy book and handler, the KPI source / capacity estimator / weight
publisher / telemetry sink, the control loop, E2 (when ``controls.e2.submgr_url`` is set: the
subscription book, the CPE registry and the KPM ingest, whose subscriber starts once the HTTP
server can take the Subscription Manager's callbacks), the HTTP server (health, config,
metrics, E2 subscriptions), RMR (A1 requests, health checks, ``A1_POLICY_QUERY``, RIC
indications, appmgr registration) and the config watcher.  Each part is built in
:mod:`xapp.app.wiring`.  :meth:`XappProcess.stop` stops everything in the reverse order
within a deadline.

Lab mode (``--kpi-file``, ``--publish-file``) replaces InfluxDB and MQTT with files, for benches
and tests where those servers are not wanted; RMR, A1 and SDL stay real.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from xapp.adapters.a1 import A1Handler, A1Resync, mediator_lister
from xapp.adapters.a1_types import load_policy_types
from xapp.adapters.e2.submgr_client import CALLBACK_PATH
from xapp.adapters.rmr import RmrGlue
from xapp.adapters.sdl import Restored, SdlStateStore, ricsdl_backend
from xapp.app.collector import ComponentCollector, E2Counters, ShardCollector
from xapp.app.config import ConfigWatcher, Controls, LoadedConfig
from xapp.app.endpoints import (
    CPES_PATH,
    E2_SUBSCRIPTIONS_PATH,
    SHARDS_PATH,
    Health,
    HttpServer,
    PostHandler,
    config_view,
    cpes_view,
    e2_view,
    shards_view,
)
from xapp.app.json_logs import set_level
from xapp.app.metrics import Metrics
from xapp.app.reload import loop_on_reload, restart_only_changes, timings_of
from xapp.app.run_options import RunOptions
from xapp.app.runner import LoopRunner
from xapp.app.wiring.components import Components, build_components
from xapp.app.wiring.e2 import E2Parts, build_e2
from xapp.app.wiring.rmr import build_rmr, supervise_rmr
from xapp.app.wiring.shards import FleetSharing
from xapp.app.wiring.versions import RedisClock, build_versions, version_floor
from xapp.core.issue_clock import IssueClock
from xapp.core.loop import ControlLoop
from xapp.core.ownership import ShardFence
from xapp.core.policy import PolicyError
from xapp.core.policy_book import PolicyBook
from xapp.core.ports import VersionStore
from xapp.core.workers import Supervisor

log = logging.getLogger(__name__)


class XappProcess:
    """Everything ``mcw run`` runs, startable and stoppable in-process (tests use it too)."""

    def __init__(self, opts: RunOptions, config: LoadedConfig) -> None:
        self.opts = opts
        self.config = config
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
        #: The lease worker and the A1 book's follower (sharding on), once started.
        self.sharing: FleetSharing | None = None
        if sharding.enabled and opts.sdl != "redis":
            raise RuntimeError("controls.sharding.enabled needs SDL (--sdl redis): the shard "
                               "leases and the weight versions live there")
        factory = ricsdl_backend if opts.sdl == "redis" else None
        self.state = SdlStateStore(controls.sdl_namespace, factory,
                                   on_error=self.metrics.sdl_errors.inc,
                                   on_restore=self._restore)
        self.book = PolicyBook(controls.default_policy)
        self.a1 = A1Handler(self.book, load_policy_types(opts.schemas_dir),
                            os.environ.get("HOSTNAME") or config.name,
                            persistence=self.state, observe=self.metrics.observe_a1)
        # Restored instances stay provisional until the mediator confirms them (A1Resync).
        url = controls.a1.mediator_url
        self.resync = A1Resync(self.a1, mediator_lister(url) if url else None)
        versions, clock = build_versions(
            controls.sdl_namespace if factory is not None else None, self.timings,
            self.version_floor, self.issue_clock, self.metrics.clock_skew.set)
        self.versions: VersionStore = versions
        #: Reads SDL Redis' clock into the issue clock (None with SDL in memory).
        self.clock: RedisClock | None = clock
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
        if self.clock is not None:
            # Before the first weights: a replica whose clock is behind issues on Redis' clock.
            try:
                self.clock.read()
            except Exception as exc:
                log.warning("could not read SDL Redis' clock at start (%s); the worker retries",
                            exc)
        self.components = build_components(self.opts, c, self.timings, self.versions,
                                           self.fence, self.replica_id, self.issue_clock)
        comp = self.components
        if c.e2.active:
            self.e2 = build_e2(self.opts, c, comp.intake, comp.sink, self.fence,
                               self.replica_id)
        e2 = self.e2
        agents = None if comp.subscriber is None else comp.subscriber.directory
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
            publisher_connects=comp.publisher_connects(), settings=c.loop,
            # Only the MQTT channel knows which agents apply rate caps; without it no set
            # carries caps.
            semantics=agents)
        self._start_sharing(c, comp, self.loop)
        self.runner = LoopRunner(self.loop, on_error=self.metrics.tick_errors.inc)
        self.runner.start()
        for worker in (self.runner, self.state.worker, self.watcher.worker, *comp.workers):
            self.supervisor.add(worker)
        if self.clock is not None:
            self.supervisor.add(self.clock.worker).start()
        for name, (healthy, restart) in comp.probes.items():
            self.supervisor.watch(name, healthy, restart)
        sharing = self.sharing
        views: dict[str, Callable[[], Any]] = {
            CPES_PATH: lambda: cpes_view(self.state.cpes(), agents, self.fence, self.replica_id),
            E2_SUBSCRIPTIONS_PATH: lambda: e2_view(e2),
            SHARDS_PATH: lambda: shards_view(None if sharing is None else sharing.manager,
                                             self.fence, self.replica_id, comp.mqtt_publisher)}
        posts: dict[str, PostHandler] = {}
        if e2 is not None:
            posts[CALLBACK_PATH] = e2.subscriber.on_response
        self.http = HttpServer(self.health(),
                               lambda: config_view(self.watcher.current,
                                                   self.a1.type_ids,
                                                   self.timings, e2),
                               self.metrics, host=self.opts.http_host, port=self.opts.http_port,
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
        log.info("mcw xApp running: HTTP port %d, RMR %s, SDL %s, policy types %s",
                 self.http.port, "on" if self.rmr is not None else "off",
                 "redis" if self.state.enabled else "memory",
                 ", ".join(map(str, self.a1.type_ids)))

    def _start_sharing(self, c: Controls, comp: Components, loop: ControlLoop) -> None:
        """The lease worker (sharding on), and the shard metrics either way."""
        if c.sharding.enabled:
            self.sharing = FleetSharing(
                c, self.timings, self.fence, self.replica_id, self.issue_clock, self.state,
                self.book, loop, comp.mqtt_publisher, comp.subscriber,
                None if self.e2 is None else self.e2.worker)
            self.sharing.start(self.supervisor)
        manager = None if self.sharing is None else self.sharing.manager
        self.metrics.registry.register(ShardCollector(
            self.replica_id, self.fence.shards, self.fence.held, lambda: self.fence.fenced,
            None if manager is None else lambda: {"acquisitions": manager.acquisitions,
                                                  "losses": manager.losses,
                                                  "live": len(manager.live)}))

    def _start_rmr(self) -> None:
        e2 = self.e2
        decoder = None if e2 is None else e2.decoder
        self.rmr, self.rmr_off_reason = build_rmr(
            self.opts.rmr, self.opts.rmr_port, self.opts.http_port, self.a1, self.resync,
            lambda: self.state.connected, self.watcher.check, decoder, self.replica_id,
            not self.fence.everything)
        if self.rmr is None:
            return
        self.rmr.start()
        supervise_rmr(self.rmr, self.supervisor, decoder, self.resync)

    def stop(self, grace_s: float = 25.0) -> None:
        """Stop in reverse order; every step is bounded so the whole fits in ``grace_s``."""
        deadline = time.monotonic() + grace_s
        self.stopping.set()

        def left(share: float) -> float:
            return max(0.5, (deadline - time.monotonic()) * share)

        self.supervisor.stop(timeout_s=left(0.05))  # restarts nothing that is being stopped
        if self.clock is not None:
            # Left running it went on reading a Redis that was gone, for the process's life.
            self.clock.worker.stop(timeout_s=left(0.05))
        self.watcher.stop()
        if self.sharing is not None:
            self.sharing.book_sync.stop(timeout_s=left(0.1))
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
        if self.sharing is not None:
            comp = self.components
            if comp is not None and comp.mqtt_publisher is not None:
                comp.mqtt_publisher.flush(min(2.0, left(0.1)))
            # Hand the shards back now: the others take them at their next round.
            self.sharing.manager.stop(timeout_s=left(0.1))
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

    # --- health, reload, state ---------------------------------------------------------------

    def health(self) -> Health:
        checks: dict[str, Callable[[], bool]] = {"running": lambda: not self.stopping.is_set()}
        components: dict[str, str] = {}
        if self.opts.rmr != "off":
            # False until RMR runs, and false for good in auto mode without librmr: A1 is
            # dead then, which "disabled" explains without failing readiness (issue 33).
            checks["rmr"] = lambda: self.rmr is not None and self.rmr.rmr_healthy()
        if self.state.enabled:
            checks["sdl"] = lambda: self.state.connected
        if self.sharing is not None:
            checks["shard-leases"] = self.sharing.manager.healthy
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

    def _on_config(self, old: LoadedConfig, new: LoadedConfig) -> None:
        c = new.controls
        set_level(c.log_level)
        in_force = (self.loop.settings.lease_s if self.loop is not None
                    else old.controls.loop.lease_s)
        loop, self.timings, warnings = loop_on_reload(
            c.loop, self.timings, self.timings_in_use(), self._shard_lease_setting,
            sharded=self.sharing is not None, lease_in_force_s=in_force)
        for warning in warnings:
            log.warning("%s", warning)
        if self.loop is not None:
            self.loop.settings = loop
        try:
            self.book.set_default(c.default_policy)
        except PolicyError as exc:
            log.error("new default_policy refused, the previous one stays: %s", exc)
        restart_only = restart_only_changes(old.controls, new.controls)
        if restart_only:
            log.warning("controls %s changed; connections keep their settings until the "
                        "next restart", ", ".join(restart_only))
        self.config = new

    def timings_in_use(self) -> frozenset[str]:
        """The timings a running component holds (xapp.core.timings.Timings fields): those a
        reload cannot change without a restart."""
        names = {"control_period_s", "tick_deadline_s"}  # the loop and its worker
        if self.sharing is not None:
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
        """The least version a block read from the store may start from
        (:func:`xapp.app.wiring.versions.version_floor`)."""
        published = self._published_version(cpe_id)
        issue_ms = self.issue_clock.now_ms()
        comp = self.components
        subscriber = None if comp is None else comp.subscriber
        agent = None if subscriber is None else subscriber.directory.state(cpe_id)
        return version_floor(published, issue_ms,
                             None if agent is None else agent.applied_version)
