"""What a real MPTCP connection loses that the fluid model does not: the twin's transport layer.

:func:`twin.rate_caps.deliver_caps` gives each WAT ``min(cap, capacity)`` for the time its path
is up.  A real connection (one MPTCP socket, CUBIC on every subflow, bulk traffic both ways, the
default scheduler) delivers less, and the real-stack bench (``bench/bench_realstack.py``) shows
where.  :func:`deliver` takes it away, one physical term at a time:

**The reverse flow's ACKs.**  With bulk traffic both ways every path also carries the ACKs of
the other direction's data, an :data:`ACK_FRAME_BYTES` frame for every :data:`SEGMENTS_PER_ACK`
data frames, through the same shaper.

**Timeouts hold the connection hostage.**  MPTCP hands data to the application in order: while
one subflow waits for a retransmission timeout, the data behind its lost segment waits too, and
the other subflows run ahead only as far as the connection's window reaches
(:data:`WINDOW_SLACK_S`).  A timeout costs the whole connection its ``RTO`` (Linux's
``srtt + TCP_RTO_MIN``: the variance term is floored at :data:`TCP_RTO_MIN_S`) plus the time
the subflow takes to send its window again, less that slack.  Timeouts come from

* *a pipe too small for fast retransmit*: a subflow whose window (the path's queue, the packet
  in service and the ACKs held in the reverse queue) holds few segments cannot collect
  :data:`DUPACK_THRESHOLD` duplicate ACKs, so a congestion loss ends in a timeout with
  probability ``min(1, 3 / W)`` (Padhye et al., SIGCOMM 1998), once per CUBIC sawtooth of
  ``(1 - beta) W / alpha`` round trips.  This is paper-static's LiFi: 0.6 Mbit/s and a two-frame
  queue beside 60 Mbit/s of Wi-Fi take half the connection;
* *random loss*: SACK and RACK recover a single loss without a timeout; a loss whose
  retransmission is lost too (probability ``p``) waits for one;
* *outages*: a subflow that loses everything for ``d`` seconds retransmits at ``RTO``,
  ``3 RTO``, ``7 RTO``, ... (exponential backoff) and carries again only at the first of these
  after the path is back (:func:`backoff_resume`), however short the cut; the data it held
  blocks the connection until then, for at most :data:`OUTAGE_HOSTAGE_S` (MPTCP then sends it
  again on another subflow).  An agent that takes a WAT out of the connection as soon as its
  carrier drops (the agent removes its MPTCP endpoint, which closes its subflows and hands
  their data to the others: :attr:`Stack.carrier_reaction`) spares the connection the stall of
  a ``down`` outage; a ``drop`` outage (a handover: the interface stays up) it cannot see;
* *the rejoin*: the WAT then has no subflow until the agent puts its endpoint back and a new
  one joins and ramps up, :attr:`Stack.rejoin_s` after its link returns, however short the
  cut (:data:`REJOIN_READD_S` + :data:`REJOIN_RAMP_S`).

A subflow capped below its path (the agent's HTB cap at the sender) queues at the sender, where
a full queue throttles the socket instead of dropping: it has no congestion losses.

**Loss caps a subflow** where the round trip is long: a CUBIC subflow with random loss ``p``
keeps about ``sqrt(3 / 2p)`` segments in flight (its TCP-friendly window, after Mathis et al.),
so it carries at most that per propagation round trip.  The bench plays no propagation delay
(:attr:`Stack.plays_delay`: no netem in its kernel), so there a path's round trip is its queue
and the cap never binds.

Calibrated on the real-stack bench (``docs/twin.md``, "Against the real stack", says on which
runs): :data:`WINDOW_SLACK_S`, :data:`OUTAGE_HOSTAGE_S` and :data:`REJOIN_RAMP_S`, fitted;
:data:`QUEUE_FILL` and :data:`REJOIN_READD_S`, measured.  Everything else is a kernel or wire
constant.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import numpy as np
from numpy.typing import NDArray

from twin.rate_caps import deliver_caps

if TYPE_CHECKING:
    from twin.path_traces import PathTrace

Array = NDArray[np.float64]

# --- wire and kernel constants ---------------------------------------------------------------

#: A full-size Ethernet frame, what the shapers count.
FRAME_BYTES: Final = 1514
#: An ACK frame: Ethernet 14, IPv4 20, TCP 20, timestamps 12, MPTCP's DSS with a data ACK 12.
ACK_FRAME_BYTES: Final = 78
#: Delayed ACKs: one for every second full-sized segment (RFC 1122; Linux's
#: ``__tcp_ack_snd_check``).
SEGMENTS_PER_ACK: Final = 2
#: Linux's floor on the retransmission timeout's variance term (``TCP_RTO_MIN``).
TCP_RTO_MIN_S: Final = 0.2
#: Duplicate ACKs before fast retransmit (``TCP_FASTRETRANS_THRESH``).
DUPACK_THRESHOLD: Final = 3
#: CUBIC's multiplicative decrease (717/1024) and its TCP-friendly additive increase per RTT.
CUBIC_BETA: Final = 0.7
CUBIC_ALPHA: Final = 3.0 * (1.0 - CUBIC_BETA) / (1.0 + CUBIC_BETA)
#: The bench's shaper never queues less than two frames, whatever the rate and buffer.
MIN_QUEUE_BYTES: Final = 2 * FRAME_BYTES

# --- measured and fitted on the real-stack bench (docs/twin.md, "Against the real stack") ---

#: How full bulk traffic keeps a path's queue on average, measured: the small flow's RTT p50
#: was 40-49 ms through two 50 ms queues.
QUEUE_FILL: Final = 0.5
#: How long the rest of the connection runs ahead of a hole before its window is full; fitted.
WINDOW_SLACK_S: Final = 0.08
#: The longest a cut subflow's data blocks the connection before MPTCP sends it again on
#: another subflow; fitted.
OUTAGE_HOSTAGE_S: Final = 1.25
#: When, after a lost link returns, the agent's re-added endpoint gets its subflow; measured.
#: The agent holds a link that came back without its gateway route until the route is back
#: (kernel-agent/linkwatch, "A link back before its route"), so the path manager's one join
#: finds it: 3.1 ms after the link's return (median of 27 returns in lifi-blockage, at most
#: 4.3 ms; the bench puts the route back right after the link).  Before, the join failed and
#: the agent re-added the endpoint 0.5 s after the return and again at 1.5 s: 1.0 s on average.
REJOIN_READD_S: Final = 0.003
#: From that re-add until the new subflow carries its share, counted as seconds of the WAT's
#: rate lost: the MP_JOIN handshake and slow start from ten segments.  Fitted on the oracle's
#: lifi-blockage cells of six runs of the agent that waits for the route (flat between 0.2
#: and 0.5 s) and checked on the xApp's (ewma, model: within 3.2 %).  It was 1.1 s while the
#: first join failed: the re-adds then closed the failed try and, now and then, the new
#: subflow with it (REMOVE_ADDR), and the whole connection dipped in the second after a
#: return.
REJOIN_RAMP_S: Final = 0.3


@dataclass(frozen=True)
class Stack:
    """What the real connection's surroundings do, beside the trace."""

    #: The path's one-way delay is on the wire (netem); False: the round trip is the queues.
    plays_delay: bool = True
    #: An agent takes a WAT out of the connection as soon as its carrier drops (``down``
    #: outages): its in-flight data goes to the other subflows at once.
    carrier_reaction: bool = False
    #: With ``carrier_reaction``: seconds after a ``down`` outage's link returns until the WAT
    #: carries again (the agent's re-add of its endpoint, the new subflow's join and ramp).
    rejoin_s: float = REJOIN_READD_S + REJOIN_RAMP_S


def coupled_backup(weights: NDArray[Any], reverse_weights: NDArray[Any] | None) -> NDArray[Any]:
    """The weights a direction's sender acts on: a WAT at weight 0 in either direction is
    backup in both.  Since Linux 6.11 the default scheduler treats a subflow as backup when
    either end flagged it (MP_PRIO), so the CPE's flag for its uplink stops the proxy's
    downlink on that subflow too (``kernel-agent/backend/mptcpupstream``)."""
    w = np.asarray(weights)
    if reverse_weights is None:
        return w
    return np.where(np.asarray(reverse_weights) > 0, w, 0)


def ack_load(reverse_mbit: Array) -> Array:
    """Mbit/s of frames the ACKs of ``reverse_mbit`` of data frames (the other way) take."""
    return np.asarray(reverse_mbit, dtype=np.float64) * ACK_FRAME_BYTES / (
        SEGMENTS_PER_ACK * FRAME_BYTES)


def queue_s(rate_mbit: Array, buffer_ms: Array) -> Array:
    """The time a path's full queue takes to drain: its buffer, at least the shaper's two
    frames."""
    rate = np.asarray(rate_mbit, dtype=np.float64)
    return np.maximum(np.asarray(buffer_ms, dtype=np.float64) / 1000.0,
                      MIN_QUEUE_BYTES * 8 / (rate * 1e6))


def packets_per_s(rate_mbit: Array) -> Array:
    """Full-size frames per second at ``rate_mbit``."""
    return np.asarray(rate_mbit, dtype=np.float64) * 1e6 / (8 * FRAME_BYTES)


def pipe_packets(rate_mbit: Array, own_queue_s: Array, reverse_queue_s: Array,
                 propagation_s: Array) -> Array:
    """The window that keeps a path busy: its queue, the packet in service, and the packets
    whose ACKs are on the wire or held in the reverse queue behind the other way's bulk."""
    c = packets_per_s(rate_mbit)
    return c * own_queue_s + 1.0 + c * (propagation_s + QUEUE_FILL * reverse_queue_s)


def loss_window(loss: Array) -> Array:
    """CUBIC's TCP-friendly window (segments) under random loss ``loss`` (a fraction): the
    AIMD(alpha, beta) window ``sqrt(alpha (1 + beta) / (2 (1 - beta) p))`` = ``sqrt(3 / 2p)``;
    inf without loss."""
    p = np.asarray(loss, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return np.where(p > 0, np.sqrt(3.0 / (2.0 * np.maximum(p, 1e-12))), np.inf)


def rto_s(srtt_s: Array) -> Array:
    """Linux's retransmission timeout once the RTT is steady: ``srtt + max(4 rttvar,
    TCP_RTO_MIN)``, the variance floored at ``TCP_RTO_MIN``."""
    return np.asarray(srtt_s, dtype=np.float64) + TCP_RTO_MIN_S


def timeout_probability(window: Array) -> Array:
    """The chance a congestion loss ends in a timeout: ``min(1, 3 / W)`` for a window of ``W``
    segments (Padhye et al.: too few segments behind the loss for three duplicate ACKs)."""
    w = np.asarray(window, dtype=np.float64)
    return np.minimum(1.0, DUPACK_THRESHOLD / np.maximum(w, 1.0))


def timeouts_per_s(rate_mbit: Array, sending_mbit: Array, pipe: Array, loss: Array,
                   rto: Array, congested: NDArray[np.bool_]) -> Array:
    """Retransmission timeouts per second of a subflow sending ``sending_mbit`` on a path of
    ``rate_mbit``.

    ``congested``: the subflow fills the path's queue (no cap of its own below the path), so
    it loses a segment at the end of every CUBIC sawtooth.  A subflow in a timeout starts no
    other, so the rate is a renewal: ``l / (1 + l RTO)`` for ``l`` events per second of
    sending."""
    c = packets_per_s(rate_mbit)
    w = np.asarray(pipe, dtype=np.float64)
    p = np.asarray(loss, dtype=np.float64)
    sawtooth_s = (1.0 - CUBIC_BETA) * w / CUBIC_ALPHA * (w / np.maximum(c, 1e-9))
    limited_by_pipe = congested & (loss_window(p) >= w)
    congestion = np.where(limited_by_pipe, timeout_probability(w) / sawtooth_s, 0.0)
    random = packets_per_s(sending_mbit) * p * p
    events = congestion + random
    return np.asarray(events / (1.0 + events * np.asarray(rto, dtype=np.float64)))


def backoff_resume(duration_s: float, rto: float) -> float:
    """Seconds from the start of a cut of ``duration_s`` until its subflow carries again: the
    first retransmission (at ``RTO (2^k - 1)``, the timeout doubling each time) after the path
    is back."""
    if rto <= 0:
        return duration_s
    k = int(np.ceil(np.log2(duration_s / rto + 1.0)))
    return float(rto * (2.0 ** max(k, 1) - 1.0))


@dataclass(frozen=True)
class Subflows:
    """Per period and WAT (arrays ``(periods, k)``): what each subflow of one direction does."""

    #: Data frames carried (Mbit/s) while the path is up, after the reverse flow's ACKs and
    #: under the loss cap.
    data: Array
    #: The retransmission timeout (s), timeouts per second of carrying, and how long the
    #: subflow takes to send its whole window again (s).
    rto: Array
    timeouts: Array
    refill: Array
    #: Whether the WAT carries data in the period.
    carrying: NDArray[np.bool_]


def subflows(trace: PathTrace, direction: str, weights: NDArray[Any],
             caps: Array, stack: Stack) -> Subflows:
    """The subflows of ``direction`` under ``weights`` and ``caps`` (``(periods, k)``)."""
    other = "ul" if direction == "dl" else "dl"
    rate, rev = trace.rate(direction), trace.rate(other)
    fluid, _, _ = deliver_caps(rate, weights, caps)
    carrying = fluid > 0
    # The other way's bulk uses the WATs this way does (backup is coupled: coupled_backup).
    data = np.maximum(0.0, fluid - ack_load(np.where(carrying, rev, 0.0)))
    own_q = queue_s(rate, trace.buffer_ms)
    rev_q = queue_s(rev, trace.buffer_ms)
    prop = (2.0 * trace.delay_ms / 1000.0) if stack.plays_delay else np.zeros_like(rate)
    pipe = pipe_packets(rate, own_q, rev_q, prop)
    loss = trace.loss_pct / 100.0
    window = np.minimum(pipe, loss_window(loss))
    c = packets_per_s(rate)
    srtt = prop + np.minimum(QUEUE_FILL * (own_q + rev_q), window / np.maximum(c, 1e-9))
    rto = rto_s(srtt)
    # Mathis: a loss-limited window per propagation round trip.
    with np.errstate(divide="ignore", invalid="ignore"):
        ceiling = np.where(prop > 0, loss_window(loss) * FRAME_BYTES * 8 / 1e6 / prop, np.inf)
    data = np.minimum(data, ceiling)
    congested = carrying & (np.asarray(caps, dtype=np.float64) >= rate)
    timeouts = np.where(carrying, timeouts_per_s(rate, data, pipe, loss, rto, congested), 0.0)
    return Subflows(data, rto, timeouts, window / np.maximum(c, 1e-9), carrying)


def deliver(trace: PathTrace, direction: str, weights: NDArray[Any], caps: Array,
            stack: Stack) -> Array:
    """Data frames delivered (Mbit/s, averaged over each period) per period and WAT,
    ``(periods, k)``, for ``weights`` and ``caps`` (``(periods, k)``, ``inf``: uncapped)."""
    sf = subflows(trace, direction, weights, caps, stack)
    period = trace.period_s
    # Seconds of each period the whole connection stands still, and each WAT is dead beyond
    # its cut.
    held = np.maximum(0.0, sf.rto + sf.refill - WINDOW_SLACK_S)
    stall = np.minimum(1.0, (sf.timeouts * held).sum(axis=1)) * period
    dead = np.zeros_like(sf.data)
    for o in trace.outages:
        j = trace.wats.index(o.wat)
        end = o.start_s + o.duration_s
        if o.mode == "down" and stack.carrier_reaction:
            # Its subflows closed when the carrier dropped: no backoff, no hostage, but none
            # carries until a new one has joined, whatever the weights say meanwhile.
            _spread(dead[:, j], end, end + stack.rejoin_s, period)
            continue
        p0 = min(int(o.start_s // period), trace.periods - 1)
        if not sf.carrying[p0, j]:
            continue  # backup: nothing in flight to lose
        resume = backoff_resume(o.duration_s, float(sf.rto[p0, j]))
        _spread(dead[:, j], end, o.start_s + resume, period)
        hostage = max(0.0, min(resume, OUTAGE_HOSTAGE_S) - WINDOW_SLACK_S)
        start = o.start_s + WINDOW_SLACK_S
        _spread(stall, start, start + hostage, period)
    up = np.maximum(0.0, trace.available() - dead / period)
    moving = 1.0 - np.minimum(1.0, stall / period)
    return np.asarray(sf.data * up * moving[:, None], dtype=np.float64)


def _spread(out: Array, t0: float, t1: float, period_s: float) -> None:
    """Add to ``out[p]`` the seconds of ``[t0, t1)`` within period ``p``."""
    n = len(out)
    if t1 <= t0:
        return
    for p in range(int(t0 // period_s), min(n, int(np.ceil(t1 / period_s)))):
        lo, hi = p * period_s, (p + 1) * period_s
        out[p] += max(0.0, min(hi, t1) - max(lo, t0))
