"""What the E2 adapter decodes, as plain records: the contract between the codec, the
subscriptions and the mapping to CPEs.

The codec (:mod:`xapp.adapters.e2.e2ap`, :mod:`xapp.adapters.e2.kpm_decode`) produces these
from APER bytes; the subscription book (:mod:`xapp.adapters.e2.subscription_book`) keeps
:class:`ActiveSubscription`; the mapping (:mod:`xapp.adapters.e2.mapping`) turns
:class:`KpmReport` into intake rows through the CPE registry.  Nothing here imports a codec, so
the records can be built in tests by hand.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class E2DecodeError(ValueError):
    """Bytes that are not a well-formed, supported E2AP or E2SM-KPM message.

    The one exception type out of the codec: a handler catches this, counts and logs it.
    """


@dataclass(frozen=True, slots=True)
class RicRequestId:
    requestor: int
    instance: int


@dataclass(frozen=True, slots=True)
class RicIndication:
    """An E2AP RIC Indication with its E2SM payloads still encoded (decoded per KPM version)."""

    request: RicRequestId
    ran_function_id: int
    action_id: int
    sequence_number: int | None
    indication_type: str  # "report" | "insert"
    header: bytes
    message: bytes


@dataclass(frozen=True, slots=True)
class UeId:
    """Network-side UE identities, as KPM reports them (never subscriber identity).

    Whichever the node sent are set; ``keys()`` gives the canonical strings the CPE registry
    stores, most specific first.
    """

    amf_ue_ngap_id: int | None = None
    #: GUAMI as "<plmn hex>-<amf region id>-<amf set id>-<amf pointer>".
    guami: str | None = None
    gnb_cu_ue_f1ap_id: int | None = None
    #: RAN UE ID (OCTET STRING SIZE(8)) as 16 hex digits.
    ran_ue_id: str | None = None
    c_rnti: int | None = None

    def keys(self) -> tuple[str, ...]:
        out: list[str] = []
        if self.amf_ue_ngap_id is not None and self.guami is not None:
            out.append(f"amf:{self.guami}:{self.amf_ue_ngap_id}")
        if self.ran_ue_id is not None:
            out.append(f"ranue:{self.ran_ue_id}")
        if self.gnb_cu_ue_f1ap_id is not None:
            out.append(f"f1ap:{self.gnb_cu_ue_f1ap_id}")
        if self.c_rnti is not None:
            out.append(f"crnti:{self.c_rnti}")
        return tuple(out)


@dataclass(frozen=True, slots=True)
class KpmReport:
    """The measurements of one UE (``ue`` set) or of one cell or node (``ue`` None).

    ``values`` maps the measurement name (``DRB.UEThpDl``...) to its value over the
    granularity period: the last record of the period's series, the one closest to now.
    A measurement the node identified only by measID is named ``"id:<measID>"`` unless the
    caller gave the codec the RAN function's measID -> name table.
    """

    values: dict[str, float]
    ue: UeId | None = None
    #: NR CGI as "<plmn hex>-<nci hex>" when the report or its subscription names a cell.
    cell: str | None = None


@dataclass(frozen=True, slots=True)
class KpmIndication:
    """A decoded E2SM-KPM indication (header + message) of one subscription."""

    kpm_version: int  # 2, 3 or 4
    format: int  # indication message format: 1 (one node/cell), 2 (conditional), 3 (multi-UE)
    collect_start_ms: int | None
    granularity_ms: int | None
    sender_name: str | None
    reports: tuple[KpmReport, ...]
    #: The E2SM-KPM definitions it was read with (``xapp.adapters.e2.aper.DIALECTS``).
    dialect: str = "v3"


@dataclass(frozen=True, slots=True)
class KpmRanFunction:
    """An E2 node's KPM RAN function, from its RANfunction-Description (E2 Setup / R-NIB)."""

    ran_function_id: int
    oid: str
    revision: int
    short_name: str
    kpm_version: int
    #: REPORT styles offered: style type -> (style name, action definition format,
    #: indication header format, indication message format).
    report_styles: dict[int, tuple[str, int, int, int]]
    #: Measurement names offered per report style (style type -> names).
    measurements: dict[int, tuple[str, ...]] = field(default_factory=dict)
    #: measID -> name where the node numbers its measurements.
    measurement_ids: dict[int, str] = field(default_factory=dict)
    event_trigger_styles: tuple[int, ...] = ()
    #: The definitions the node is taken to speak until its indications say otherwise
    #: (``xapp.adapters.e2.aper.DIALECTS``); action definitions are encoded with them.
    dialect: str = "v3"


@dataclass(frozen=True, slots=True)
class E2Node:
    """An E2 node as the RIC knows it (R-NIB or configuration)."""

    inventory_name: str  # e.g. "gnb_208_092_0000000a" (E2 manager's name, RMR meid)
    global_id: str
    kpm: KpmRanFunction | None
    connected: bool = True
    #: The node's cell as an NR CGI "<plmn hex>-<nci hex>" (R-NIB served cell or
    #: configuration): named in style 1/3 action definitions and given to cell-level reports.
    cell: str | None = None
    #: PRBs of that cell's carrier, for nodes that report RRU.PrbTot as a count (OAI).
    prb_total: int | None = None


@dataclass(frozen=True, slots=True)
class ActiveSubscription:
    """A KPM subscription the Subscription Manager confirmed, as the indication path needs it.

    Indications are accepted only when their (requestor, instance, RAN function) match one of
    these; ``kpm_version`` says how to decode the E2SM payloads.
    """

    subscription_id: str  # the Subscription Manager's SubscriptionId
    node: str  # E2 node inventory name (RMR meid)
    request: RicRequestId
    ran_function_id: int
    kpm_version: int
    report_style: int
    #: Cell the subscription's action definition names (cell-level format 1), else None.
    cell: str | None = None
    #: measID -> name for nodes that report measurements by id.
    measurement_ids: dict[int, str] = field(default_factory=dict)
    #: The dialect the subscription's action definition was encoded with (first one tried).
    dialect: str = "v3"
    #: The action definition's measurement names, in order (format 1 without measInfoList).
    measurements: tuple[str, ...] = ()
    #: Measurement table family (``xapp.adapters.e2.mapping.FAMILIES``) and the cell's PRBs.
    family: str = "3gpp"
    prb_total: int | None = None
    #: The action definition's granularity period (reports that leave theirs out).
    granularity_ms: int | None = None
