"""The fault story of ``make e2e`` (:data:`STORY`): each fault injected, held, restored, and
its detection and recovery measured (:func:`run_fault`) with the checks it adds."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

from tests.e2e.report import Check, FaultResult
from tests.e2e.system import TELEMETRY_MS, Run
from tests.integration.stack import http_get, influx_write
from tests.support.mosquitto import connect_client
from tests.support.polling import wait_until
from xapp.adapters.mqtt import shard_topic

A1_TYPE = "20100"


def readiness_failure(run: Run) -> str | None:
    """How a fault shows: /alive unreachable or failing, or readiness naming the failed check."""
    if not run.alive():
        return "/alive"
    ok, checks = run.ready()
    if not ok:
        failed = sorted(k for k, v in checks.items() if not v) or ["unreachable"]
        return "/ready: " + ",".join(failed)
    return None


@dataclass
class Fault:
    """One fault of the story: inject, hold, restore; detection and recovery are measured."""

    name: str
    inject: Callable[[Run], None]
    restore: Callable[[Run], None]
    hold_s: float
    #: Returns how the fault was detected (None while it is not).
    detect: Callable[[Run], str | None] = readiness_failure
    #: Whether detection is another part's job not built yet (report, do not fail).
    detect_pending_ok: bool = False
    checks: Callable[[Run, FaultResult], list[Check]] | None = None
    recover_timeout_s: float = 90.0


def run_fault(run: Run, f: Fault) -> FaultResult:
    since = run.observer.latest_versions()
    res = FaultResult(f.name, injected_s=round(run.now(), 2), restored_s=0.0)
    run.mark(f"inject {f.name}")
    f.inject(run)
    t_inj = time.monotonic()
    deadline = t_inj + f.hold_s
    while time.monotonic() < deadline:
        if res.detect_s is None:
            how = f.detect(run)
            if how is not None:
                res.detect_s, res.detected_by = round(time.monotonic() - t_inj, 2), how
                run.mark(f"detected {f.name} by {how}")
        time.sleep(0.2)  # the fault is held hold_s of real time; detection polled meanwhile
    run.mark(f"restore {f.name}")
    f.restore(run)
    res.restored_s = round(run.now(), 2)
    t_res = time.monotonic()
    since = {c: max(v, since.get(c, 0)) for c, v in run.observer.latest_versions().items()}
    ok = wait_until(lambda: run.ready()[0] and run.all_refreshed(since), f.recover_timeout_s, 0.2)
    if ok:
        res.recover_s = round(time.monotonic() - t_res, 2)
        run.mark(f"recovered {f.name}")
    res.checks.append(Check("detected", res.detect_s is not None,
                            res.detected_by or "no readiness or liveness change",
                            expected_pending=f.detect_pending_ok and res.detect_s is None))
    refreshed = sum(run.observer.latest_versions().get(c, 0) > since.get(c, 0)
                    for c in run.cpes)
    res.checks.append(Check("recovered: ready, every agent applied newer weights", ok,
                            f"{refreshed}/{len(run.cpes)} agents refreshed"))
    if f.checks is not None:
        res.checks.extend(f.checks(run, res))
    return res


# --- the faults -------------------------------------------------------------------------------

SPLIT = {"mode": "fixed_split", "excluded_wats": ["lifi"],
         "wats": {"nr": {"split_pct": 50}, "wifi": {"split_pct": 50}}}


def _a1_create(run: Run) -> None:
    run.scratch["split_wall0"] = time.time()
    resp = run.a1({"operation": "CREATE", "policy_type_id": A1_TYPE,
                   "policy_instance_id": "e2e-split", "payload": json.dumps(SPLIT)})
    run.mark(f"A1 CREATE fixed_split 50/50: {resp.get('status')}")


def _a1_delete(run: Run) -> None:
    run.scratch["split_wall1"] = time.time()
    resp = run.a1({"operation": "DELETE", "policy_type_id": A1_TYPE,
                   "policy_instance_id": "e2e-split", "payload": "{}"})
    run.mark(f"A1 DELETE fixed_split: {resp.get('status')}")


def _split_applied(run: Run) -> str | None:
    latest = run.latest()
    n = sum(1 for c in run.cpes if (w := latest.get(c)) and w.get("nr") == w.get("wifi")
            and w.get("nr", 0) > 0 and w.get("lifi", 0) == 0)
    return f"{n} agents applied 50/50" if n == len(run.cpes) else None


def _unequal(run: Run) -> int:
    return sum(1 for w in run.latest().values() if w.get("nr") != w.get("wifi"))


def _split_checks(run: Run, res: FaultResult) -> list[Check]:
    back = wait_until(lambda: _unequal(run) >= 0.9 * len(run.cpes), 30)
    return [Check("every agent applied 50/50 through A1", res.detect_s is not None,
                  f"in {res.detect_s}s" if res.detect_s is not None else "not all agents"),
            Check("load balancing back after DELETE on >= 90% of agents", back,
                  f"{_unequal(run)}/{len(run.cpes)} agents with unequal nr/wifi weights")]


def _broker_stop(run: Run) -> None:
    run.stack.broker.stop()


def _broker_start(run: Run) -> None:
    run.stack.broker.start()


def _broker_hang(run: Run) -> None:
    assert run.stack.broker.proc is not None
    os.kill(run.stack.broker.proc.pid, signal.SIGSTOP)


def _broker_resume(run: Run) -> None:
    assert run.stack.broker.proc is not None
    os.kill(run.stack.broker.proc.pid, signal.SIGCONT)


def _xapp_kill(run: Run) -> None:
    assert run.stack.xapp.proc is not None
    run.stack.xapp.proc.kill()
    run.stack.xapp.proc.wait()
    run.stack.xapp.proc = None


def _xapp_start(run: Run) -> None:
    run.stack.xapp.start()


def _redis_stop(run: Run) -> None:
    run.stack.redis.stop()


def _redis_start(run: Run) -> None:
    run.stack.redis.start()


def _influx_stop(run: Run) -> None:
    run.stack.influx.stop()


def _influx_start(run: Run) -> None:
    run.stack.influx.start()


def _agent_stop(run: Run) -> None:
    cpe = run.cpes[0]
    proc = run.stack.agents[0]
    proc.terminate()
    proc.wait(timeout=10)
    run.mark(f"agent {cpe} stopped")


def _agent_start(run: Run) -> None:
    cpe = run.cpes[0]
    run.stack.agents[0] = run.stack.start_agent(cpe, telemetry_ms=TELEMETRY_MS,
                                                metrics_port=run.agent_ports[cpe])
    run.stack.agents.pop()  # start_agent appends; the restarted agent takes the old slot


def _agent_detect(run: Run) -> str | None:
    cpe = run.cpes[0]
    last = [r for r in run.observer.snapshot() if r.cpe == cpe]
    return "agent's last will (online=false)" if last and not last[-1].online else None


def _agent_checks(run: Run, res: FaultResult) -> list[Check]:
    cpe = run.cpes[0]
    recs = [r for r in run.observer.snapshot() if r.cpe == cpe and r.online and r.version > 0]
    before = [r.version for r in recs if r.t < res.injected_s]
    after = [r.version for r in recs if r.t > res.restored_s]
    ok = bool(before and after and after[0] >= before[-1])
    return [Check("restarted agent resumed from its state file (first version >= last before)",
                  ok, f"before {before[-1:]}, first after {after[:1]}")]


def _malformed(run: Run) -> None:
    results: list[str] = []
    resp = run.a1({"operation": "UPDATE", "policy_type_id": A1_TYPE,
                   "policy_instance_id": "e2e-bad", "payload": json.dumps({"max_weight": 0})})
    run.scratch["a1_refused"] = float(resp.get("status") == "ERROR")
    results.append(f"A1: {resp.get('status')}")
    run.scratch["dropped_before"] = _dropped(run)
    client = connect_client(run.stack.broker, run.cpes[-1], client_id="e2e-bad-cpe")
    client.publish(shard_topic(run.cpes[-1], "telemetry"), b'{"schema": "garbage"')
    client.close()
    results.append("MQTT telemetry: truncated JSON published")
    run.scratch["skipped_before"] = _skipped_unknown_wat(run)
    ok = influx_write(run.stack.influx, [f"wat_kpi,cpe={run.cpes[-1]},wat=bogus,cell=x "
                                         f"delivered_mbps=1.0 {time.time_ns()}"])
    results.append(f"InfluxDB: a KPI row of an unknown WAT, acknowledged={ok}")
    code = http_get(run.stack.xapp.http_port, "/ric/v1/health/ready?" + "x" * 5000)[0]
    results.append(f"HTTP: oversized query answered {code}")
    run.mark("malformed inputs: " + "; ".join(results))


def _dropped(run: Run) -> float:
    """Telemetry payloads the xApp dropped, every reason."""
    return sum(v for (name, labels), v in run.stack.xapp.metrics().items()
               if name == "mcw_mqtt_subscriber_dropped_payloads_total"
               and ("kind", "telemetry") in labels)


def _skipped_unknown_wat(run: Run) -> float:
    return run.stack.xapp.metrics().get(
        ("mcw_kpi_rows_skipped_total", (("reason", "unknown_wat"),)), 0.0)


def _malformed_checks(run: Run, _res: FaultResult) -> list[Check]:
    counted = wait_until(lambda: _dropped(run) > run.scratch["dropped_before"], 10)
    skipped = wait_until(lambda: _skipped_unknown_wat(run) > run.scratch["skipped_before"], 10)
    return [Check("A1: an invalid policy refused with status ERROR",
                  run.scratch["a1_refused"] == 1.0, ""),
            Check("MQTT: malformed telemetry dropped and counted", counted,
                  f"mcw_mqtt_subscriber_dropped_payloads_total{{kind=telemetry}} = "
                  f"{_dropped(run)}"),
            Check("InfluxDB: a KPI row of an unknown WAT skipped and counted", skipped,
                  f"mcw_kpi_rows_skipped_total{{reason=unknown_wat}} = "
                  f"{_skipped_unknown_wat(run)}"),
            Check("xApp alive and ready after every malformed input",
                  run.alive() and run.ready()[0], "")]


def _nothing(_run: Run) -> None:
    return None


def _wat_down(run: Run) -> None:
    assert run.link is not None
    run.scratch["wat_down_wall"] = time.time()
    run.scratch["wat_down_t"] = run.now()
    run.link.topo.set_link("wifi", False)


def _wat_up(run: Run) -> None:
    assert run.link is not None
    run.scratch["wat_up_wall"] = time.time()
    run.link.topo.set_link("wifi", True)


def _wat_down_seen(run: Run) -> str | None:
    """The real CPE agent reported the WAT down (its link-down state message)."""
    assert run.link is not None
    cpe = run.link.cpe_id
    # Taken before the interface went down: the agent's state can beat the timeline's mark.
    t_inj = run.scratch["wat_down_t"]
    hit = any(r.cpe == cpe and r.event == "link-down" and r.t >= t_inj
              for r in run.observer.snapshot())
    return "the CPE agent's link-down state" if hit else None


def _wat_checks(run: Run, _res: FaultResult) -> list[Check]:
    """Delivered back above the fastest path alone in both directions after the WAT returned
    (the subflow that stood through the outage first waits out its backed-off timer)."""
    assert run.link is not None
    up = run.scratch["wat_up_wall"]
    best = max(p.mbit for p in run.link.topo.paths)
    back = run.link.recovered_at(up, best, 40)
    dl = [r for r in run.observer.proxy_snapshot()
          if r.cpe == run.link.cpe_id and r.online and r.version > 0]
    # From 2 s after the link went down (the queued second drains) to its return.
    during = run.link.mean("ul", run.scratch["wat_down_wall"] + 2, up)
    run.scratch["wat_link_recover_s"] = -1.0 if back is None else round(back - up, 1)
    return [Check("real connection: both directions above the fastest path after the WAT "
                  "returned", back is not None,
                  f"after {run.scratch['wat_link_recover_s']} s (-1: never within 40 s)"),
            Check("real connection: the uplink during the outage within the remaining path",
                  during is not None and during <= run.link.topo.paths[0].mbit * 1.05,
                  f"{during} Mbit/s"),
            Check("real connection: the proxy agent applied the CPE's downlink weights",
                  bool(dl) and any(dl[-1].weights.values()),
                  f"{len(dl)} proxy states; last v{dl[-1].version} {dl[-1].weights} "
                  f"caps {dl[-1].caps or 'not reported'}" if dl else "no proxy state for the CPE")]


STORY: list[Fault] = [
    Fault("A1 fixed_split 50/50 and back", _a1_create, _a1_delete, 20.0,
          detect=_split_applied, checks=_split_checks),
    Fault("broker restarted", _broker_stop, _broker_start, 3.0),
    Fault("broker hung (SIGSTOP) 15 s", _broker_hang, _broker_resume, 15.0),
    Fault("mcw run killed and restarted", _xapp_kill, _xapp_start, 2.0),
    Fault("Redis restarted", _redis_stop, _redis_start, 3.0),
    Fault("InfluxDB away 30 s", _influx_stop, _influx_start, 30.0),
    Fault("agent restarted with its state file", _agent_stop, _agent_start, 2.0,
          detect=_agent_detect, checks=_agent_checks),
    Fault("malformed input on every interface", _malformed, _nothing, 2.0,
          detect=lambda _r: None, detect_pending_ok=True, checks=_malformed_checks),
    Fault("WAT down on the real MPTCP connection (wifi link down 10 s)", _wat_down, _wat_up,
          10.0, detect=_wat_down_seen, checks=_wat_checks),
]

