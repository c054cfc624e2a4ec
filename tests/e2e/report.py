"""The e2e report: each fault with its checks, and the whole-run invariants (nothing lost).

Pure functions over what the run recorded, so the invariants are tested on their own
(``tests/e2e/test_report.py``) and a failing check names the CPE and versions involved.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from tests.e2e.observer import Applied


@dataclass
class Check:
    name: str
    ok: bool
    detail: str = ""
    #: True when the check fails because a detection another part owns is not built yet.
    expected_pending: bool = False


@dataclass
class FaultResult:
    name: str
    injected_s: float
    restored_s: float
    detect_s: float | None = None
    detected_by: str = ""
    recover_s: float | None = None
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok or c.expected_pending for c in self.checks)


def versions_in_order(records: list[Applied]) -> Check:
    """Per CPE, applied versions never go back, and one version always means one weight set."""
    last: dict[str, int] = {}
    seen: dict[tuple[str, int], dict[str, int]] = {}
    problems: list[str] = []
    for r in records:
        if not r.online or r.version == 0:
            continue
        if r.version < last.get(r.cpe, 0):
            problems.append(f"{r.cpe}: version {r.version} after {last[r.cpe]} at {r.t:.1f}s")
        last[r.cpe] = max(last.get(r.cpe, 0), r.version)
        prev = seen.setdefault((r.cpe, r.version), r.weights)
        # A CPE agent masks a WAT whose link went down under the same version (weight 0 at
        # once, its weight back when it returns: kernel-agent/README.md, "links").
        if prev != r.weights and r.event not in ("link-down", "link-up"):
            problems.append(f"{r.cpe}: version {r.version} applied as {prev} and {r.weights}")
    return Check("no weights version reused or applied out of order", not problems,
                 "; ".join(problems[:5]) or f"{len(last)} CPEs, {len(records)} state messages")


def weights_in_influx(records: list[Applied], stored: dict[str, set[int]],
                      crashes: Sequence[float] = (), crash_window_s: float = 5.0,
                      in_flight_s: float = 1.0) -> Check:
    """Every version an agent applied is in InfluxDB's ``wat_weight`` for that CPE.

    The xApp writes weight points in batches from memory; a SIGKILL loses the batch not yet
    sent (InfluxDB never acknowledged it).  Versions first applied within ``crash_window_s``
    before a crash at one of ``crashes`` (run seconds) are listed, not failed, and so are those
    applied up to ``in_flight_s`` after it: published by the killed process, they were still on
    their way through the broker when it died (the restarted process publishes seconds later)."""
    first: dict[tuple[str, int], float] = {}
    for r in records:
        if r.online and r.version > 0:
            first.setdefault((r.cpe, r.version), r.t)
    missing = [(k, t) for k, t in sorted(first.items()) if k[1] not in stored.get(k[0], set())]
    lost = [(k, t) for k, t in missing
            if any(c - crash_window_s <= t <= c + in_flight_s for c in crashes)]
    bad = [(k, t) for k, t in missing if (k, t) not in lost]

    def names(items: list[tuple[tuple[str, int], float]]) -> str:
        return ", ".join(f"{c} v{v} at {t:.1f}s" for (c, v), t in items[:4])

    detail = f"{len(first)} applied versions, {len(bad)} missing" + (
        f" ({names(bad)})" if bad else "")
    if lost:
        detail += (f"; {len(lost)} applied just before mcw run was killed are not stored "
                   f"(its unflushed buffer, never acknowledged): {names(lost)}")
    return Check("no applied weight point missing from InfluxDB", not bad, detail)


def kpis_in_influx(acked: int, stored: int) -> Check:
    """Every ``wat_kpi`` point InfluxDB acknowledged is still there."""
    return Check("no acknowledged KPI point missing from InfluxDB", stored >= acked,
                 f"acknowledged {acked}, stored {stored}")


def longest_without_weights(records: list[Applied], end_s: float) -> tuple[str, float]:
    """The CPE that went longest between two applied weight refreshes (online, version > 0)."""
    last: dict[str, float] = {}
    worst = ("", 0.0)
    for r in sorted(records, key=lambda r: r.t):
        if not r.online or r.version == 0:
            continue
        if r.cpe in last and r.t - last[r.cpe] > worst[1]:
            worst = (r.cpe, r.t - last[r.cpe])
        last[r.cpe] = r.t
    for cpe, t in last.items():
        if end_s - t > worst[1]:
            worst = (cpe, end_s - t)
    return worst


def lease_kept(records: list[Applied], end_s: float, lease_s: float,
               outages: list[tuple[float, float]]) -> Check:
    """No CPE went without fresh weights longer than its lease, outside deliberate outages
    (while the broker or the xApp is down nobody can refresh a lease; the agent then reverts to
    its safe weights, which is the designed behaviour, checked by the agent's own tests)."""
    def in_outage(t0: float, t1: float) -> bool:
        return any(a - 1 <= t1 and t0 <= b + lease_s for a, b in outages)

    last: dict[str, float] = {}
    bad: list[str] = []
    for r in sorted(records, key=lambda r: r.t):
        if not r.online or r.version == 0:
            continue
        if r.cpe in last and r.t - last[r.cpe] > lease_s and not in_outage(last[r.cpe], r.t):
            bad.append(f"{r.cpe}: {r.t - last[r.cpe]:.1f}s before {r.t:.1f}s")
        last[r.cpe] = r.t
    cpe, gap = longest_without_weights(records, end_s)
    return Check(f"no CPE without weights longer than its lease ({lease_s:.0f} s) outside the "
                 "broker/xApp outages", not bad,
                 "; ".join(bad[:5]) or f"longest gap overall {gap:.1f}s ({cpe})")


def to_json(faults: list[FaultResult], invariants: list[Check],
            extra: dict[str, Any]) -> dict[str, Any]:
    return {"ok": all(f.ok for f in faults)
            and all(c.ok or c.expected_pending for c in invariants),
            "faults": [{**asdict(f), "ok": f.ok} for f in faults],
            "invariants": [asdict(c) for c in invariants], **extra}


def _secs(v: float | None) -> str:
    return "  -  " if v is None else f"{v:5.1f}"


def to_text(doc: dict[str, Any]) -> str:
    out = [f"{'fault':<34s} {'at s':>6s} {'detect':>6s} {'recover':>7s}  result"]
    for f in doc["faults"]:
        status = "PASS" if f["ok"] else "FAIL"
        if f["ok"] and any(c["expected_pending"] and not c["ok"] for c in f["checks"]):
            status = "PASS (pending checks below)"
        out.append(f"{f['name']:<34s} {f['injected_s']:6.1f} {_secs(f['detect_s']):>6s} "
                   f"{_secs(f['recover_s']):>7s}  {status}"
                   + (f"  by {f['detected_by']}" if f["detected_by"] else ""))
        for c in f["checks"]:
            mark = "ok  " if c["ok"] else ("PEND" if c["expected_pending"] else "FAIL")
            out.append(f"    [{mark}] {c['name']}: {c['detail']}")
    out.append("invariants over the whole run:")
    for c in doc["invariants"]:
        mark = "ok  " if c["ok"] else ("PEND" if c["expected_pending"] else "FAIL")
        out.append(f"    [{mark}] {c['name']}: {c['detail']}")
    out.append("RESULT: " + ("PASS" if doc["ok"] else "FAIL"))
    return "\n".join(out)
