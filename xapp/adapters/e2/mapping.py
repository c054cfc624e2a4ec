"""E2SM-KPM measurements to the capacity model's KPI fields, per direction: pure, no I/O.

The table (:data:`DEFAULT_RULES`, extended per vendor through :meth:`MeasurementMap.extended`)
names each KPM measurement's ``wat_kpi`` field, direction and unit scale.  TS 28.552 names:

=========================================  =====================  =====  ==========================
measurement                                field                  dir.   how
=========================================  =====================  =====  ==========================
``DRB.UEThpDl`` / ``DRB.UEThpUl``          ``delivered_mbps``     dl/ul  kbit/s / 1000 (UE only)
``RRU.PrbUsedDl`` / ``RRU.PrbAvailDl``     ``prb_util``           dl     used / available PRBs
``RRU.PrbUsedUl`` / ``RRU.PrbAvailUl``     ``prb_util``           ul     used / available PRBs
``RRU.PrbTotDl`` / ``RRU.PrbTotUl``        ``prb_util``           dl/ul  % / 100 (ratio wins)
``DRB.RlcSduTransmittedVolumeDL/UL``       ``delivered_mbps``     dl/ul  kbit / period s / 1000
``TB.ErrTotalNbrDl`` / ``TB.TotNbrDl``     ``bler``               dl     erroneous / all TBs
``TB.ErrTotalNbrUl`` / ``TB.TotNbrUl``     ``bler``               ul     erroneous / all TBs
``CARR.WBCQIDist.Bin<k>...``               ``cqi``                link   mean of the CQI bins
``CARR.PDSCHMCSDist.Bin<k>...``            ``mcs``                dl     mean of the MCS bins
``CARR.PUSCHMCSDist.Bin<k>...``            ``mcs``                ul     mean of the MCS bins
``L1M.SS-RSRP`` / ``L1M.SS-RSRQ``          ``rsrp_dbm``/``rsrq``  link   dBm / dB (UE only)
``L1M.SS-SINR``                            ``sinr_db``            link   dB (UE only)
``CARR.WBCQI``, ``CARR.PDSCHMCS``, ...     ``cqi``, ``mcs``       ...    means where a node has them
=========================================  =====================  =====  ==========================

Node families (:data:`FAMILY_RULES`, chosen by :func:`family_of`) add srsRAN's and OAI's own
names and units on top.

Levels (see ``docs/e2.md``): a per-UE report (format 3, or format 1/2 naming a UE) goes to the
registry's CPE as its ``nr`` rows, every mapped field.  A cell-level report goes to every CPE the
registry places in that cell that has no per-UE report in the same indication, with only the
fields whose rule says ``cell_level`` (load: ``prb_util``): a cell's aggregate throughput or
mean SINR says nothing about one CPE's.  Unmapped UEs, unknown cells and unknown names are
counted, never errors.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, Protocol

import numpy as np

from xapp.adapters.e2.records import KpmIndication, KpmReport
from xapp.core.forecast import KpiFrame
from xapp.core.kpis import KPI_FIELDS, cell_code, clean_columns

#: The WAT every E2 measurement describes (the RAN behind the RIC is the NR leg).
WAT: Final = "nr"
#: The numeric cell column the online model reads (``xapp.model.online.CELL_COLUMN``).
CELL_COLUMN: Final = "cell_id"
_DIRECTIONS: Final = ("dl", "ul", "")


class MeasurementMapError(ValueError):
    """A vendor table entry that names an unknown field or direction, or a bad scale."""


@dataclass(frozen=True, slots=True)
class Rule:
    """One measurement -> one field: ``value * scale``; ``direction`` "" is the link (both).

    ``cell_level``: the value may be given to every CPE of a cell from a cell-level report
    (true only for load, which every UE of the cell shares)."""

    field: str
    direction: str
    scale: float = 1.0
    cell_level: bool = False
    #: "" (value * scale), "prb_total" (a PRB count: value / the cell's PRBs * scale) or
    #: "period_s" (a volume over the granularity period: value * scale / period in s).
    per: str = ""


@dataclass(frozen=True, slots=True)
class Ratio:
    """``numerator / denominator`` -> field (PRB use, block error rate); wins over a direct
    rule for the same field and direction when both measurements are there."""

    numerator: str
    denominator: str
    field: str
    direction: str
    cell_level: bool = False


@dataclass(frozen=True, slots=True)
class Distribution:
    """A histogram ``<prefix><k>[.<more>]`` (count per value k) -> field: the mean k."""

    prefix: str
    field: str
    direction: str
    cell_level: bool = False


DEFAULT_RULES: Final[Mapping[str, Rule]] = {
    "DRB.UEThpDl": Rule("delivered_mbps", "dl", 1e-3),
    "DRB.UEThpUl": Rule("delivered_mbps", "ul", 1e-3),
    "RRU.PrbTotDl": Rule("prb_util", "dl", 1e-2, cell_level=True),
    "RRU.PrbTotUl": Rule("prb_util", "ul", 1e-2, cell_level=True),
    # kbit delivered over the granularity period (TS 28.552 5.1.2.x): a rate once divided.
    "DRB.RlcSduTransmittedVolumeDL": Rule("delivered_mbps", "dl", 1e-3, per="period_s"),
    "DRB.RlcSduTransmittedVolumeUL": Rule("delivered_mbps", "ul", 1e-3, per="period_s"),
    "L1M.SS-RSRP": Rule("rsrp_dbm", ""),
    "L1M.SS-RSRQ": Rule("rsrq_db", ""),
    "L1M.SS-SINR": Rule("sinr_db", ""),
    "CARR.WBCQI": Rule("cqi", ""),
    "CARR.PDSCHMCS": Rule("mcs", "dl"),
    "CARR.PUSCHMCS": Rule("mcs", "ul"),
}
DEFAULT_RATIOS: Final[tuple[Ratio, ...]] = (
    Ratio("RRU.PrbUsedDl", "RRU.PrbAvailDl", "prb_util", "dl", cell_level=True),
    Ratio("RRU.PrbUsedUl", "RRU.PrbAvailUl", "prb_util", "ul", cell_level=True),
    Ratio("TB.ErrTotalNbrDl", "TB.TotNbrDl", "bler", "dl"),
    Ratio("TB.ErrTotalNbrUl", "TB.TotNbrUl", "bler", "ul"),
)
DEFAULT_DISTRIBUTIONS: Final[tuple[Distribution, ...]] = (
    Distribution("CARR.WBCQIDist.Bin", "cqi", ""),
    Distribution("CARR.PDSCHMCSDist.Bin", "mcs", "dl"),
    Distribution("CARR.PUSCHMCSDist.Bin", "mcs", "ul"),
)
#: Measurement tables per node family, on top of the TS 28.552 defaults (``docs/e2.md``):
#: * "srsran": srsRAN Project's DU measurement provider names its radio measurements ``CQI``,
#:   ``RSRP``, ``RSRQ`` (per UE, wideband CQI, dBm, dB).
#: * "oai": OpenAirInterface's gNB (FlexRIC agent) reports ``RRU.PrbTotDl/Ul`` as the PRBs
#:   used (a count, not TS 28.552's percentage: divided by the cell's PRBs), and
#:   ``DRB.PdcpSduVolumeDL/UL`` in kbit over the granularity period (a rate once divided by
#:   it; ``DRB.UEThpDl/Ul`` wins where both are there).
#: ``DRB.RlcSduDelayDl`` (RLC queueing delay, 0.1 ms in TS 28.552, microseconds in OAI) is
#: recognised (not counted as unknown) but feeds no field: ``rtt_ms`` is the end-to-end
#: round trip the agents measure, which one leg's queueing delay is not.
FAMILIES: Final = ("3gpp", "srsran", "oai")
FAMILY_RULES: Final[Mapping[str, Mapping[str, Rule]]] = {
    "3gpp": {},
    "srsran": {
        "CQI": Rule("cqi", ""),
        "RSRP": Rule("rsrp_dbm", ""),
        "RSRQ": Rule("rsrq_db", ""),
    },
    "oai": {
        "RRU.PrbTotDl": Rule("prb_util", "dl", 1.0, cell_level=True, per="prb_total"),
        "RRU.PrbTotUl": Rule("prb_util", "ul", 1.0, cell_level=True, per="prb_total"),
        "DRB.PdcpSduVolumeDL": Rule("delivered_mbps", "dl", 1e-3, per="period_s"),
        "DRB.PdcpSduVolumeUL": Rule("delivered_mbps", "ul", 1e-3, per="period_s"),
    },
}
#: Names every family recognises without mapping them to a field (see above).
RECOGNISED: Final = frozenset({"DRB.RlcSduDelayDl"})
_PER: Final = ("", "prb_total", "period_s")


def family_of(dialect: str, offered: Iterable[str] = (), kpm_version: int | None = None) -> str:
    """The measurement table family of a node: FlexRIC's dialect is OAI's gNB; a node that
    offers srsRAN's own names (``CQI``, ``RSRP``, ``RSRQ``), or labels itself KPM v2 and speaks
    v3 (srsRAN Project's gNB), is srsRAN's; the rest TS 28.552."""
    if dialect.startswith("flexric"):
        return "oai"
    if {"CQI", "RSRP", "RSRQ"} & set(offered) or (kpm_version == 2 and dialect == "v3"):
        return "srsran"
    return "3gpp"


#: Vendor tables are bounded like every other input.
MAX_RULES: Final = 1024
_NAME_RE: Final = re.compile(r"[A-Za-z0-9_.:\-]{1,150}")
_BIN_RE: Final = re.compile(r"([0-9]{1,3})(?:\..*)?")


def _check(name: str, fld: str, direction: str) -> None:
    if not isinstance(name, str) or _NAME_RE.fullmatch(name) is None:
        raise MeasurementMapError(f"measurement name {name!r:.80}: 1-150 characters of "
                                  "A-Z a-z 0-9 _ . : -")
    if fld not in KPI_FIELDS:
        raise MeasurementMapError(f"{name}: field {fld!r} is not a wat_kpi field "
                                  f"({', '.join(KPI_FIELDS)})")
    if direction not in _DIRECTIONS:
        raise MeasurementMapError(f"{name}: direction {direction!r}: expected dl, ul or '' "
                                  "(both)")


@dataclass(frozen=True)
class MeasurementMap:
    """The measurement table: direct rules, ratios and distributions."""

    rules: Mapping[str, Rule] = field(default_factory=lambda: dict(DEFAULT_RULES))
    ratios: tuple[Ratio, ...] = DEFAULT_RATIOS
    distributions: tuple[Distribution, ...] = DEFAULT_DISTRIBUTIONS
    #: Names a ratio consumes, so "unknown name" counts stay honest (derived).
    ratio_names: frozenset[str] = field(init=False, repr=False, compare=False,
                                        default=frozenset())
    #: What the table does with each list of names seen (derived, see ``_plan``).
    plans: dict[tuple[tuple[str, ...], bool], _Plan] = field(
        init=False, repr=False, compare=False, default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.rules) + len(self.ratios) + len(self.distributions) > MAX_RULES:
            raise MeasurementMapError(f"more than {MAX_RULES} measurement rules")
        for name, r in self.rules.items():
            _check(name, r.field, r.direction)
            if not (math.isfinite(r.scale) and r.scale != 0.0):
                raise MeasurementMapError(f"{name}: scale must be finite and non-zero")
            if r.per not in _PER:
                raise MeasurementMapError(f"{name}: per {r.per!r} is not one of {_PER}")
        for q in self.ratios:
            _check(q.numerator, q.field, q.direction)
            _check(q.denominator, q.field, q.direction)
        for d in self.distributions:
            _check(d.prefix, d.field, d.direction)
        object.__setattr__(self, "ratio_names",
                           frozenset(n for q in self.ratios for n in (q.numerator, q.denominator)))

    def known(self, name: str) -> bool:
        """Whether any rule uses measurement ``name``."""
        return (name in self.rules or name in self.ratio_names
                or any(name.startswith(d.prefix) for d in self.distributions))

    def for_family(self, family: str) -> MeasurementMap:
        """This table with a node family's rules (``FAMILY_RULES``) on top."""
        extra = FAMILY_RULES.get(family)
        if extra is None:
            raise MeasurementMapError(f"family {family!r} is not one of {FAMILIES}")
        if not extra:
            return self
        return replace(self, rules={**self.rules, **extra})

    def names(self) -> tuple[str, ...]:
        """Measurement names to subscribe to (distributions are asked for by their prefix)."""
        out = dict.fromkeys(self.rules)
        for q in self.ratios:
            out.update(dict.fromkeys((q.numerator, q.denominator)))
        return tuple(out)

    def extended(self, vendor: Mapping[str, Any]) -> MeasurementMap:
        """This table with a vendor's entries added or replacing defaults.

        ``vendor`` maps a measurement name to ``{"field": ..., "direction": "dl"|"ul"|"",
        "scale": 1.0, "cell_level": false}`` (a ``controls`` document); MeasurementMapError
        names the first bad entry."""
        if not isinstance(vendor, Mapping):
            raise MeasurementMapError("vendor measurements: expected an object")
        if len(vendor) > MAX_RULES:
            raise MeasurementMapError(f"more than {MAX_RULES} vendor measurements")
        rules = dict(self.rules)
        for name, spec in vendor.items():
            if not isinstance(spec, Mapping):
                raise MeasurementMapError(f"{name!r:.80}: expected an object")
            unknown = set(spec) - {"field", "direction", "scale", "cell_level"}
            if unknown:
                raise MeasurementMapError(f"{name}: unknown keys {sorted(unknown)}")
            scale = spec.get("scale", 1.0)
            if isinstance(scale, bool) or not isinstance(scale, (int, float)):
                raise MeasurementMapError(f"{name}: scale must be a number")
            cell_level = spec.get("cell_level", False)
            if not isinstance(cell_level, bool):
                raise MeasurementMapError(f"{name}: cell_level must be true or false")
            rule = Rule(str(spec.get("field", "")), str(spec.get("direction", "")),
                        float(scale), cell_level)
            _check(name, rule.field, rule.direction)
            rules[name] = rule
        return replace(self, rules=rules)


DEFAULT_MAP: Final = MeasurementMap()


class CpeLookup(Protocol):
    """The part of :class:`~xapp.adapters.e2.registry.CpeRegistry` the mapping reads."""

    def cpe_for_keys(self, keys: Sequence[str]) -> str | None: ...

    def cpes_in_cell(self, cell: str) -> tuple[str, ...]: ...

    def cell_of(self, cpe_id: str) -> str | None: ...


@dataclass
class MappingCounts:
    """What one mapping pass did with the reports (added into the ingest's counters)."""

    ue_reports: int = 0
    ue_mapped: int = 0
    ue_unmapped: int = 0
    ue_without_id: int = 0
    cell_reports: int = 0
    cell_unknown: int = 0
    cell_without_cell: int = 0
    cell_cpes: int = 0
    unknown_names: int = 0
    values_out_of_range: int = 0
    rows: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


Values = dict[tuple[str, str], float]  # (field, direction) -> value


@dataclass(frozen=True, slots=True)
class _Plan:
    """What a table does with one list of measurement names (every UE of an indication has
    the same list): worked out once, applied to each report's values."""

    #: (name, field, direction, scale, per) of the names a direct rule maps, in their order.
    direct: tuple[tuple[str, str, str, float, str], ...]
    #: Names no rule knows.
    unknown: int
    #: (numerator, denominator, field, direction) of the ratios whose names are both there.
    ratios: tuple[tuple[str, str, str, str], ...]
    #: (field, direction, ((name, bin k), ...)) of the distributions with bins there.
    dists: tuple[tuple[str, str, tuple[tuple[str, int], ...]], ...]


#: Plans kept per table (name lists come from the nodes: bounded, forgotten when full).
_MAX_PLANS: Final = 256


def _plan(names: MeasurementMap, keys: tuple[str, ...], cell_level: bool) -> _Plan:
    plans = names.plans
    plan = plans.get((keys, cell_level))
    if plan is not None:
        return plan
    direct = []
    unknown = 0
    dists = names.distributions
    for name in keys:
        r = names.rules.get(name)
        if r is not None:
            if r.cell_level or not cell_level:
                direct.append((name, r.field, r.direction, r.scale, r.per))
        elif name not in names.ratio_names and name not in RECOGNISED and \
                not any(name.startswith(d.prefix) for d in dists):
            unknown += 1
    present = set(keys)
    ratios = tuple((q.numerator, q.denominator, q.field, q.direction) for q in names.ratios
                   if not (cell_level and not q.cell_level)
                   and q.numerator in present and q.denominator in present)
    bins = []
    for d in dists:
        if cell_level and not d.cell_level:
            continue
        found = []
        for name in keys:
            if name.startswith(d.prefix):
                m = _BIN_RE.fullmatch(name, len(d.prefix))
                if m is not None:
                    found.append((name, int(m.group(1))))
        if found:
            bins.append((d.field, d.direction, tuple(found)))
    plan = _Plan(tuple(direct), unknown, ratios, tuple(bins))
    if len(plans) >= _MAX_PLANS:
        plans.clear()
    plans[(keys, cell_level)] = plan
    return plan


def report_values(values: Mapping[str, float], names: MeasurementMap, *,
                  cell_level: bool, prb_total: int | None = None,
                  granularity_ms: int | None = None) -> tuple[Values, int]:
    """The (field, direction) values one report gives, and how many of its names no rule
    knows (or could not be converted: a PRB count without the cell's PRBs, a volume without
    a granularity period).  ``cell_level``: only rules meaningful for every CPE of a cell."""
    plan = _plan(names, tuple(values), cell_level)
    out: Values = {}
    later: Values = {}  # volume-derived rates: a direct throughput of the same key wins
    unknown = plan.unknown
    isfinite = math.isfinite
    for name, fld, direction, scale, per in plan.direct:
        v = values[name]
        if not isfinite(v):
            continue
        if not per:
            out[(fld, direction)] = v * scale
        elif per == "prb_total":
            if not prb_total or prb_total <= 0:
                unknown += 1
                continue
            out[(fld, direction)] = v / prb_total * scale
        else:  # "period_s"
            if not granularity_ms or granularity_ms <= 0:
                unknown += 1
                continue
            later[(fld, direction)] = v * scale / (granularity_ms / 1000.0)
    for key, v in later.items():
        out.setdefault(key, v)
    for numerator, denominator, fld, direction in plan.ratios:
        den = values[denominator]
        if den > 0:
            ratio = values[numerator] / den
            if isfinite(ratio):
                out[(fld, direction)] = ratio
    for fld, direction, found in plan.dists:
        total = weighted = 0.0
        for name, k in found:
            v = values[name]
            if isfinite(v) and v > 0:
                total += v
                weighted += k * v
        if total > 0:
            out[(fld, direction)] = weighted / total
    return out, unknown


def map_indication(ind: KpmIndication, registry: CpeLookup, *, time_s: float,
                   names: MeasurementMap = DEFAULT_MAP, default_cell: str | None = None,
                   prb_total: int | None = None, granularity_ms: int | None = None
                   ) -> tuple[KpiFrame | None, MappingCounts]:
    """One :class:`KpiFrame` (``nr`` rows keyed by CPE and direction) from one indication,
    or None when nothing maps, with the counts of what happened to each report.

    ``default_cell`` is the cell the subscription names, for cell-level reports that do not
    carry their own; ``prb_total`` its PRBs, for tables that read PRB counts;
    ``granularity_ms`` the subscription's period, for reports that leave theirs out.
    """
    conv = {"prb_total": prb_total, "granularity_ms": ind.granularity_ms or granularity_ms}
    counts = MappingCounts()
    rows: dict[tuple[str, str], dict[str, float]] = {}
    cells: dict[str, str | None] = {}
    per_ue: set[str] = set()
    cell_reports: list[KpmReport] = []
    for report in ind.reports:
        if report.ue is None:
            cell_reports.append(report)
            continue
        counts.ue_reports += 1
        keys = report.ue.keys()
        if not keys:
            counts.ue_without_id += 1
            continue
        cpe = registry.cpe_for_keys(keys)
        if cpe is None:
            cpe = registry.cpe_for_keys([k.lower() for k in keys])
        if cpe is None:
            counts.ue_unmapped += 1
            continue
        counts.ue_mapped += 1
        per_ue.add(cpe)
        cells[cpe] = report.cell or registry.cell_of(cpe)
        values, unknown = report_values(report.values, names, cell_level=False, **conv)
        counts.unknown_names += unknown
        _merge(rows, cpe, values)
    for report in cell_reports:
        counts.cell_reports += 1
        cell = report.cell or default_cell
        if cell is None:
            counts.cell_without_cell += 1
            continue
        cpes = registry.cpes_in_cell(cell) or registry.cpes_in_cell(cell.lower())
        if not cpes:
            counts.cell_unknown += 1
            continue
        values, unknown = report_values(report.values, names, cell_level=True, **conv)
        counts.unknown_names += unknown
        if not values:
            continue
        for cpe in cpes:
            if cpe in per_ue:
                continue
            counts.cell_cpes += 1
            cells.setdefault(cpe, cell)
            _merge(rows, cpe, values)
    if not rows:
        return None, counts
    return _frame(rows, cells, time_s, counts), counts


def _merge(rows: dict[tuple[str, str], dict[str, float]], cpe: str, values: Values) -> None:
    for (fld, direction), v in values.items():
        row = rows.get((cpe, direction))
        if row is None:
            row = rows[(cpe, direction)] = {}
        row[fld] = v


def _frame(rows: Mapping[tuple[str, str], Mapping[str, float]],
           cells: Mapping[str, str | None], time_s: float, counts: MappingCounts) -> KpiFrame:
    keys = list(rows)
    n = len(keys)
    fields = sorted({f for r in rows.values() for f in r})
    columns = {f: np.full(n, np.nan) for f in fields}
    for i, key in enumerate(keys):
        for f, v in rows[key].items():
            columns[f][i] = v
    clean, bad = clean_columns(columns)
    counts.values_out_of_range += bad.total
    codes: dict[str | None, float] = {}
    cell_col = np.empty(n)
    for i, (cpe, _d) in enumerate(keys):
        c = cells.get(cpe)
        code = codes.get(c)
        if code is None:
            code = codes[c] = cell_code(c)
        cell_col[i] = code
    clean[CELL_COLUMN] = cell_col
    counts.rows = n
    return KpiFrame(time_s=time_s, cpe=np.array([k[0] for k in keys]),
                    wat=np.full(n, WAT), values=clean,
                    direction=np.array([k[1] for k in keys], dtype="<U2"))


def rules_table(names: MeasurementMap = DEFAULT_MAP) -> Iterable[dict[str, Any]]:
    """The table as rows (for ``docs/e2.md`` and ``/ric/v1/config``)."""
    for name, r in names.rules.items():
        yield {"measurement": name, "field": r.field, "direction": r.direction or "link",
               "scale": r.scale, "cell_level": r.cell_level, "per": r.per}
    for q in names.ratios:
        yield {"measurement": f"{q.numerator} / {q.denominator}", "field": q.field,
               "direction": q.direction or "link", "scale": 1.0, "cell_level": q.cell_level}
    for d in names.distributions:
        yield {"measurement": f"{d.prefix}<k>", "field": d.field,
               "direction": d.direction or "link", "scale": 1.0, "cell_level": d.cell_level}
