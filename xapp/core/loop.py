"""The control loop: KPIs in, capacity forecasts, per-CPE and per-direction weights out, every
control period.

This is the only code that turns forecasts into published weights: ``mcw run`` drives it with
the real adapters, the twin, ``mcw demo`` and the benches with in-memory ones.  One
:meth:`ControlLoop.tick`:

1. reads the newest KPIs of every (cpe, wat, direction) from the
   :class:`~xapp.core.ports.KpiSource` (the in-memory :class:`~xapp.core.intake.LatestKpis`: no
   I/O on the tick); rows without a direction apply to both (:meth:`KpiFrame.expanded`);
2. forecasts next-period capacities for all rows at once with the
   :class:`~xapp.core.forecast.CapacityEstimator` and writes them to the sink: each CPE's
   once per ``forecast_history_s``, a slice of the fleet each tick (forecasts are derived
   data: the KPIs they came from are kept at full resolution, and the model version with
   them, so any forecast can be made again; at 10,000 CPEs every tick's would be 60,000
   points a second, more than one InfluxDB 1.8 takes beside the telemetry);
3. decides every *due* (CPE, direction) at once (:func:`xapp.core.decisions.decide_batch`, one
   call per effective A1 policy and direction, :meth:`Policy.for_direction`): a CPE is due when
   its policy's ``update_period_s`` has elapsed, its policy changed, or a publish is owed.
   Hysteresis holds against the decision in force of that direction, or is skipped after a
   policy change;
4. publishes one batch through the :class:`~xapp.core.ports.WeightPublisher`, one message per
   CPE with both sets: CPEs whose weights or mode changed in either direction, whose publish is
   owed, and every CPE whose weights in force are half a lease old (the agents revert to safe
   weights when the lease runs out).  The direction that did not change goes with its set in
   force (:func:`xapp.core.outgoing.message_sets` makes the messages);
5. records what was published in the per-direction :class:`~xapp.core.fleet.FleetTable` and
   the :class:`~xapp.core.ports.StateStore`, and writes the weights to the sink.

Rules decided once (README, "The control loop"):

* a WAT reported with **no usable forecast** (NaN, negative) that is not reported down is
  *tried* at the CPE's smallest forecast, so it carries a small share and gets measured; left at
  0 it would never be measured again (the censoring trap).  A CPE with no forecast at all tries
  every reported WAT at 1 Mbps: plain round-robin until something is known;
* a WAT whose ``up`` column is 0 is not usable, but keeps the weight a decision with it up
  gives it, for its return (:mod:`xapp.core.returning`: the agents mask it while it is down);
* a CPE with no KPI rows is left alone: its lease runs out on the agent, which is right when the
  xApp no longer knows anything about it;
* when the policy leaves no usable WAT, the weights in force stay (and keep their lease);
* a direction with no KPI rows of its own for a CPE this tick (an agent that reports one
  direction only) is decided from the other direction's forecasts, the best knowledge there
  is, but under its *own* effective policy (exclusions, floors, bounds, mode, update period;
  reason ``follows ul: ...``): a message needs both sets, and a set that follows must not
  carry weights its own policy forbids (issue 22).  Its hysteresis holds against what it
  followed last; it decides from its own rows as soon as it has them, without hysteresis
  against what it followed;
* a direction whose policy leaves no usable WAT and that has no set in force carries the
  other's set without its excluded WATs, or as it is when the CPE has only WATs it excludes
  (the reason says so): the other direction is still steered (issue 33).  A policy that
  excludes every WAT there is never gets here: it is refused when given.

* a direction whose applier enforces shares as rate caps (``capabilities.semantics``
  ``rate-caps``, :class:`~xapp.core.ports.BackendSemantics`) carries ``caps_mbps``: headroom x
  each WAT's share x the total the central forecasts allow (:mod:`xapp.core.caps`); its set is
  sent again when a cap moves by half the headroom's margin, and a set that follows the other
  direction carries none.  Other appliers get the message they always got.

Everything here is synchronous and clock-free (``now_s`` is passed in).
"""

from __future__ import annotations

import logging
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

import numpy as np
from numpy.typing import NDArray

from xapp.core.caps import DEFAULT_HEADROOM
from xapp.core.class_columns import ClassSpec
from xapp.core.classes import specs_of
from xapp.core.columns import Appliers
from xapp.core.decisions import ERROR, NO_USABLE, OK, DecideBatch, Inputs, decide_batch
from xapp.core.extras import extras, withheld_reason
from xapp.core.fleet import FleetTable
from xapp.core.forecast import (
    DIRECTIONS,
    CapacityEstimator,
    CapacityForecast,
    KpiFrame,
    expansion,
)
from xapp.core.outgoing import Outgoing, message_sets
from xapp.core.ownership import Fenced
from xapp.core.policy import KNOWN_WATS, Policy
from xapp.core.policy_book import PolicyResolver
from xapp.core.ports import (
    BackendSemantics,
    KpiSource,
    Published,
    PublishResult,
    StateStore,
    TelemetrySink,
    WeightBatch,
    WeightPublisher,
)
from xapp.core.returning import with_return_weights
from xapp.core.rowmap import RowMap, inputs, row_map, with_caps_in_force
from xapp.core.rules import ClassRule
from xapp.core.weights import WeightError

log = logging.getLogger(__name__)

Array = NDArray[np.float64]
Mask = NDArray[np.bool_]


@dataclass(frozen=True)
class LoopSettings:
    """The control loop's settings (``controls.loop``, the one place they are defined): a
    config reload may change them between ticks."""

    #: Seconds between two ticks (every CPE is looked at each tick).
    control_period_s: float = 1.0
    #: KPIs older than this are not used.
    kpi_max_age_s: float = 5.0
    #: Lease of published weights: an agent reverts to safe weights without a newer message.
    lease_s: float = 30.0
    #: Rate caps for ``rate-caps`` appliers are this x a WAT's share of the forecast total
    #: (:mod:`xapp.core.caps`, where the default is argued).
    caps_headroom: float = DEFAULT_HEADROOM
    #: Each CPE's forecasts are written to the sink (InfluxDB) once per this many seconds, a
    #: slice of the fleet each tick; at most the control period writes every tick's.
    forecast_history_s: float = 10.0


#: Unchanged weights are sent again once this fraction of their lease has passed.
REFRESH_FRACTION: Final = 0.5


@dataclass
class TickReport:
    """What one tick did (returned for tests, handed to ``on_tick`` for metrics)."""

    time_s: float
    rows: int = 0
    cpes: int = 0
    #: (CPE, direction) decisions; ``decided_by_direction`` splits them.
    decided: int = 0
    decided_by_direction: dict[str, int] = field(default_factory=dict)
    #: Sets published as the other direction's (the direction had nothing of its own).
    followed: int = 0
    changed: int = 0
    held: int = 0
    no_usable: int = 0
    errors: int = 0
    published: dict[str, int] = field(default_factory=dict)
    publish_errors: int = 0
    #: CPEs whose weights the publisher fenced (their shard's lease lapsed during the tick).
    fenced: int = 0
    #: Sets sent without their policy's traffic classes: the applier takes fewer.
    classes_withheld: int = 0
    skipped_rows: dict[str, int] = field(default_factory=dict)
    model_version: str = ""
    duration_s: float = 0.0


@dataclass(frozen=True)
class _Group:
    policy: Policy
    source: str
    positions: NDArray[np.intp]


class ControlLoop:
    """Runs ticks over injected ports; call :meth:`tick` from one thread at a time.

    Parameters
    ----------
    kpis, estimator, publisher, sink
        The loop's ports and model (see :mod:`xapp.core.ports`).  ``sink`` may be None.
    policies : callable
        Returns the current :class:`~xapp.core.policy_book.PolicyResolver`.
    state : StateStore
        Per-CPE records of what was published; read when a CPE is first seen (restart).
    model_version : callable, default=lambda: "unknown"
        The version of the model ``estimator`` runs (it may hot-reload between ticks).
    settings : LoopSettings, default=LoopSettings()
    on_tick : callable or None
        Called with every :class:`TickReport` (metrics).
    publisher_connects : callable or None
        The publisher's count of successful broker connections; when it grows after the first,
        every CPE's weights are re-sent (the broker may have lost its retained messages).
    decide : callable, default=decide_batch
        How a group of CPEs under one policy is decided; the benches pass
        :func:`~xapp.core.decisions.decide_per_cpe` for their baseline.
    semantics : BackendSemantics or None
        Which CPEs' directions are applied by a ``rate-caps`` backend; their sets carry
        ``caps_mbps`` (:func:`xapp.core.caps.rate_caps` of the weights and the central
        forecasts), and a set is sent again when its caps move (:func:`~xapp.core.caps.
        caps_moved`).  None: no agent is rate-caps (every message as without caps).
    """

    def __init__(self, kpis: KpiSource, estimator: CapacityEstimator,
                 publisher: WeightPublisher, sink: TelemetrySink | None,
                 policies: Callable[[], PolicyResolver], state: StateStore, *,
                 model_version: Callable[[], str] = lambda: "unknown",
                 settings: LoopSettings | None = None,
                 on_tick: Callable[[TickReport], None] | None = None,
                 publisher_connects: Callable[[], int] | None = None,
                 decide: DecideBatch = decide_batch,
                 semantics: BackendSemantics | None = None) -> None:
        self.kpis = kpis
        self.estimator = estimator
        self.publisher = publisher
        self.sink = sink
        self.policies = policies
        self.state = state
        self.model_version = model_version
        self.settings = settings or LoopSettings()
        self.on_tick = on_tick
        self.publisher_connects = publisher_connects
        self.decide = decide
        self.semantics = semantics
        #: One table per direction; a CPE has the same row in both.
        self.fleets = {d: FleetTable(state.cpe, d) for d in DIRECTIONS}
        self._connects_seen: int | None = None
        self._rowmap: tuple[object, object, RowMap] | None = None
        self._expanded: tuple[object, object, object, NDArray[np.intp], KpiFrame] | None = None
        self._history_hash: tuple[object, NDArray[np.int64]] | None = None
        self._groups: tuple[PolicyResolver, NDArray[np.intp], list[_Group]] | None = None
        self._specs_cache: dict[int, tuple[tuple[ClassRule, ...], tuple[ClassSpec, ...]]] = {}
        self._last_tick_monotonic: float | None = None
        self._lock = threading.Lock()
        self._forget: list[Callable[[str], bool]] = []
        self._forget_lock = threading.Lock()

    @property
    def fleet(self) -> FleetTable:
        """The uplink table: what the CPE agents apply."""
        return self.fleets["ul"]

    @property
    def last_tick_monotonic(self) -> float | None:
        """``time.monotonic()`` at the end of the last tick that ran (liveness)."""
        return self._last_tick_monotonic

    def forget(self, which: Callable[[str], bool]) -> None:
        """Before the next tick, drop the decisions in force of the CPEs ``which`` selects.

        For a replica that (re)acquires a shard: another replica may have published for those
        CPEs since, so what this one remembers is not what the agents have.  Their rows then
        count as never published: decided and sent at the next tick, without hysteresis against
        a stale set.  Queued rather than done here so the caller (the lease worker) never waits
        for a tick."""
        with self._forget_lock:
            self._forget.append(which)

    def _apply_forget(self) -> None:
        with self._forget_lock:
            pending, self._forget = self._forget, []
        for which in pending:
            rows = np.array([r for r, c in enumerate(self.fleet.ids) if which(c)],
                            dtype=np.intp)
            if len(rows):
                for fleet in self.fleets.values():
                    fleet.reset(rows)

    def tick(self, now_s: float) -> TickReport:
        """Run one control period at wall time ``now_s`` (seconds since the epoch)."""
        with self._lock:
            started = time.perf_counter()
            report = TickReport(time_s=now_s)
            try:
                self._tick(now_s, report)
            finally:
                report.duration_s = time.perf_counter() - started
                self._last_tick_monotonic = time.monotonic()
                if self.on_tick is not None:
                    self.on_tick(report)
            log.debug("tick %.3f: %d rows, %d CPEs, %d decided, %d published in %.1f ms",
                      now_s, report.rows, report.cpes, report.decided, len(report.published),
                      report.duration_s * 1e3)
            return report

    # --- one tick ---------------------------------------------------------------------------

    def _tick(self, now_s: float, report: TickReport) -> None:
        if self._forget:
            self._apply_forget()
        self._check_reconnect()
        # 1. The newest KPIs, a direction on every row.
        frame = self._directed(self.kpis.latest(now_s, self.settings.kpi_max_age_s))
        report.rows = len(frame)
        version = self.model_version()
        report.model_version = version
        self.state.set_model_version(version)
        if len(frame) == 0:
            return
        rm = self._row_map(frame)
        report.cpes = len(rm.cpe_ids)
        # 2. Forecasts for every row, knowing which WATs are capped; a slice to the sink.
        frame = with_caps_in_force(frame, rm, self.fleets)
        forecast = self.estimator.step(frame)
        if len(forecast.median_mbps) != len(frame) or len(forecast.lower_mbps) != len(frame):
            raise WeightError("estimator returned forecasts not aligned with the KPI rows")
        self._write_forecasts(frame, forecast, now_s, version)
        # 3. Every due (CPE, direction) decided.
        appliers = {d: Appliers(self._rate_caps_rows(d), self._class_room(d))
                    for d in DIRECTIONS}
        out, lent = self._decide(frame, forecast, rm, now_s, report, appliers)
        # 4. and 5. One batch published, and what went recorded.
        if any(o.rows for o in (*out.values(), *lent.values())):
            self._publish(out, lent, rm, now_s, report, appliers)

    def _check_reconnect(self) -> None:
        if self.publisher_connects is None:
            return
        connects = self.publisher_connects()
        seen, self._connects_seen = self._connects_seen, connects
        if seen is not None and connects > seen and seen > 0:
            n = len(self.fleet)
            log.info("publisher reconnected; re-sending the weights of %d CPEs", n)
            for fleet in self.fleets.values():
                fleet.unpublished[:n] |= fleet.has[:n]

    def _directed(self, frame: KpiFrame) -> KpiFrame:
        """The frame with a direction on every row (cached while its row arrays persist)."""
        if frame.directed:
            return frame
        cached = self._expanded
        if (cached is not None and cached[0] is frame.cpe and cached[1] is frame.wat
                and cached[2] is frame.direction):
            take, keys = cached[3], cached[4]
        else:
            take, direction = expansion(frame.direction, len(frame))
            keys = KpiFrame(time_s=frame.time_s, cpe=frame.cpe[take], wat=frame.wat[take],
                            direction=direction)
            self._expanded = (frame.cpe, frame.wat, frame.direction, take, keys)
        return KpiFrame(time_s=frame.time_s, cpe=keys.cpe, wat=keys.wat,
                        values={k: np.asarray(v)[take] for k, v in frame.values.items()},
                        direction=keys.direction, series=keys.series)

    def _write_forecasts(self, frame: KpiFrame, forecast: CapacityForecast, now_s: float,
                         version: str) -> None:
        if self.sink is None:
            return
        try:
            rows, forecasts = self._forecast_history(frame, forecast, now_s)
            if len(rows):
                self.sink.write_forecasts(rows, forecasts, version)
        except Exception:
            log.exception("writing forecasts failed")

    def _forecast_history(self, frame: KpiFrame, forecast: CapacityForecast, now_s: float
                          ) -> tuple[KpiFrame, CapacityForecast]:
        """The rows whose forecasts go to the sink this tick: each CPE's every
        ``forecast_history_s``, by a slot of its id's hash, so each tick writes an even slice
        of the fleet (every tick's, when the setting is at most one period)."""
        s = self.settings
        every = round(s.forecast_history_s / s.control_period_s)
        if every <= 1:
            return frame, forecast
        cached = self._history_hash
        if cached is not None and cached[0] is frame.cpe:
            hashes = cached[1]
        else:
            ids, pos = np.unique(frame.cpe.astype(str), return_inverse=True)
            per_cpe = np.array([zlib.crc32(c.encode()) for c in ids.tolist()], dtype=np.int64)
            hashes = per_cpe[pos.astype(np.intp)]
            self._history_hash = (frame.cpe, hashes)
        take = np.flatnonzero(hashes % every == int(now_s // s.control_period_s) % every)
        return (KpiFrame(time_s=frame.time_s, cpe=frame.cpe[take], wat=frame.wat[take],
                         direction=None if frame.direction is None else frame.direction[take],
                         series=frame.series[take]),
                CapacityForecast(np.asarray(forecast.median_mbps)[take],
                                 np.asarray(forecast.lower_mbps)[take]))

    def _row_map(self, frame: KpiFrame) -> RowMap:
        cached = self._rowmap
        if cached is not None and cached[0] is frame.cpe and cached[1] is frame.series:
            return cached[2]
        rm = row_map(frame, self.fleets.values())
        self._rowmap = (frame.cpe, frame.series, rm)
        return rm

    def _rate_caps_rows(self, direction: str) -> Mask | None:
        """Fleet rows whose ``direction`` is applied with rate caps; None when no row is and
        no caps are in force (the tick then does no caps work at all)."""
        fleet = self.fleets[direction]
        cpes = () if self.semantics is None else self.semantics.rate_caps(direction)
        if not cpes and not np.isfinite(fleet.caps[:len(fleet)]).any():
            return None
        mask = np.zeros(len(fleet), dtype=bool)
        at = [r for r in (fleet.index.get(c) for c in cpes) if r is not None]
        mask[at] = True
        return mask

    def _class_room(self, direction: str) -> NDArray[np.int64] | None:
        """How many classes the applier of each fleet row's ``direction`` takes; None when none
        takes any and none is in force (the tick then does no class work at all)."""
        fleet = self.fleets[direction]
        room = {} if self.semantics is None else self.semantics.max_classes(direction)
        if not room and not fleet.classes.any(len(fleet)):
            return None
        out = np.zeros(len(fleet), dtype=np.int64)
        for cpe_id, n in room.items():
            r = fleet.index.get(cpe_id)
            if r is not None:
                out[r] = n
        return out

    def _specs(self, rules: tuple[ClassRule, ...]) -> tuple[ClassSpec, ...]:
        """The specs of a direction's classes, the same object while the rules are (rows
        compare theirs by identity first)."""
        cached = self._specs_cache.get(id(rules))
        if cached is None or cached[0] is not rules:
            cached = self._specs_cache[id(rules)] = (rules, specs_of(rules))
        return cached[1]

    def _decide(self, frame: KpiFrame, forecast: CapacityForecast, rm: RowMap, now_s: float,
                report: TickReport, appliers: dict[str, Appliers]
                ) -> tuple[dict[str, Outgoing], dict[str, Outgoing]]:
        """The sets of every due (CPE, direction), policy group by policy group: decided from
        the direction's own rows, and (the second dict) from the other direction's where it
        has none."""
        median, lower = np.asarray(forecast.median_mbps), np.asarray(forecast.lower_mbps)
        out = {d: Outgoing() for d in DIRECTIONS}
        lent = {d: Outgoing() for d in DIRECTIONS}
        given = {d: inputs(frame, rm, rm.dirs[d], median, lower, report.skipped_rows)
                 for d in DIRECTIONS if rm.dirs[d].seen.any()}
        # Decisions on borrowed forecasts are not the direction's own: counted as followed.
        scratch = TickReport(time_s=now_s)
        for d, other in zip(DIRECTIONS, DIRECTIONS[::-1], strict=True):
            seen = rm.dirs[d].seen
            borrowed = ~seen & rm.dirs[other].seen if other in given else None
            for group in self._policy_groups(rm):
                policy = group.policy.for_direction(d)
                rules = group.policy.classes_for(d)
                positions = group.positions[seen[group.positions]]
                if len(positions):
                    self._decide_group(d, policy, rules, group.source, positions, rm, now_s,
                                       given[d], report, out[d], appliers[d])
                if borrowed is None:
                    continue
                positions = group.positions[borrowed[group.positions]]
                if len(positions):
                    # Decided from the other direction's forecasts: no caps (they would be
                    # the other direction's), classes as the applier takes them.
                    self._decide_group(d, policy, rules, group.source, positions, rm, now_s,
                                       given[other], scratch, lent[d],
                                       Appliers(None, appliers[d].room), follows=other)
        return out, lent

    def _policy_groups(self, rm: RowMap) -> list[_Group]:
        resolver = self.policies()
        cached = self._groups
        if cached is not None and cached[0] is resolver and cached[1] is rm.fleet_rows:
            return cached[2]
        by_key: dict[tuple[int, str], tuple[Policy, list[int]]] = {}
        for i, cpe_id in enumerate(rm.cpe_ids):
            policy, source = resolver.for_cpe(cpe_id)
            by_key.setdefault((id(policy), source), (policy, []))[1].append(i)
        groups = [_Group(policy, source, np.array(pos, dtype=np.intp))
                  for (_, source), (policy, pos) in by_key.items()]
        self._groups = (resolver, rm.fleet_rows, groups)
        return groups

    def _decide_group(self, direction: str, policy: Policy, rules: tuple[ClassRule, ...],
                      source: str, positions: NDArray[np.intp], rm: RowMap, now_s: float,
                      x: Inputs, report: TickReport, out: Outgoing, appliers: Appliers,
                      follows: str | None = None) -> None:
        """Decide the due CPEs at ``positions`` from inputs ``x``: the direction's own rows,
        or, with ``follows`` (the other direction's name), that direction's rows; ``rules``
        are the direction's traffic classes."""
        s, fleet = self.settings, self.fleets[direction]
        lent = follows is not None
        rows = rm.fleet_rows[positions]
        changed_policy = fleet.policy_changed(rows, policy)
        last = fleet.decided_s[rows]
        # Half a control period of slack, so tick jitter does not turn a 1 s update period
        # into 2 s.
        due = (np.isnan(last) | changed_policy | fleet.unpublished[rows]
               | (now_s - last >= policy.update_period_s - s.control_period_s / 2))
        if not lent:  # rows of its own after following: decide on them at once
            due |= fleet.follows[rows] & fleet.has[rows]
        refresh_at = s.lease_s * REFRESH_FRACTION
        # CPEs not due keep their weights; those half a lease old are re-sent as they are.
        out.in_force(fleet, rows[~due & fleet.has[rows] & (fleet.follows[rows] == lent)
                                 & (now_s - fleet.published_s[rows] >= refresh_at)],
                     appliers)
        idx = positions[due]
        if len(idx) == 0:
            return
        r_due = rows[due]
        xd = x.take(idx)
        # Hysteresis holds against a set of the same kind: own rows against own, a followed
        # direction against what it followed last.
        held = fleet.has[r_due] & (fleet.follows[r_due] == lent) & ~changed_policy[due]
        # Classes hold against classes of the same rules only (a direction's own policy leaves
        # them out).
        classes_held = held & ~fleet.rules_changed(r_due, rules) if rules else held
        d = with_return_weights(
            self.decide, KNOWN_WATS, xd, policy,
            self.decide(KNOWN_WATS, xd.cap, xd.low, xd.present, xd.up, xd.rtt, xd.loss, policy,
                        fleet.weights[r_due], fleet.present[r_due], fleet.usable[r_due], held))
        ok, no_usable, error = d.status == OK, d.status == NO_USABLE, d.status == ERROR
        fleet.decided_s[r_due[ok | no_usable]] = now_s
        fleet.apply(r_due[ok], policy, rules)
        decided = int(ok.sum())
        report.decided += decided
        report.decided_by_direction[direction] = (
            report.decided_by_direction.get(direction, 0) + decided)
        report.changed += int((ok & d.changed).sum())
        report.held += int((ok & ~d.changed).sum())
        report.no_usable += int(no_usable.sum())
        report.errors += int(error.sum())
        for i in np.flatnonzero(error).tolist():
            log.error("CPE %s (%s): weights not computed: %s", fleet.ids[r_due[i]], direction,
                      d.reason[i])
        # Publish what changed, what is owed, a new mode, and what is half a lease old.
        owed = fleet.unpublished[r_due]
        stale = now_s - fleet.published_s[r_due] >= refresh_at
        mode = policy.mode.value
        # Going from a followed set to an own one, or back, is a change.
        differs = ((d.weights != fleet.weights[r_due]) | (xd.present != fleet.present[r_due])
                   ).any(axis=1) | (fleet.mode[r_due] != mode) | (fleet.follows[r_due] != lent)
        more = extras(KNOWN_WATS, policy, rules, self._specs(rules), self.decide, xd, d, fleet,
                      r_due, classes_held, appliers, s.caps_headroom)
        differs |= more.differs
        send = np.flatnonzero(ok & (d.changed | ~fleet.has[r_due] | owed | differs | stale))
        reasons = d.reason[send].tolist()
        withheld = more.withheld[send]
        if withheld.any():
            report.classes_withheld += int(withheld.sum())
            for i in np.flatnonzero(withheld).tolist():
                reasons[i] = withheld_reason(reasons[i], int(more.room[send[i]]), len(rules))
        if lent:
            reasons = [f"follows {follows}: {r}" for r in reasons]
        out.add(r_due[send], d.weights[send], xd.present[send], d.usable[send],
                d.aggregate[send], [mode] * len(send), reasons,
                [source] * len(send), None if more.caps is None else more.caps[send],
                None if more.classes is None else more.classes.subset(send))
        # No usable WAT: the weights in force stay; re-send them if owed or half a lease old.
        out.in_force(fleet, r_due[no_usable & fleet.has[r_due]
                                  & (fleet.follows[r_due] == lent) & (owed | stale)],
                     appliers)

    def _publish(self, out: dict[str, Outgoing], lent: dict[str, Outgoing], rm: RowMap,
                 now_s: float, report: TickReport, appliers: dict[str, Appliers]) -> None:
        ids = self.fleet.ids
        messages = message_sets(self.fleets, out, lent,
                                {d: rm.fleet_rows[rm.dirs[d].seen] for d in DIRECTIONS},
                                appliers, self.policies)
        rows, follows = messages.rows, messages.follows
        if len(rows) == 0:
            return
        report.followed += sum(int(f.sum()) for f in follows.values())
        batch = WeightBatch([ids[r] for r in rows.tolist()], messages.sets["dl"].batch(),
                            messages.sets["ul"].batch(), self.settings.lease_s)
        # One hand-over per tick: the publisher encodes and queues the whole batch at once.
        try:
            result = self.publisher.publish_many(batch)
        except Exception as failure:  # nothing was queued: every CPE of the batch is retried
            result = PublishResult(errors={cpe_id: failure for cpe_id in batch.cpe_ids})
        sent = np.ones(len(rows), dtype=bool)
        if result.errors:
            for i, cpe_id in enumerate(batch.cpe_ids):
                error = result.errors.get(cpe_id)
                if isinstance(error, Fenced):
                    sent[i] = False
                    report.fenced += 1
                elif error is not None:
                    sent[i] = False
                    report.publish_errors += 1
                    log.error("publishing weights of CPE %s failed: %s", cpe_id, error)
            for fleet in self.fleets.values():
                fleet.unpublished[rows[~sent]] = True
            keep = np.flatnonzero(sent)
            batch = batch.subset(keep)
            rows = rows[keep]
            follows = {d: f[keep] for d, f in follows.items()}
        report.published = result.versions
        if len(rows) == 0:
            return
        versions = np.array([result.versions[c] for c in batch.cpe_ids], dtype=np.int64)
        for d in DIRECTIONS:
            self.fleets[d].store(rows, batch.direction(d), versions, now_s, follows[d])
        published = Published(batch, versions, now_s)
        self.state.put_published(published)
        if self.sink is not None:
            try:
                self.sink.write_weights(published)
            except Exception:
                log.exception("writing weights failed")

