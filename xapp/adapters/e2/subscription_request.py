"""What a KPM subscription asks a node for: the settings, one SubscriptionDetail per REPORT
style (the measurements chosen from what the node offers, the event trigger and action
definition the codec encodes for them) and the ``SubscriptionParams`` document submgr decodes
(:mod:`xapp.adapters.e2.submgr_client` has its contract).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from xapp.adapters.e2.mapping import DEFAULT_MAP, FAMILY_RULES, MeasurementMap
from xapp.adapters.e2.records import E2Node
from xapp.adapters.e2.submgr_client import MAX_INSTANCE_ID, SUBMGR_REQUESTOR_ID

log = logging.getLogger(__name__)

#: Measurements asked for in one action definition (a node may offer hundreds).
MAX_SUBSCRIBED_MEASUREMENTS = 64
#: Nodes remembered as warned about having no cell (bounded).
MAX_WARNED_NODES = 4096


@dataclass(frozen=True)
class E2SubscribeSettings:
    """What the subscriber asks for; built from ``controls.e2``."""

    submgr_url: str
    client_host: str
    http_port: int = 8080
    rmr_port: int = 4560
    requestor_id: int = SUBMGR_REQUESTOR_ID
    match_requestor: bool = True
    measurements: tuple[str, ...] = ("DRB.UEThpDl", "DRB.UEThpUl", "RRU.PrbUsedDl",
                                     "RRU.PrbAvailDl", "RRU.PrbUsedUl", "RRU.PrbAvailUl")
    #: REPORT styles asked for where the node offers them: 1 (cell/node level, format 1)
    #: and 4 (UEs matching a condition, reported per UE in format 3).
    report_styles: tuple[int, ...] = (1, 4)
    report_period_ms: int = 1000
    granularity_ms: int = 1000
    #: Wait for submgr's callback this long before the attempt counts as failed.
    response_timeout_s: float = 30.0
    retry_min_s: float = 2.0
    retry_max_s: float = 120.0
    http_timeout_s: float = 5.0


@dataclass(frozen=True)
class Detail:
    """One SubscriptionDetail: one REPORT style of one node, one E2 subscription."""

    xapp_event_instance_id: int
    style: int
    measurements: tuple[str, ...]
    event_trigger: bytes
    action_definition: bytes


def choose_measurements(configured: Sequence[str], offered: Sequence[str] | None,
                        table: MeasurementMap, family: str) -> tuple[str, ...]:
    """What to ask a node for in one style: the configured names it offers, plus the names
    of its family's table it offers (srsRAN's CQI/RSRP/RSRQ); when that leaves nothing, every
    name it offers that the table maps.  A node that lists no names gets the configured ones.
    A node is unusable in a style only when nothing it offers maps."""
    if not offered:
        return tuple(configured)
    have = set(offered)
    chosen = [m for m in configured if m in have]
    chosen += [m for m in FAMILY_RULES.get(family, {}) if m in have and m not in chosen]
    if not chosen:
        chosen = [m for m in dict.fromkeys(offered) if table.known(m)]
    return tuple(chosen[:MAX_SUBSCRIBED_MEASUREMENTS])


class Encoder(Protocol):
    """The codec's two encoders (:mod:`xapp.adapters.e2.kpm_encode`)."""

    def event_trigger(self, period_ms: int, kpm_version: int) -> bytes: ...

    def action_definition(self, measurements: Sequence[str], granularity_ms: int,
                          kpm_version: int, style: int, *, dialect: str | None = None,
                          cell: str | None = None) -> bytes: ...


class CodecEncoder:
    """:class:`Encoder` over :mod:`xapp.adapters.e2.kpm_encode` (imported when first used)."""

    def event_trigger(self, period_ms: int, kpm_version: int) -> bytes:
        from xapp.adapters.e2 import kpm_encode

        return kpm_encode.encode_event_trigger(period_ms, kpm_version)

    def action_definition(self, measurements: Sequence[str], granularity_ms: int,
                          kpm_version: int, style: int, *, dialect: str | None = None,
                          cell: str | None = None) -> bytes:
        from xapp.adapters.e2 import kpm_encode

        # Under the definitions the node speaks: srsRAN's v2-labelled function gets v3's
        # formats 4/5, FlexRIC's its moved-marker CHOICE.
        return kpm_encode.encode_action_definition(measurements, granularity_ms, kpm_version,
                                                   style=style, dialect=dialect, cell=cell)


class DetailMaker:
    """A node's SubscriptionDetails, one per REPORT style the settings ask for and the node
    offers; their XappEventInstanceIds count on across every subscription of the process.
    Used by one thread (the subscriber's worker)."""

    def __init__(self, settings: E2SubscribeSettings, encoder: Encoder) -> None:
        self.settings = settings
        self._encoder = encoder
        self._next_xapp_id = 0
        #: Nodes already warned about having no cell for cell-level reports.
        self._no_cell_warned: set[str] = set()

    def make(self, node: E2Node, dialect: str, family: str) -> tuple[list[Detail], list[str]]:
        """(the details, the styles left out because the codec cannot encode them for the
        node, with why); ValueError when that leaves none."""
        s = self.settings
        kpm = node.kpm
        assert kpm is not None
        table = DEFAULT_MAP.for_family(family)
        details: list[Detail] = []
        errors: list[str] = []
        for style in s.report_styles:
            if kpm.report_styles and style not in kpm.report_styles:
                continue
            measurements = choose_measurements(s.measurements, kpm.measurements.get(style),
                                               table, family)
            if not measurements:
                log.info("node offers none of the configured measurements in style %d, and "
                         "none the %s table maps", style, family)
                continue
            trigger = self._encoder.event_trigger(s.report_period_ms, kpm.kpm_version)
            try:
                action = self._encoder.action_definition(
                    measurements, s.granularity_ms, kpm.kpm_version, style, dialect=dialect,
                    cell=node.cell if style in (1, 3) else None)
            except ValueError as exc:
                # One style the codec cannot encode for this node (styles 2 and 5 name UEs the
                # xApp does not know; v02.00 and ONF's v02.00.03 have no style 4 or 5): the
                # others still go.
                errors.append(f"style {style}: {exc}")
                continue
            self._next_xapp_id = self._next_xapp_id % MAX_INSTANCE_ID + 1
            details.append(Detail(self._next_xapp_id, style, measurements, trigger, action))
        if errors and not details:
            raise ValueError("; ".join(errors))
        return details, errors

    def warn_no_cell(self, node: E2Node, details: Sequence[Detail]) -> None:
        """Once per node: cell-level reports (styles 1 and 3) name no cell without the
        node's, so they become no rows.  Real e2mgr writes served cells only from an EN-DC
        setup or its update-gNB REST call, never from an E2 Setup: an operator step."""
        cell_level = [d.style for d in details if d.style in (1, 3)]
        name = node.inventory_name
        if node.cell is not None or not cell_level or name in self._no_cell_warned:
            return
        if len(self._no_cell_warned) < MAX_WARNED_NODES:
            self._no_cell_warned.add(name)
        log.warning("E2 node %s has no cell: its cell-level reports (style %s) cannot be "
                    "mapped to CPEs until it has one; give it one in the R-NIB (e2mgr's "
                    "update-gNB call with its served NR cell) or in controls.e2.nodes[].cell "
                    "(docs/e2.md, \"A node's cell\")", name, ", ".join(map(str, cell_level)))


def subscription_params(settings: E2SubscribeSettings, node: E2Node,
                        details: Sequence[Detail]) -> dict[str, Any]:
    """The ``SubscriptionParams`` document submgr decodes (its contract:
    :mod:`xapp.adapters.e2.submgr_client`)."""
    assert node.kpm is not None
    return {
        "ClientEndpoint": {"Host": settings.client_host, "HTTPPort": settings.http_port,
                           "RMRPort": settings.rmr_port},
        "Meid": node.inventory_name,
        "RANFunctionID": node.kpm.ran_function_id,
        "SubscriptionDetails": [{
            "XappEventInstanceId": d.xapp_event_instance_id,
            "EventTriggers": list(d.event_trigger),
            "ActionToBeSetupList": [{
                "ActionID": 1, "ActionType": "report",
                "ActionDefinition": list(d.action_definition),
                "SubsequentAction": {"SubsequentActionType": "continue",
                                     "TimeToWait": "zero"}}],
        } for d in details],
    }
