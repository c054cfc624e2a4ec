"""A finished run's applied weights and caps read back from the files it left, for the twin.

The bench computes the twin's column from what the agents reported over MQTT while the run
played (:meth:`tests.realstack.harness.Run._applied`) and saves it, with the trace's start, as
the run's ``applied.json`` (:func:`save_applied`).  Runs from before that file are read back
from their agents' logs (:func:`from_logs`):

* *when the trace started*: the CPE agent logs a ``link change`` the moment a ``down`` outage
  cuts its interface, so the first such line less the first ``down`` outage's start is the
  trace's start (the harness cuts at ``t0 + start_s``; the log lags it by a few ms).  A run
  without agents or a trace without ``down`` outages has no such line (:func:`trace_start`
  returns None);
* *the weights*: each agent logs ``weights applied`` with the weights it put in force (the CPE
  for ``ul``, the proxy for ``dl``); as in the harness, each period takes the last before its
  middle.  Between a WAT's ``link change`` to unusable and back the agents report it at weight
  0 in both directions (the carrier reaction: the CPE's state tells the proxy), so it is 0
  here too;
* *the caps*: the logs do not carry them.  The harness's own policies' caps are recomputed
  from the trace the way it published them (:func:`tests.realstack.publishing.plan`); the
  xApp's policies run ``load_balancing``, whose caps are the uncapped ceiling
  (:func:`xapp.core.caps.balancing_caps`): ``inf`` here.  ``equal`` and ``probe`` get
  ``inf`` too, which they did not have (the slowest link's cap; the probes' caps): their logs
  are not read back right.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from tests.realstack.publishing import plan
from twin.path_traces import PathTrace

Array = np.ndarray[Any, Any]

#: The agent whose log holds each direction's weights.
AGENT_OF = {"ul": "agent-cpe", "dl": "agent-proxy"}
#: What the harness saves of a run for the twin.
APPLIED_FILE = "applied.json"


def save_applied(root: Path, t0: float, weights: dict[str, Array], caps: dict[str, Array]
                 ) -> None:
    """The trace's start (epoch s) and each direction's ``(periods, k)`` weights and caps in
    force (``inf``, saved as null: uncapped)."""
    doc = {"t0": t0, "weights": {d: w.tolist() for d, w in weights.items()},
           "caps": {d: [[v if np.isfinite(v) else None for v in row] for row in c.tolist()]
                    for d, c in caps.items()}}
    (root / APPLIED_FILE).write_text(json.dumps(doc) + "\n")


def load_applied(root: Path, trace: PathTrace, policy: str
                 ) -> tuple[dict[str, Array], dict[str, Array]] | None:
    """A run's weights and caps, from its ``applied.json`` or else its logs; None when neither
    tells when the trace started (a run without agents is the default scheduler's)."""
    path = root / APPLIED_FILE
    if path.exists():
        doc = json.loads(path.read_text())
        return ({d: np.asarray(w, np.int64) for d, w in doc["weights"].items()},
                {d: np.asarray([[np.inf if v is None else v for v in row] for row in c],
                               np.float64) for d, c in doc["caps"].items()})
    t0 = trace_start(root, trace)
    if t0 is None and (root / "agent-cpe.log").exists():
        return None
    return from_logs(root, trace, policy, t0)


def _records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def _epoch(stamp: str) -> float:
    """An slog timestamp (RFC 3339, nanoseconds) as epoch seconds; Python parses microseconds."""
    head, _, frac = stamp.rstrip("Z").partition(".")
    base = datetime.fromisoformat(head + "+00:00").timestamp()
    return base + (float("0." + frac) if frac else 0.0)


def trace_start(root: Path, trace: PathTrace) -> float | None:
    """Epoch seconds at which the run's trace started, from the CPE agent's first carrier
    loss; None without one."""
    downs = [o for o in trace.outages if o.mode == "down"]
    if not downs:
        return None
    first = min(o.start_s for o in downs)
    for r in _records(root / "agent-cpe.log"):
        if r.get("msg") == "link change" and r.get("usable") is False:
            return _epoch(str(r["time"])) - first
    return None


def link_down(root: Path) -> list[tuple[str, float, float]]:
    """``(wat, from, to)`` epoch seconds for each time the CPE agent saw a WAT's link
    unusable (``to`` inf when the run ended first)."""
    out: list[tuple[str, float, float]] = []
    since: dict[str, float] = {}
    for r in _records(root / "agent-cpe.log"):
        if r.get("msg") != "link change":
            continue
        w, t = str(r["wat"]), _epoch(str(r["time"]))
        if r.get("usable") is False:
            since.setdefault(w, t)
        elif w in since:
            out.append((w, since.pop(w), t))
    return out + [(w, t, float("inf")) for w, t in since.items()]


def _weights(text: str, wats: tuple[str, ...]) -> list[int]:
    got = dict(kv.split("=", 1) for kv in text.split())
    return [int(got.get(w, 0)) for w in wats]


def from_logs(root: Path, trace: PathTrace, policy: str, t0: float | None
              ) -> tuple[dict[str, Array], dict[str, Array]]:
    """Per direction, the ``(periods, k)`` weights and caps (``inf``: uncapped) in force at
    each period's middle; the default scheduler's (all 1, uncapped) where no agent ran, none
    had applied weights yet, or the trace's start is unknown (``t0`` None)."""
    n, k = trace.periods, len(trace.wats)
    weights: dict[str, Array] = {}
    caps: dict[str, Array] = {}
    down = link_down(root)
    for d, agent in AGENT_OF.items():
        w = np.ones((n, k), np.int64)
        c = np.full((n, k), np.inf)
        recs = sorted(((_epoch(str(r["time"])), _weights(str(r["weights"]), trace.wats))
                       for r in _records(root / f"{agent}.log")
                       if r.get("msg") == "weights applied"), key=lambda r: r[0])
        if t0 is not None and recs:
            for p in range(n):
                mid = t0 + (p + 0.5) * trace.period_s
                before = [ws for t, ws in recs if t <= mid]
                if before:
                    w[p] = before[-1]
                    c[p] = _caps(trace, d, policy, p)
                    for wat, lo, hi in down:
                        if lo <= mid < hi and wat in trace.wats:
                            w[p, trace.wats.index(wat)] = 0
        weights[d], caps[d] = w, c
    return weights, caps


def _caps(trace: PathTrace, direction: str, policy: str, period: int) -> Array:
    """The caps the harness published for ``period`` (``inf`` where it published none)."""
    if policy == "fixed_best":
        c = plan(trace.capacity(direction).mean(axis=0))[1]
    elif policy == "oracle":
        c = plan(trace.capacity(direction)[period])[1]
    else:
        return np.full(len(trace.wats), np.inf)
    return np.where(np.isfinite(c), c, np.inf)
