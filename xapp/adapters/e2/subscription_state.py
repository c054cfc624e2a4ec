"""One E2 node's subscription as :class:`~xapp.adapters.e2.subscriber.E2Subscriber` tracks it
(its state, submgr's answer for each SubscriptionDetail, the back-off) and as
``/ric/v1/e2/subscriptions`` shows it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from xapp.adapters.e2.nodes import node_view
from xapp.adapters.e2.records import E2Node
from xapp.adapters.e2.subscription_book import SubscriptionBook
from xapp.adapters.e2.subscription_request import Detail


@dataclass
class InstanceState:
    detail: Detail
    e2_instance_id: int | None = None
    error: str = ""
    #: submgr's cause on a success (actions the node did not admit), shown, not an error.
    note: str = ""


@dataclass
class NodeState:
    node: E2Node
    state: str = "new"  # new | pending | active | partial | failed | unusable | disconnected
    subscription_id: str | None = None
    instances: dict[int, InstanceState] = field(default_factory=dict)
    last_error: str = ""
    attempts: int = 0
    next_at: float = 0.0
    requested_at: float = 0.0
    backoff_s: float = 0.0
    #: Failures in a row because submgr was busy with the node (retried at once).
    busy: int = 0


def node_state_view(name: str, sub: NodeState, book: SubscriptionBook) -> dict[str, Any]:
    """Node ``name`` with its KPM dialects and its subscription's instances, each with the
    indications that matched it."""
    kpm = sub.node.kpm
    return {
        **node_view(sub.node),
        "dialect": {"assumed": None if kpm is None else kpm.dialect,
                    "detected": None if kpm is None else
                    book.dialect(name, kpm.ran_function_id)},
        "subscription": {
            "id": sub.subscription_id, "state": sub.state,
            "last_error": sub.last_error, "attempts": sub.attempts,
            "instances": [{
                "xapp_event_instance_id": i.detail.xapp_event_instance_id,
                "e2_instance_id": i.e2_instance_id, "style": i.detail.style,
                "measurements": list(i.detail.measurements),
                "state": ("active" if i.e2_instance_id is not None else
                          "failed" if i.error else "pending"),
                "error": i.error, "note": i.note,
                "indications": (0 if i.e2_instance_id is None or kpm is None else
                                book.indications(i.e2_instance_id, kpm.ran_function_id)),
            } for i in sub.instances.values()],
        },
    }
