"""The harness's own policies (``fixed_best``, ``equal``, ``probe``, ``oracle``): the weights
and caps the xApp would decide for given capacities (:func:`plan`), published with the xApp's
identity (:class:`Publisher`)."""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from tests.support.mosquitto import MosquittoBroker, connect_client
from xapp.adapters.mqtt import payloads, topics
from xapp.core.caps import balancing_caps, rate_caps
from xapp.core.weights import optimal_weights_batch


class Publisher:
    """Weights messages with the xApp's identity, for the policies the harness decides."""

    def __init__(self, broker: MosquittoBroker, wats: tuple[str, ...], cpe_id: str,
                 lease_s: float) -> None:
        self.wats, self.cpe_id, self.lease_s = wats, cpe_id, lease_s
        self.version = int(time.time() * 1000)
        self.client = connect_client(broker, "mcw-xapp", client_id="realstack-policy")

    def send(self, weights: dict[str, np.ndarray[Any, Any]],
             caps: dict[str, np.ndarray[Any, Any]] | None) -> None:
        self.version += 1
        doc: dict[str, Any] = {"schema": "mcw.weights.v2", "cpe_id": self.cpe_id,
                               "version": self.version, "issued_at_ms": int(time.time() * 1000),
                               "lease_s": self.lease_s}
        for d in ("dl", "ul"):
            w = {x: int(v) for x, v in zip(self.wats, weights[d].tolist(), strict=True)}
            part: dict[str, Any] = {"mode": "fixed_split", "weights": w}
            if caps is not None:
                c = {x: round(float(v), 3) for x, v, wx in zip(
                    self.wats, caps[d].tolist(), weights[d].tolist(), strict=True)
                    if wx > 0 and math.isfinite(v)}
                if c:
                    part["caps_mbps"] = c
            doc[d] = part
        payloads.check("weights", doc)
        self.client.client.publish(topics.weights_topic(self.cpe_id), payloads.encode(doc), qos=1,
                                   retain=True).wait_for_publish(5)

    def close(self) -> None:
        self.client.client.disconnect()
        self.client.client.loop_stop()


def plan(capacity: np.ndarray[Any, Any], balancing: bool = False
         ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Weights and caps (NaN: none) for capacities ``(k,)``, as the xApp decides them for a
    rate-caps agent: the engine's weights, and the caps of a split (:func:`rate_caps`) or, with
    ``balancing``, of ``load_balancing`` (:func:`balancing_caps`: uncapped)."""
    c = np.asarray(capacity, dtype=np.float64)[None, :]
    w = optimal_weights_batch(c, 100)
    if not (w > 0).any():
        w = np.ones_like(w)
    present = np.ones_like(w, dtype=bool)
    caps = (balancing_caps(w, present) if balancing
            else rate_caps(w, present, np.where(c > 0, c, np.nan)))
    return w[0], caps[0]
