"""SDL's Redis through redis-py: the DBAAS instance chosen as ricsdl chooses it (checked
against ricsdl itself, and with two real redis-servers), and the version store kept there."""

from __future__ import annotations

import subprocess
import time
import zlib
from pathlib import Path

import pytest
import redis as redis_py

from tests.support.polling import free_port, stop_process, wait_until
from tests.support.redis_server import RedisServer, redis_binary
from tests.support.tcp_proxy import CuttableProxy
from xapp.adapters.dbaas import DbaasAddress, RedisVersionStore, dbaas_address, redis_from_env
from xapp.adapters.sdl import SDL_TIMEOUT_S, SdlStateStore, ricsdl_backend
from xapp.adapters.shard_leases import ShardLeases

DBAAS_VARS = ("DBAAS_SERVICE_HOST", "DBAAS_SERVICE_PORT", "DBAAS_SERVICE_SENTINEL_PORT",
              "DBAAS_MASTER_NAME", "DBAAS_CLUSTER_ADDR_LIST")
NAMESPACES = ("mcw", "mcw-t", "fleet-a", "fleet-b", "sdl", "e2", "x", "y")


def direct(server: RedisServer) -> redis_py.Redis:
    return redis_py.Redis(host=server.host, port=server.port, socket_timeout=2.0)


def index_of(namespace: str, n: int) -> int:
    return zlib.crc32(namespace.encode()) % n


# --- the address, a pure function -------------------------------------------------------------


def test_one_instance_from_host_and_port() -> None:
    env = {"DBAAS_SERVICE_HOST": "dbaas", "DBAAS_SERVICE_PORT": "6380"}
    assert dbaas_address("mcw", env) == DbaasAddress("dbaas", 6380)
    # A port list without an address list: the one host takes the first port.
    assert dbaas_address("mcw", {**env, "DBAAS_SERVICE_PORT": "6381,6382"}).port == 6381
    # Nothing set: where ricsdl would fail, the xApp's default.
    assert dbaas_address("mcw", {}) == DbaasAddress("localhost", 6379)
    assert dbaas_address("mcw", {"DBAAS_SERVICE_HOST": "dbaas"}) == DbaasAddress("dbaas", 6379)


def test_the_cluster_list_spreads_namespaces_by_crc32() -> None:
    env = {"DBAAS_SERVICE_HOST": "ignored", "DBAAS_CLUSTER_ADDR_LIST": "db-0,db-1,db-2",
           "DBAAS_SERVICE_PORT": "7000,7001"}
    chosen = {ns: dbaas_address(ns, env) for ns in NAMESPACES}
    # The list replaces the host; a port list shorter than it repeats its last port.
    assert {a.host for a in chosen.values()} == {"db-0", "db-1", "db-2"}
    for ns, addr in chosen.items():
        i = index_of(ns, 3)
        assert addr == DbaasAddress(f"db-{i}", [7000, 7001, 7001][i])
    # One address in the list: that one, whatever the namespace (and the host is ignored).
    one = {**env, "DBAAS_CLUSTER_ADDR_LIST": "db-9"}
    assert {dbaas_address(ns, one) for ns in NAMESPACES} == {DbaasAddress("db-9", 7000)}


def test_sentinels_per_instance() -> None:
    env = {"DBAAS_CLUSTER_ADDR_LIST": "s-0,s-1", "DBAAS_SERVICE_PORT": "6379",
           "DBAAS_SERVICE_SENTINEL_PORT": "26379", "DBAAS_MASTER_NAME": "m0,m1"}
    for ns in NAMESPACES:
        i = index_of(ns, 2)
        assert dbaas_address(ns, env) == DbaasAddress(f"s-{i}", None, 26379, f"m{i}")
    single = {"DBAAS_SERVICE_HOST": "s", "DBAAS_SERVICE_SENTINEL_PORT": "26380",
              "DBAAS_MASTER_NAME": "dbaasmaster"}
    assert dbaas_address("mcw", single) == DbaasAddress("s", None, 26380, "dbaasmaster")
    with pytest.raises(ValueError, match="DBAAS_MASTER_NAME"):
        dbaas_address("mcw", {**single, "DBAAS_MASTER_NAME": ""})
    with pytest.raises(ValueError, match="DBAAS_MASTER_NAME"):
        dbaas_address("mcw", {k: v for k, v in single.items() if k != "DBAAS_MASTER_NAME"})


ENVIRONMENTS = [
    {"DBAAS_SERVICE_HOST": "h", "DBAAS_SERVICE_PORT": "6380"},
    {"DBAAS_SERVICE_HOST": "h", "DBAAS_SERVICE_PORT": "6380,6381"},
    {"DBAAS_CLUSTER_ADDR_LIST": "a,b", "DBAAS_SERVICE_PORT": "7000"},
    {"DBAAS_CLUSTER_ADDR_LIST": "a,b,c", "DBAAS_SERVICE_PORT": "7000,7001,7002"},
    {"DBAAS_CLUSTER_ADDR_LIST": "a,b,c,d,e", "DBAAS_SERVICE_PORT": "7000,7001",
     "DBAAS_SERVICE_HOST": "h"},
    {"DBAAS_CLUSTER_ADDR_LIST": "a,b,c", "DBAAS_SERVICE_PORT": "7000",
     "DBAAS_SERVICE_SENTINEL_PORT": "26379,26380", "DBAAS_MASTER_NAME": "m0"},
    {"DBAAS_SERVICE_HOST": "h", "DBAAS_SERVICE_SENTINEL_PORT": "26379",
     "DBAAS_MASTER_NAME": "m0,m1"},
]


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_the_choice_is_ricsdls_own(env: dict[str, str], monkeypatch: pytest.MonkeyPatch
                                   ) -> None:
    """ricsdl, configured by the same environment, picks the same instance for every
    namespace (its clients are lazy: nothing needs to listen at these addresses)."""
    for name in DBAAS_VARS:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    sdl = ricsdl_backend()
    try:
        for ns in NAMESPACES:
            pool = sdl.get_backend().get_redis_connection(ns).connection_pool  # type: ignore[attr-defined]
            manager = getattr(pool, "sentinel_manager", None)
            if manager is None:
                theirs = DbaasAddress(pool.connection_kwargs["host"],
                                      int(pool.connection_kwargs["port"]))
                kwargs = [pool.connection_kwargs]
            else:
                sentinel = manager.sentinels[0].connection_pool.connection_kwargs
                theirs = DbaasAddress(sentinel["host"], None, int(sentinel["port"]),
                                      pool.service_name)
                kwargs = [pool.connection_kwargs, sentinel]
            assert dbaas_address(ns, env) == theirs, ns
            # Every connection ricsdl opens, to Redis or to a Sentinel, has a timeout.
            assert all(k["socket_timeout"] == k["socket_connect_timeout"] == SDL_TIMEOUT_S
                       for k in kwargs)
    finally:
        sdl.close()


# --- against real servers -------------------------------------------------------------------


def test_leases_and_versions_sit_in_the_instance_ricsdl_uses(
        redis: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two DBAAS instances in ``DBAAS_CLUSTER_ADDR_LIST``: for a namespace on either, the
    state ricsdl writes, the version ceilings and the shard leases all land in one."""
    with RedisServer(tmp_path / "second") as second:
        servers = [redis, second]
        monkeypatch.setenv("DBAAS_CLUSTER_ADDR_LIST", f"{redis.host},{second.host}")
        monkeypatch.setenv("DBAAS_SERVICE_PORT", f"{redis.port},{second.port}")
        by_index = {index_of(ns, 2): ns for ns in reversed(NAMESPACES)}
        assert set(by_index) == {0, 1}
        for i, ns in sorted(by_index.items()):
            state = SdlStateStore(ns, ricsdl_backend)
            state.set_model_version("m1")
            assert state.sync(), state.last_error
            state.stop()
            client = redis_from_env(ns, 1.0)
            RedisVersionStore(client, ns).set_ceilings({"c1": 100})
            leases = ShardLeases(client, ns)
            assert leases.round("r1", 5000, acquire=[2], renew={}, release={}).acquired == {2: 1}
            home, other = direct(servers[i]), direct(servers[1 - i])
            assert home.get(f"{{{ns}}},model/version") == b'"m1"'
            assert home.get(f"{{{ns}}},version/c1") == b"100"
            assert home.get(leases.shard_key(2)) == b"r1|1"
            assert other.keys(f"*{ns}*") == []
            # ricsdl reads the ceiling where it wrote its own keys (a downgrade keeps it too).
            sdl = ricsdl_backend()
            assert sdl.get(ns, {"version/c1"}) == {"version/c1": b"100"}
            sdl.close()
            client.close()


def test_version_ceilings_upgrade_from_ricsdl_and_only_grow(redis: RedisServer) -> None:
    # What the ricsdl store of earlier releases wrote: the ceiling as JSON under SDL's key.
    sdl = ricsdl_backend()
    sdl.set("mcw-t", {"version/c1": b"100"})
    sdl.close()
    store = RedisVersionStore(redis_from_env("mcw-t", 1.0), "mcw-t")
    assert store.get_ceilings(["c1", "c2"]) == {"c1": 100, "c2": 0}
    store.set_ceilings({"c1": 50, "c2": 200})  # a late, lower raise changes nothing
    assert RedisVersionStore(direct(redis), "mcw-t").get_ceilings(["c1", "c2"]) == {
        "c1": 100, "c2": 200}
    floor = RedisVersionStore(direct(redis), "mcw-t", floor=lambda c: 300 if c == "c1" else 0)
    assert floor.get_ceilings(["c1"]) == {"c1": 300}
    assert store.get_ceilings([]) == {}
    # Redis away: the calls raise; back (empty, no persistence): the same client reconnects.
    redis.stop()
    with pytest.raises(redis_py.exceptions.ConnectionError):
        store.set_ceilings({"c1": 300})
    redis.start()
    store.set_ceilings({"c1": 300})
    assert store.get_ceilings(["c1"]) == {"c1": 300}


def test_a_redis_that_stops_answering_fails_a_call_within_the_timeout(
        redis: RedisServer) -> None:
    proxy = CuttableProxy(redis.port)
    try:
        env = {"DBAAS_SERVICE_HOST": "127.0.0.1", "DBAAS_SERVICE_PORT": str(proxy.port)}
        store = RedisVersionStore(redis_from_env("mcw-t", 0.3, env), "mcw-t")
        store.set_ceilings({"c1": 100})
        proxy.cut()
        started = time.monotonic()
        with pytest.raises(redis_py.exceptions.TimeoutError):
            store.set_ceilings({"c1": 200})
        assert time.monotonic() - started < 1.0
        proxy.heal()
        store.set_ceilings({"c1": 200})
        assert store.get_ceilings(["c1"]) == {"c1": 200}
    finally:
        proxy.close()


def test_leases_follow_sdl_through_a_sentinel(redis: RedisServer, tmp_path: Path) -> None:
    """With ricsdl's Sentinel variables the leases go to the master the Sentinel names (a real
    redis-server in sentinel mode in front of the test's Redis)."""
    port = free_port()
    conf = tmp_path / "sentinel.conf"
    conf.write_text(f"port {port}\nbind 127.0.0.1\ndir {tmp_path}\n"
                    f"sentinel monitor mcwdb 127.0.0.1 {redis.port} 1\n")
    binary = redis_binary()
    assert binary is not None
    proc = subprocess.Popen([binary, str(conf), "--sentinel"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        env = {"DBAAS_SERVICE_HOST": "127.0.0.1", "DBAAS_SERVICE_PORT": "1",
               "DBAAS_SERVICE_SENTINEL_PORT": str(port), "DBAAS_MASTER_NAME": "mcwdb"}

        def answers() -> bool:
            try:
                return bool(redis_from_env("mcw-t", 1.0, env).ping())  # type: ignore[attr-defined]
            except Exception:
                return False

        assert wait_until(answers, 10)
        via = ShardLeases(redis_from_env("mcw-t", 1.0, env), "mcw-t")
        assert via.round("a", 5000, acquire=[3], renew={}, release={}).acquired == {3: 1}
        assert direct(redis).get(via.shard_key(3)) == b"a|1"  # on the master itself
    finally:
        stop_process(proc)
