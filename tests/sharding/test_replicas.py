"""Three ``mcw run`` replicas share one fleet through one real Redis (RedisServer) and one real
Mosquitto (MosquittoBroker): 300 simulated CPEs publish telemetry over MQTT, three real Go
agents (dry-run backend) apply what they get, and an observer records every weights message.

One story, in order (each step's figures go to the log of the test):

1. every CPE gets weights, the 64 shards split over the three replicas;
2. one replica is killed (SIGKILL): its shards are held by the others within two control
   periods of its death (the default lease, 1.5 periods), and no CPE goes without weights for
   as long as its weights lease;
3. a replica joins: shards move to it (released by compare-and-delete, not expiry), with no
   CPE left without weights;
4. one replica is cut off from Redis (a black-holing proxy between it and Redis): it stops
   publishing before its leases can expire in Redis, and the others take its shards after;
5. throughout, no CPE's version ever repeats or goes back, across every change of owner.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sharding.fleet import AGENT_BINARY, Fleet, Simulator, max_gap, version_regressions
from tests.support.mosquitto import mosquitto_binary
from tests.support.polling import wait_until
from tests.support.redis_server import redis_binary
from xapp.core.shards import shard_of

log = logging.getLogger(__name__)

pytestmark = [pytest.mark.slow]

N_SIM = 300
AGENTS = ["cpe-0001", "cpe-0002", "cpe-0003"]
PERIOD_S = 0.5
SHARD_LEASE_S = 1.5 * PERIOD_S  # the default's ratio (below its 1 s floor here)
WEIGHTS_LEASE_S = 6.0


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    if redis_binary() is None or mosquitto_binary() is None:
        pytest.skip("redis-server and mosquitto are needed")
    if not AGENT_BINARY.exists():
        pytest.skip("the Go agent is not built (make agent)")
    # Every CPE decided every tick and sent whenever its weights move at all: each replica
    # publishes all the time, so the partition shows the fence stopping it, not idleness.
    f = Fleet(tmp_path, n_agents=len(AGENTS), control_period_s=PERIOD_S,
              shard_lease_s=SHARD_LEASE_S, weights_lease_s=WEIGHTS_LEASE_S,
              extra_env={"MCW_DEFAULT_POLICY_UPDATE_PERIOD_S": str(PERIOD_S),
                         "MCW_DEFAULT_POLICY_HYSTERESIS_PCT": "0"})
    try:
        yield f
    finally:
        f.stop()


def _owners(fleet: Fleet) -> dict[str, set[int]]:
    return {rid: r.held() for rid, r in fleet.replicas.items() if r.running()}


def test_three_replicas_share_kill_join_and_partition(fleet: Fleet) -> None:
    sim_cpes = [f"sim-{i:04d}" for i in range(N_SIM)]
    every = sim_cpes + AGENTS
    observer = fleet.start_observer()
    a = fleet.start_replica("r-a")
    b = fleet.start_replica("r-b")
    c = fleet.start_replica("r-c", via_proxy=True)
    sim = Simulator(fleet.broker, every, period_s=1.0).start()
    try:
        for cpe in AGENTS:
            fleet.start_agent(cpe)

        # 1. Every CPE gets weights; the shards are split, each held by exactly one replica.
        def all_have_weights() -> bool:
            seen = observer.snapshot()
            return all(seen.get(c) for c in every)

        assert wait_until(all_have_weights, 45), (
            f"{sum(1 for c in every if observer.snapshot().get(c))} of {len(every)} CPEs got "
            f"weights; {_owners(fleet)}; {a.log_path.read_text()[-2000:]}")
        def balanced() -> bool:
            owners = _owners(fleet)
            return (sum(len(h) for h in owners.values()) == 64
                    and all(18 <= len(h) <= 24 for h in owners.values()))

        assert wait_until(balanced, 15), _owners(fleet)
        owners = _owners(fleet)
        assert not (owners["r-a"] & owners["r-b"]) and not (owners["r-b"] & owners["r-c"])
        for cpe in AGENTS:  # the real agents applied what they got
            def applied(cpe: str = cpe) -> bool:
                return "applied" in fleet.agent_log(cpe)

            assert wait_until(applied, 10), fleet.agent_log(cpe)[-1500:]

        # 2. Kill r-b: the others hold its shards within two periods of its death.
        b_shards = owners["r-b"]
        killed = time.monotonic()
        b.kill()
        assert wait_until(lambda: b_shards <= (a.held() | c.held()), 10)
        takeover_s = time.monotonic() - killed
        log.info("takeover of %d shards after SIGKILL: %.2f s", len(b_shards), takeover_s)
        # At most 1.8 periods by design; 0.2 s more for the polls of wait_until and of the
        # replicas' /ric/v1/shards, and a busy machine's scheduling.
        assert takeover_s <= 2 * PERIOD_S + 0.2, takeover_s
        b_cpes = [cp for cp in every if shard_of(cp) in b_shards]
        # Each of them hears from its new owner.
        assert wait_until(lambda: all(
            any(t > killed for t, _, _ in observer.snapshot().get(cp, []))
            for cp in b_cpes), 10)

        # 3. A replica joins: shards move to it by release, within a few lease rounds.
        joined = time.monotonic()
        d = fleet.start_replica("r-d")
        assert wait_until(lambda: len(d.held()) >= 20 and sum(
            len(h) for h in _owners(fleet).values()) == 64, 30), _owners(fleet)
        log.info("a joining replica held %d shards %.1f s after its start", len(d.held()),
                 time.monotonic() - joined)
        assert fleet.holders().keys() == set(range(64))

        # 4. Partition r-c from Redis: it must stop publishing before its leases end in Redis.
        c_shards = c.held()
        assert c_shards
        fleet.replicas["r-c"].proxy.cut()  # type: ignore[union-attr]
        cut = time.monotonic()
        # The leases' remaining life in Redis, read right after the cut (r-c renews no more);
        # counted from the cut, so the end is, if anything, early.
        pttl = fleet.pttl(c_shards)
        expiry = cut + max(pttl.values()) / 1000.0
        time.sleep(max(0.0, expiry + 1.0 - time.monotonic()))  # the leases' end is the test
        # When r-c last put weights on the wire, on this host's monotonic clock.
        last_send = c.get_json("/ric/v1/shards")["last_publish_monotonic"]
        assert last_send is not None
        log.info("partitioned replica: last publish %.3f s after the cut, leases ended in "
                 "Redis %.3f s after it", last_send - cut, expiry - cut)
        # It was publishing up to the cut (every tick), and nothing past the lease: its last
        # message went out before its local deadline, which may fall before its next tick.
        assert cut - PERIOD_S - 0.1 < last_send < expiry, (last_send - cut, expiry - cut)
        # The others take its shards once they expire; r-c says it is not ready.
        assert wait_until(lambda: c_shards <= (a.held() | d.held()), 10)
        c_cpes = [cp for cp in every if shard_of(cp) in c_shards]
        assert wait_until(lambda: all(
            any(t > expiry for t, _, _ in observer.snapshot().get(cp, []))
            for cp in c_cpes), 10)
        def not_ready() -> bool:
            doc = c.get_json("/ric/v1/health/ready")
            return isinstance(doc, dict) and doc["checks"].get("shard-leases") is False

        assert wait_until(not_ready, 10)

        # 5. Versions, and gaps: nobody went without weights for as long as a lease.
        end = time.monotonic()
        seen = observer.snapshot()
        assert version_regressions(seen) == []
        gaps = {cp: max_gap(seen[cp], end) for cp in every}
        worst = max(gaps, key=lambda k: gaps[k])
        log.info("longest time without weights: %.2f s (%s); messages observed: %d",
                 gaps[worst], worst, observer.count())
        assert gaps[worst] < WEIGHTS_LEASE_S, (worst, gaps[worst])
        for cpe in AGENTS:
            assert "safe weights in force" not in fleet.agent_log(cpe), \
                fleet.agent_log(cpe)[-2000:]
    finally:
        sim.stop()
