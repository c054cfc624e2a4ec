"""What replicas that share a fleet share in SDL (a real RedisServer): the CPE records, which a
replica that gains or loses a shard stops mirroring.  The A1 book they follow:
``tests/xapp/app/wiring/test_shards.py``."""

from __future__ import annotations

from tests.support.redis_server import RedisServer


def test_forgotten_cpe_records_stay_in_sdl_and_are_not_written_again(
        redis: RedisServer) -> None:
    """A replica that gains or loses a shard drops its own copy of the shard's CPE records
    (stale by then), without deleting them in SDL or flushing them later."""
    from xapp.adapters.sdl import SdlStateStore, ricsdl_backend
    from xapp.core.ports import CpeRecord

    a = SdlStateStore("mcw-t", ricsdl_backend)
    b = SdlStateStore("mcw-t", ricsdl_backend)
    try:
        assert a.sync() and b.sync()
        old = CpeRecord.from_dict({"version": 5, "time_s": 1.0, "weights": {"nr": 1}})
        new = CpeRecord.from_dict({"version": 105, "time_s": 2.0, "weights": {"nr": 2}})
        a.put_cpe("c1", old)
        assert a.forget_cpes(lambda c: c == "c1") == 1 and a.cpe("c1") is None
        b.put_cpe("c1", new)
        assert b.sync() and a.sync()  # a writes nothing over b's record
        fresh = SdlStateStore("mcw-t", ricsdl_backend)
        assert fresh.sync()
        stored = fresh.cpe("c1")
        assert stored is not None and stored.version == 105
        fresh.stop()
    finally:
        a.stop()
        b.stop()
