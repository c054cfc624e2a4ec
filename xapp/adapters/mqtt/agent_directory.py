"""What the xApp knows of its agents: the latest state of every CPE agent, of every proxy agent
and of every proxy's service of a CPE, and from them who applies which direction of a CPE, with
which semantics.

Who applies which direction: the CPE agent applies ``ul``; the downlink of a CPE is applied by
the proxy whose per-CPE state for it says online while the proxy itself is online
(:meth:`AgentDirectory.downlink`).  A proxy that stops serving a CPE clears its per-CPE state
(:meth:`AgentDirectory.stop_serving`).

The directory knows no MQTT: :class:`~xapp.adapters.mqtt.subscriber.ChannelSubscriber` feeds it
the documents that validated (``mcw.state.v2``, ``mcw.proxy-state.v1``) and tells it which CPEs
are no longer this replica's (:meth:`AgentDirectory.keep_only`).  It is thread-safe: the
subscriber's network thread writes while the loop, the metrics and the HTTP endpoints read.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from xapp.core.caps import RATE_CAPS
from xapp.core.forecast import DIRECTIONS


@dataclass(frozen=True)
class CpeState:
    """The latest ``mcw.state.v2`` of one CPE as the xApp knows it: from the CPE agent
    (``role`` cpe, ``proxy_id`` None, direction ``ul``) or from a proxy that serves the CPE
    (``role`` proxy, direction ``dl``)."""

    cpe_id: str
    online: bool
    time_ms: int | None = None
    applied_version: int = 0
    applied_weights: Mapping[str, int] = field(default_factory=dict)
    backend: str | None = None
    max_weight: int | None = None
    #: True when the agent's backend can only switch WATs on and off (mptcp-upstream).
    on_off_only: bool = False
    links: Mapping[str, str] = field(default_factory=dict)
    event: str | None = None
    last_error: str = ""
    #: Local monotonic time the message arrived.
    received_s: float = 0.0
    role: str = "cpe"
    proxy_id: str | None = None
    #: The direction ``applied_weights`` steer (``ul`` for a CPE agent, ``dl`` for a proxy).
    direction: str = "ul"
    #: The CPE's WAT interface addresses (reported by the CPE agent).
    addresses: Mapping[str, str] = field(default_factory=dict)
    #: A WAT off in one direction is off in both (mainline MPTCP); None: not reported.
    directions_coupled: bool | None = None
    #: How the backend turns weights into a split (``capabilities.semantics``: ``wrr``,
    #: ``rate-caps``, ``on-off``); None: not reported (an agent from before the field).
    semantics: str | None = None
    #: With ``rate-caps``: the caps the backend set for the applied weights (a WAT absent is
    #: uncapped).
    applied_caps_mbps: Mapping[str, float] = field(default_factory=dict)
    #: With traffic classes: what the backend set per class (by name; ``caps_mbps``,
    #: ``urgent``), as the agent reports it.
    applied_classes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: A standing condition the applier reports (a proxy: ``address-conflict``, another CPE it
    #: serves claims one of this CPE's WAT addresses, so neither is steered); None: none.
    alarm: str | None = None
    #: ``capabilities.max_classes``: traffic classes per direction the backend applies; None:
    #: not reported (an agent from before classes, which takes none).
    max_classes: int | None = None

    @property
    def rate_caps(self) -> bool:
        """The applier enforces shares as rate caps and takes ``caps_mbps``.  Only when the
        agent says so: an agent from before the field may refuse a message with caps."""
        return self.semantics == RATE_CAPS

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any], previous: CpeState | None,
                 received_s: float) -> CpeState:
        """Build from a validated document; a last will (online false only) keeps what was known."""
        caps = doc.get("capabilities", {})
        role = str(doc.get("role", "proxy" if doc.get("proxy_id") else "cpe"))
        base = previous if previous is not None else cls(
            cpe_id=doc["cpe_id"], online=False, role=role, proxy_id=doc.get("proxy_id"),
            direction="dl" if role == "proxy" else "ul")
        # JSON Schema's "integer" admits 5.0: int() keeps the fields what their types say.
        time_ms = doc.get("time_ms")
        return cls(
            cpe_id=doc["cpe_id"],
            online=bool(doc["online"]),
            time_ms=base.time_ms if time_ms is None else int(time_ms),
            applied_version=int(doc.get("applied_version", base.applied_version)),
            applied_weights={k: int(v) for k, v in
                             doc.get("applied_weights", base.applied_weights).items()},
            backend=doc.get("backend", base.backend),
            max_weight=caps.get("max_weight", base.max_weight),
            on_off_only=caps.get("on_off_only", base.on_off_only),
            links=dict(doc.get("links", base.links)),
            # The event belongs to this message only (a last will carries none).
            event=doc.get("event"),
            last_error=doc.get("last_error", base.last_error),
            received_s=received_s,
            role=role,
            proxy_id=doc.get("proxy_id", base.proxy_id),
            direction=str(doc.get("direction", base.direction)),
            addresses=dict(doc.get("addresses", base.addresses)),
            directions_coupled=caps.get("directions_coupled", base.directions_coupled),
            semantics=caps.get("semantics", base.semantics),
            # The caps belong to the applied weights: a report of new weights without caps
            # means uncapped; a last will (no weights) keeps what was known.
            applied_caps_mbps={k: float(v) for k, v in doc.get(
                "applied_caps_mbps",
                {} if "applied_weights" in doc else base.applied_caps_mbps).items()},
            # Like the caps: they belong to the applied weights.
            applied_classes={str(k): dict(v) for k, v in doc.get(
                "applied_classes",
                {} if "applied_weights" in doc else base.applied_classes).items()},
            # Reported with every state while it stands; a last will keeps what was known.
            alarm=doc.get("alarm") if "applied_weights" in doc else base.alarm,
            max_classes=_max_classes(doc, base.max_classes),
        )


@dataclass(frozen=True)
class ProxyState:
    """The latest ``mcw.proxy-state.v1`` of one proxy agent."""

    proxy_id: str
    online: bool
    time_ms: int | None = None
    backend: str | None = None
    max_weight: int | None = None
    on_off_only: bool = False
    directions_coupled: bool | None = None
    #: ``capabilities.semantics`` of the proxy's downlink backend; None: not reported.
    semantics: str | None = None
    #: ``capabilities.max_classes`` of the proxy's downlink backend; None: not reported.
    max_classes: int | None = None
    cpes: int = 0
    cpes_applied: int = 0
    rules: Mapping[str, int] = field(default_factory=dict)
    last_error: str = ""
    received_s: float = 0.0

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any], previous: ProxyState | None,
                 received_s: float) -> ProxyState:
        """Build from a validated document; a last will keeps what was known."""
        caps = doc.get("capabilities", {})
        base = previous if previous is not None else cls(proxy_id=doc["proxy_id"], online=False)
        time_ms = doc.get("time_ms")
        return cls(
            proxy_id=doc["proxy_id"], online=bool(doc["online"]),
            time_ms=base.time_ms if time_ms is None else int(time_ms),
            backend=doc.get("backend", base.backend),
            max_weight=caps.get("max_weight", base.max_weight),
            on_off_only=caps.get("on_off_only", base.on_off_only),
            directions_coupled=caps.get("directions_coupled", base.directions_coupled),
            semantics=caps.get("semantics", base.semantics),
            max_classes=_max_classes(doc, base.max_classes),
            cpes=int(doc.get("cpes", base.cpes)),
            cpes_applied=int(doc.get("cpes_applied", base.cpes_applied)),
            rules={k: int(v) for k, v in doc.get("rules", base.rules).items()},
            last_error=doc.get("last_error", base.last_error), received_s=received_s)


def _max_classes(doc: Mapping[str, Any], known: int | None) -> int | None:
    """``capabilities.max_classes``: a state with capabilities says it (absent: none, an agent
    from before classes, perhaps after a downgrade, that would refuse them); one without (a
    last will) keeps what was known."""
    if "capabilities" not in doc:
        return known
    value = doc["capabilities"].get("max_classes")
    # JSON Schema's "integer" admits 5.0: int() keeps the field what its type says.
    return None if value is None else int(value)


@dataclass(frozen=True)
class Downlink:
    """Who applies a CPE's downlink: the proxy and its per-CPE state."""

    proxy_id: str
    state: CpeState


class AgentDirectory:
    """The latest :class:`CpeState` per CPE agent and per (proxy, CPE), the latest
    :class:`ProxyState` per proxy, and who applies each CPE's directions.

    It is a :class:`xapp.core.ports.BackendSemantics` (:meth:`rate_caps`).  Queries return
    copies: a caller may keep or change them.
    """

    def __init__(self) -> None:
        # Re-entrant: rate_caps() reads downlinks() under it.
        self._lock = threading.RLock()
        self._states: dict[str, CpeState] = {}
        self._proxies: dict[str, ProxyState] = {}
        #: (proxy_id, cpe_id) -> the proxy's downlink state for the CPE.
        self._proxy_cpes: dict[tuple[str, str], CpeState] = {}
        #: Grows with every change; :meth:`rate_caps` recomputes only when it moved.
        self._generation = 0
        self._rate_caps: dict[str, tuple[int, frozenset[str]]] = {}
        self._max_classes: dict[str, tuple[int, dict[str, int]]] = {}

    # --- what the agents report ----------------------------------------------------------------

    def report_state(self, doc: Mapping[str, Any], received_s: float) -> CpeState:
        """Take a validated ``mcw.state.v2``: the CPE agent's (no ``proxy_id``) or a proxy's for
        a CPE it serves; a last will keeps what was known.  The new state."""
        with self._lock:
            proxy_id = doc.get("proxy_id")
            if proxy_id is None:
                state = CpeState.from_doc(doc, self._states.get(doc["cpe_id"]), received_s)
                self._states[state.cpe_id] = state
            else:
                key = (str(proxy_id), str(doc["cpe_id"]))
                state = CpeState.from_doc(doc, self._proxy_cpes.get(key), received_s)
                self._proxy_cpes[key] = state
            self._generation += 1
            return state

    def report_proxy(self, doc: Mapping[str, Any], received_s: float) -> ProxyState:
        """Take a validated ``mcw.proxy-state.v1``; a last will keeps what was known.  The new
        state."""
        with self._lock:
            proxy = ProxyState.from_doc(doc, self._proxies.get(doc["proxy_id"]), received_s)
            self._proxies[proxy.proxy_id] = proxy
            # A "CPE" of that name seen before was the proxy's certificate speaking as one.
            self._states.pop(proxy.proxy_id, None)
            self._generation += 1
            return proxy

    def stop_serving(self, proxy_id: str, cpe_id: str) -> None:
        """The proxy no longer serves the CPE (it cleared its per-CPE state)."""
        with self._lock:
            self._proxy_cpes.pop((proxy_id, cpe_id), None)
            self._generation += 1

    def keep_only(self, keep: Callable[[str], bool]) -> None:
        """Forget the CPEs ``keep`` refuses (their agents' states and the proxies' per-CPE
        states); the proxies' own states stay."""
        with self._lock:
            self._states = {c: st for c, st in self._states.items() if keep(c)}
            self._proxy_cpes = {k: st for k, st in self._proxy_cpes.items() if keep(k[1])}
            self._generation += 1

    # --- what is known -------------------------------------------------------------------------

    def is_proxy(self, identity: str) -> bool:
        """A proxy of that id has reported its own state."""
        with self._lock:
            return identity in self._proxies

    def state(self, cpe_id: str) -> CpeState | None:
        with self._lock:
            return self._states.get(cpe_id)

    def states(self) -> dict[str, CpeState]:
        with self._lock:
            return dict(self._states)

    def online(self) -> list[str]:
        """CPEs whose latest state says online."""
        with self._lock:
            return sorted(c for c, s in self._states.items() if s.online)

    def proxy(self, proxy_id: str) -> ProxyState | None:
        with self._lock:
            return self._proxies.get(proxy_id)

    def proxies(self) -> dict[str, ProxyState]:
        with self._lock:
            return dict(self._proxies)

    def proxy_cpe_states(self) -> dict[tuple[str, str], CpeState]:
        """(proxy_id, cpe_id) -> the proxy's downlink state for the CPE."""
        with self._lock:
            return dict(self._proxy_cpes)

    def downlink(self, cpe_id: str) -> Downlink | None:
        """The proxy applying the CPE's downlink: its per-CPE state says online and the proxy
        is online (or has not reported its own state yet); the most recently heard wins when
        several do.  None: nobody applies it (the downlink runs on the proxy's defaults)."""
        return self.downlinks().get(cpe_id)

    def downlinks(self) -> dict[str, Downlink]:
        """:meth:`downlink` of every CPE some proxy applies (one pass: metrics and
        ``/ric/v1/cpes`` ask for the whole fleet)."""
        best: dict[str, Downlink] = {}
        with self._lock:
            for (proxy_id, cpe), st in self._proxy_cpes.items():
                if not st.online:
                    continue
                proxy = self._proxies.get(proxy_id)
                if proxy is not None and not proxy.online:
                    continue
                known = best.get(cpe)
                if known is None or st.received_s > known.state.received_s:
                    best[cpe] = Downlink(proxy_id, st)
        return best

    def rate_caps(self, direction: str) -> frozenset[str]:
        """:class:`xapp.core.ports.BackendSemantics`: the CPEs whose ``direction`` is applied
        by a ``rate-caps`` backend: ``ul`` the CPE agents online that report it, ``dl`` the
        CPEs whose :meth:`downlink` proxy reports it (in its per-CPE state, or else in its own
        state).  Recomputed only after a state changed (the loop asks every tick)."""
        if direction not in DIRECTIONS:
            raise ValueError(f"unknown direction {direction!r}")
        with self._lock:
            gen = self._generation
            cached = self._rate_caps.get(direction)
            if cached is not None and cached[0] == gen:
                return cached[1]
            if direction == "ul":
                out = frozenset(c for c, st in self._states.items() if st.online and st.rate_caps)
            else:
                out = frozenset(c for c, down in self.downlinks().items()
                                if self._downlink_semantics(down) == RATE_CAPS)
            self._rate_caps[direction] = (gen, out)
            return out

    def max_classes(self, direction: str) -> dict[str, int]:
        """:class:`xapp.core.ports.BackendSemantics`: CPE -> the traffic classes its
        ``direction``'s applier takes (``capabilities.max_classes``), for the appliers that take
        some: ``ul`` the CPE agents online, ``dl`` the CPEs' :meth:`downlink` proxies (their
        per-CPE state's, else their own state's).  Recomputed only after a state changed."""
        if direction not in DIRECTIONS:
            raise ValueError(f"unknown direction {direction!r}")
        with self._lock:
            gen = self._generation
            cached = self._max_classes.get(direction)
            if cached is not None and cached[0] == gen:
                return dict(cached[1])
            if direction == "ul":
                out = {c: st.max_classes for c, st in self._states.items()
                       if st.online and st.max_classes}
            else:
                out = {}
                for c, down in self.downlinks().items():
                    n = down.state.max_classes
                    if n is None:
                        proxy = self._proxies.get(down.proxy_id)
                        n = None if proxy is None else proxy.max_classes
                    if n:
                        out[c] = n
            self._max_classes[direction] = (gen, out)
            return dict(out)

    def downlink_semantics(self, down: Downlink) -> str | None:
        """The ``capabilities.semantics`` ``down``'s proxy applies the CPE's downlink with (as
        :meth:`rate_caps` decides it); None: not reported."""
        with self._lock:
            return self._downlink_semantics(down)

    def _downlink_semantics(self, down: Downlink) -> str | None:
        """The semantics a proxy applies a CPE's downlink with: its per-CPE state's, else its
        own state's (call under the lock)."""
        if down.state.semantics is not None:
            return down.state.semantics
        proxy = self._proxies.get(down.proxy_id)
        return None if proxy is None else proxy.semantics
