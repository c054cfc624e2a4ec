"""The issue clock (issue 33 item 5): never below the reference, a previous holder's issue
time or its own last value; injected clocks only."""

from __future__ import annotations

from xapp.core.issue_clock import MAX_SAMPLE_RTT_S, IssueClock


class Clocks:
    def __init__(self, wall: float, mono: float = 100.0) -> None:
        self.wall_s, self.mono_s = wall, mono

    def wall(self) -> float:
        return self.wall_s

    def mono(self) -> float:
        return self.mono_s

    def tick(self, s: float) -> None:
        self.wall_s += s
        self.mono_s += s


TRUE_MS = 1_700_000_000_000


def slow_clock(behind_s: float = 30.0) -> tuple[IssueClock, Clocks]:
    c = Clocks(wall=TRUE_MS / 1000 - behind_s)
    return IssueClock(c.wall, c.mono), c


def test_a_slow_host_issues_on_the_reference_and_says_how_slow() -> None:
    clock, c = slow_clock(30.0)
    assert clock.skew_s() is None and clock.now_ms() == TRUE_MS - 30_000
    # Redis answered in 2 ms; its TIME was taken at the middle of the round trip.
    assert clock.sample(TRUE_MS + 1, c.mono_s, c.mono_s + 0.002, c.wall_s, c.wall_s + 0.002)
    c.tick(10.0)
    assert clock.now_ms() == TRUE_MS + 10_000
    skew = clock.skew_s()
    assert skew is not None and abs(skew + 30.0) < 0.01


def test_a_fast_host_keeps_its_own_clock() -> None:
    clock, c = slow_clock(-5.0)  # 5 s ahead
    clock.sample(TRUE_MS, c.mono_s, c.mono_s, c.wall_s, c.wall_s)
    assert clock.now_ms() == TRUE_MS + 5_000
    assert clock.skew_s() == 5.0


def test_a_slow_round_trip_is_not_taken() -> None:
    clock, c = slow_clock(30.0)
    assert not clock.sample(TRUE_MS, c.mono_s, c.mono_s + MAX_SAMPLE_RTT_S + 0.01,
                            c.wall_s, c.wall_s)
    assert clock.slow_samples == 1 and clock.now_ms() == TRUE_MS - 30_000


def test_a_previous_holders_issue_time_is_a_floor_and_the_clock_never_goes_back() -> None:
    clock, c = slow_clock(30.0)
    clock.raise_floor(TRUE_MS + 4_000)  # what the previous holder may have issued
    assert clock.now_ms() == TRUE_MS + 4_000
    clock.raise_floor(TRUE_MS)  # a lower floor changes nothing
    c.wall_s -= 3600  # the host's clock steps back an hour
    assert clock.now_ms() == TRUE_MS + 4_000 == clock.last_ms()
