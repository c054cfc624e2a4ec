"""The twin's transport layer: each term alone, then what it does to a trace."""

from __future__ import annotations

import numpy as np
import pytest

from twin import transport as tp
from twin.path_traces import TRANSPORT_EFFICIENCY, Outage, PathTrace, predict

BENCH = tp.Stack(plays_delay=False)


def _trace(rates: list[float], n: int = 10, *, loss: list[float] | None = None,
           buffer_ms: float = 50.0, delay_ms: float = 0.0,
           outages: tuple[Outage, ...] = ()) -> PathTrace:
    wats = ("nr", "wifi", "lifi")[:len(rates)]
    rate = np.tile(np.array(rates), (n, 1))
    k = len(rates)
    lp = np.zeros((n, k)) if loss is None else np.tile(np.array(loss), (n, 1))
    return PathTrace("t", 1.0, wats, rate, rate.copy(), np.full((n, k), delay_ms), lp,
                     np.full((n, k), buffer_ms), outages)


def _ones(trace: PathTrace) -> np.ndarray:
    return np.ones(trace.rate_dl.shape, np.int64)


def _uncapped(trace: PathTrace) -> np.ndarray:
    return np.full(trace.rate_dl.shape, np.inf)


# --- the terms, one by one -------------------------------------------------------------------

def test_a_wat_backup_in_either_direction_is_backup_in_both() -> None:
    dl = np.array([[3, 5, 2], [3, 5, 2]])
    ul = np.array([[1, 0, 4], [0, 1, 1]])
    np.testing.assert_array_equal(tp.coupled_backup(dl, ul), [[3, 0, 2], [0, 5, 2]])
    np.testing.assert_array_equal(tp.coupled_backup(dl, None), dl)


def test_the_reverse_flows_acks_take_their_frames_from_the_path() -> None:
    # One 78-byte ACK per two 1514-byte frames the other way: 2.6 % of them.
    np.testing.assert_allclose(tp.ack_load(np.array([0.0, 10.0, 40.0])),
                               [0.0, 0.2576, 1.0304], atol=1e-4)


def test_a_queue_is_its_buffer_but_never_less_than_two_frames() -> None:
    q = tp.queue_s(np.array([16.0, 0.4]), np.array([50.0, 50.0]))
    assert q[0] == pytest.approx(0.05)
    assert q[1] == pytest.approx(2 * 1514 * 8 / 0.4e6)
    assert tp.queue_s(np.array([0.6]), np.array([200.0]))[0] == pytest.approx(0.2)


def test_the_pipe_holds_the_queue_the_packet_in_service_and_the_acks_in_flight() -> None:
    c = tp.packets_per_s(np.array([12.112]))  # 1000 frames/s
    assert c[0] == pytest.approx(1000.0)
    alone = tp.pipe_packets(np.array([12.112]), np.array([0.05]), np.array([0.0]),
                            np.array([0.0]))
    assert alone[0] == pytest.approx(51.0)
    # ACKs waiting behind the other way's bulk, and on the wire, are in flight too.
    both = tp.pipe_packets(np.array([12.112]), np.array([0.05]), np.array([0.05]),
                           np.array([0.02]))
    assert both[0] == pytest.approx(51.0 + 1000 * (0.02 + tp.QUEUE_FILL * 0.05))


def test_cubics_loss_window_is_the_tcp_friendly_one() -> None:
    w = tp.loss_window(np.array([0.0, 0.02, 0.0001]))
    assert w[0] == np.inf
    assert w[1] == pytest.approx(np.sqrt(1.5 / 0.02)) and w[1] == pytest.approx(8.66, abs=0.01)
    # The AIMD form with CUBIC's beta and its friendly alpha gives the same.
    a, b = tp.CUBIC_ALPHA, tp.CUBIC_BETA
    assert w[2] == pytest.approx(np.sqrt(a * (1 + b) / (2 * (1 - b) * 0.0001)))


def test_the_rto_is_the_round_trip_plus_linuxs_floor() -> None:
    np.testing.assert_allclose(tp.rto_s(np.array([0.0, 0.05])), [0.2, 0.25])


def test_a_loss_in_a_small_window_ends_in_a_timeout() -> None:
    np.testing.assert_allclose(tp.timeout_probability(np.array([1.0, 3.0, 6.0, 300.0])),
                               [1.0, 1.0, 0.5, 0.01])


def _timeouts(rate: float, pipe: float, loss: float = 0.0, congested: bool = True) -> float:
    one = np.array([rate])
    return float(tp.timeouts_per_s(one, one, np.array([pipe]), np.array([loss]),
                                   np.array([0.25]), np.array([congested]))[0])


def test_timeouts_come_from_small_pipes_and_lost_retransmissions() -> None:
    assert _timeouts(16.0, 100.0) < 0.01 < 1.0 < _timeouts(0.6, 4.0)
    # A subflow in a timeout starts no other: at most one per RTO, however small the pipe.
    assert _timeouts(0.1, 1.0) < 1 / 0.25
    # Capped below its path it queues at the sender: no congestion losses.
    assert _timeouts(0.6, 4.0, congested=False) == 0.0
    # Random loss: a loss whose retransmission is lost too.
    events = tp.packets_per_s(np.array([16.0]))[0] * 0.02 ** 2
    assert _timeouts(16.0, 800.0, 0.02) == pytest.approx(events / (1 + events * 0.25))


@pytest.mark.parametrize(("cut", "rto", "resume"), [
    (0.07, 0.25, 0.25),   # a handover shorter than the RTO: the first retransmission
    (0.25, 0.25, 0.25),
    (0.5, 0.25, 0.75),    # then 3 RTO, 7 RTO, ...
    (1.0, 0.25, 1.75),
    (2.78, 0.3, 4.5),
])
def test_a_cut_subflow_carries_again_at_its_next_backed_off_retransmission(
        cut: float, rto: float, resume: float) -> None:
    assert tp.backoff_resume(cut, rto) == pytest.approx(resume)


# --- what they do to a trace -----------------------------------------------------------------

def test_clean_paths_lose_only_the_reverse_acks() -> None:
    t = _trace([16.0, 8.0])
    got = tp.deliver(t, "dl", _ones(t), _uncapped(t), BENCH)
    want = np.array([16.0, 8.0]) - tp.ack_load(np.array([16.0, 8.0]))
    np.testing.assert_allclose(got.mean(axis=0), want, rtol=0.01)


def test_a_handover_costs_the_connection_more_than_its_own_length() -> None:
    cut = Outage("nr", 3.2, 0.07, "drop")
    t = _trace([20.0, 10.0], outages=(cut,))
    base = tp.deliver(_trace([20.0, 10.0]), "dl", _ones(t), _uncapped(t), BENCH).sum()
    got = tp.deliver(t, "dl", _ones(t), _uncapped(t), BENCH).sum()
    fluid_loss = 20.0 * 0.07
    assert base - got > 3 * fluid_loss
    # At weight 0 (backup, another WAT up) the cut WAT carried nothing: nothing to lose.
    w = _ones(t)
    w[:, 0] = 0
    assert tp.deliver(t, "dl", w, _uncapped(t), BENCH).sum() == pytest.approx(
        tp.deliver(_trace([20.0, 10.0]), "dl", w, _uncapped(t), BENCH).sum())


def test_an_agent_that_sees_the_carrier_drop_spares_the_connection_the_stall() -> None:
    t = _trace([12.0, 8.0, 24.0], outages=(Outage("lifi", 3.5, 1.2, "down"),))
    alone = tp.deliver(t, "dl", _ones(t), _uncapped(t), BENCH)
    agent = tp.deliver(t, "dl", _ones(t), _uncapped(t),
                       tp.Stack(plays_delay=False, carrier_reaction=True))
    # The other WATs keep carrying; LiFi waits for its backoff alone (back at 3.5 + 1.75 s
    # with a 0.25 s RTO), for its rejoin under the agent: nothing in period 4 either way.
    assert agent[:, :2].sum() > alone[:, :2].sum()
    assert agent[4, 2] == alone[4, 2] == 0.0
    # A handover (the interface stays up) the agent cannot see.
    drop = _trace([12.0, 8.0, 24.0], outages=(Outage("lifi", 3.5, 1.2, "drop"),))
    np.testing.assert_allclose(
        tp.deliver(drop, "dl", _ones(t), _uncapped(t),
                   tp.Stack(plays_delay=False, carrier_reaction=True)), alone)


def test_under_the_agent_a_returned_link_carries_only_once_its_subflow_rejoined() -> None:
    # Half a second of cut: alone, the subflow's second retransmission (3 RTO, 0.75 s after
    # the cut began) finds the path back; under the agent its subflow was closed, and a new
    # one carries rejoin_s after the link returned, whatever the weights say meanwhile.
    t = _trace([12.0, 8.0, 24.0], outages=(Outage("lifi", 3.2, 0.5, "down"),))
    alone = tp.deliver(t, "dl", _ones(t), _uncapped(t), BENCH)
    agent = tp.Stack(plays_delay=False, carrier_reaction=True)
    assert 0.0 < agent.rejoin_s < 1.3  # back within period 4
    w = _ones(t)
    w[3, 2] = 0  # the agents report a lost link at weight 0 while it is down
    got = tp.deliver(t, "dl", w, _uncapped(t), agent)
    full = alone[0, 2]
    assert alone[4, 2] == pytest.approx(full)
    assert got[3, 2] == 0.0
    assert got[4, 2] == pytest.approx((5.0 - 3.7 - agent.rejoin_s) * full)
    assert got[5, 2] == pytest.approx(full)


def test_the_rejoin_costs_the_agents_blockages_only() -> None:
    t = _trace([12.0, 8.0, 24.0], 20, outages=(Outage("lifi", 3.5, 1.2, "down"),
                                               Outage("lifi", 9.2, 0.5, "down")))
    ones, free = _ones(t), _uncapped(t)

    def lifi(stack: tp.Stack, tr: PathTrace = t) -> float:
        return float(tp.deliver(tr, "dl", ones, free, stack)[:, 2].sum())

    quick, slow = (tp.Stack(plays_delay=False, carrier_reaction=True, rejoin_s=r)
                   for r in (0.5, tp.Stack().rejoin_s))
    # Each second of rejoin costs LiFi a second of its rate after each of the two returns.
    full = float(tp.deliver(t, "dl", ones, free, BENCH)[0, 2])
    assert lifi(quick) - lifi(slow) == pytest.approx(2 * (tp.Stack().rejoin_s - 0.5) * full)
    # Without the agent, or on a handover it cannot see, the rejoin plays no part.
    assert lifi(tp.Stack(plays_delay=False, rejoin_s=0.5)) == lifi(BENCH)
    drop = _trace([12.0, 8.0, 24.0], 20, outages=(Outage("lifi", 3.5, 1.2, "drop"),))
    assert lifi(quick, drop) == lifi(slow, drop)


def test_a_very_slow_path_holds_the_connection_hostage_unless_it_is_backup() -> None:
    t = _trace([17.0, 60.0, 0.6])
    carrying = predict(t, "dl", stack=BENCH)
    w = _ones(t)
    w[:, 2] = 0
    backup = predict(t, "dl", w, stack=BENCH)
    assert carrying < 0.7 * backup
    acks = float(tp.ack_load(np.array(1.0)))
    assert backup == pytest.approx(TRANSPORT_EFFICIENCY * (1 - acks) * 77 / 77.6, rel=0.01)
    # Capped at the sender below its path, it loses no segment at the router.
    caps = _uncapped(t)
    caps[:, 2] = 0.5
    assert predict(t, "dl", _ones(t), caps, BENCH) > 0.9 * backup


def test_the_twin_sees_the_other_directions_backup_flags() -> None:
    t = _trace([17.0, 60.0, 0.6])
    ul = _ones(t)
    ul[:, 2] = 0
    # The downlink keeps LiFi at weight 1, but the CPE flagged it backup for its uplink.
    assert predict(t, "dl", _ones(t), stack=BENCH, reverse_weights=ul) > 1.3 * predict(
        t, "dl", _ones(t), stack=BENCH)


def test_loss_caps_a_subflow_only_where_the_round_trip_is_long() -> None:
    lossy = dict(loss=[0.0, 2.0], buffer_ms=400.0, delay_ms=40.0)
    t = _trace([16.0, 16.0], **lossy)  # type: ignore[arg-type]
    wire = tp.deliver(t, "dl", _ones(t), _uncapped(t), tp.Stack())
    # sqrt(3 / 0.04) segments per 80 ms round trip: about 1.3 Mbit/s.
    assert wire[:, 1].mean() == pytest.approx(
        np.sqrt(1.5 / 0.02) * 1514 * 8 / 0.08 / 1e6, rel=0.05)
    bench = tp.deliver(t, "dl", _ones(t), _uncapped(t), BENCH)
    assert bench[:, 1].mean() > 10 * wire[:, 1].mean()
    # Lost retransmissions still cost the connection some timeouts.
    clean = tp.deliver(_trace([16.0, 16.0], buffer_ms=400.0), "dl", _ones(t), _uncapped(t),
                       BENCH)
    assert bench.sum() < 0.97 * clean.sum()
