"""The CPE registry: which network-side UE ids and which serving cell belong to which CPE.

E2SM-KPM names a UE by the ids the RAN uses (AMF-UE-NGAP-ID with its GUAMI, the RAN UE ID, the
gNB-CU F1AP id, the C-RNTI), never by subscriber identity, while the product's unit is the CPE.
Nothing standard tells a near-RT RIC which UE is which CPE: the 5G core's subscriber data sits
behind the NEF/UDM, which no RIC component reaches.  So an operator provisions the registry
(``mcw cpe-registry add`` one at a time, ``mcw cpe-registry import`` from CSV or JSON in bulk, from
whatever the core or the CPE management system exports).

What is kept, in its own SDL namespace (default ``mcw-cpe-registry``):

``cpe/<cpe id>``     ``{"ue_ids": [...], "cell": "<plmn hex>-<nci hex>" | null}``
``meta/generation``  a token rewritten with every change, so a reader reloads only on change

UE ids are the strings :meth:`xapp.adapters.e2.records.UeId.keys` gives (``amf:<guami>:<id>``,
``ranue:<hex>``, ``f1ap:<id>``, ``crnti:<id>``); a cell is an NR CGI ``<plmn hex>-<nci hex>``.
Both are checked whole and stored lower-case.  One UE id belongs to at most one CPE.

Reads (:meth:`CpeRegistry.cpe_for_keys`, :meth:`CpeRegistry.cpes_in_cell`) come from an
immutable in-memory view swapped in one assignment, so the indication path never takes a lock
or waits for Redis; :meth:`CpeRegistry.refresh` (a :class:`~xapp.core.workers.Worker` in the
xApp) reloads the view when another process (the CLI) changed the SDL copy.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import re
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from xapp import bounded_json
from xapp.adapters.sdl import LazySdlClient, SdlBackend
from xapp.core.ids import is_cpe_id
from xapp.core.workers import Worker

log = logging.getLogger(__name__)

DEFAULT_NAMESPACE: Final = "mcw-cpe-registry"
ENTRY_PREFIX: Final = "cpe/"
GENERATION_KEY: Final = "meta/generation"

#: The UE id forms of ``UeId.keys()``.  AMF-UE-NGAP-ID < 2^40 (13 digits), F1AP id < 2^32,
#: C-RNTI < 2^16; GUAMI fields are PLMN (5-6 hex) then AMF region, set and pointer (hex).
#: A RAN UE ID is 8 octets in KPM v3; v2's UE-Identity is an opaque OCTET STRING (up to 28
#: octets kept).
UE_KEY_RE: Final = re.compile(
    r"amf:[0-9a-f]{5,6}(?:-[0-9a-f]{1,4}){3}:[0-9]{1,13}"
    r"|ranue:[0-9a-f]{2,56}"
    r"|f1ap:[0-9]{1,10}"
    r"|crnti:[0-9]{1,5}")
#: An NR CGI (36-bit NCI: 9 hex digits) or an E-UTRA CGI (28 bits: 7), PLMN first.
CELL_RE: Final = re.compile(r"[0-9a-f]{5,6}-[0-9a-f]{1,9}")


class RegistryError(ValueError):
    """A registry change or import that is invalid or beyond the limits; nothing was changed."""


@dataclass(frozen=True)
class RegistryLimits:
    """Bounds on what the registry holds (a bad import must not exhaust the xApp's memory)."""

    max_cpes: int = 100_000
    max_ids_per_cpe: int = 8
    max_id_chars: int = 64
    #: An import file is read whole; 64 MiB holds several hundred thousand rows.
    max_import_bytes: int = 64 * 1024 * 1024


def canonical_ue_key(key: str, limits: RegistryLimits = RegistryLimits()) -> str:
    """``key`` lower-cased and checked against the ``UeId.keys()`` forms; RegistryError if not."""
    if not isinstance(key, str) or len(key) > limits.max_id_chars:
        raise RegistryError(f"UE id {key!r:.80}: not a string of at most "
                            f"{limits.max_id_chars} characters")
    low = key.strip().lower()
    if UE_KEY_RE.fullmatch(low) is None:
        raise RegistryError(f"UE id {key!r}: expected amf:<plmn>-<region>-<set>-<pointer>:<id>, "
                            "ranue:<hex digits>, f1ap:<id> or crnti:<id>")
    if low.startswith("crnti:") and int(low[6:]) > 0xFFFF:
        raise RegistryError(f"UE id {key!r}: a C-RNTI is at most 65535")
    if low.startswith("f1ap:") and int(low[5:]) > 0xFFFFFFFF:
        raise RegistryError(f"UE id {key!r}: an F1AP id is at most 2^32-1")
    if low.startswith("amf:") and int(low.rsplit(":", 1)[1]) >= 1 << 40:
        raise RegistryError(f"UE id {key!r}: an AMF-UE-NGAP-ID is below 2^40")
    return low


def canonical_cell(cell: str) -> str:
    """``cell`` lower-cased and checked as ``<plmn hex>-<cell id hex>``; RegistryError if not."""
    if not isinstance(cell, str) or len(cell) > 32:
        raise RegistryError(f"cell {cell!r:.80}: not a string of at most 32 characters")
    low = cell.strip().lower()
    if CELL_RE.fullmatch(low) is None:
        raise RegistryError(f"cell {cell!r}: expected an NR CGI as <plmn hex>-<nci hex>, "
                            "e.g. 00f110-00000000a")
    return low


@dataclass(frozen=True, slots=True)
class CpeEntry:
    """One CPE's network-side ids (most specific first, as given) and its serving cell."""

    cpe_id: str
    ue_ids: tuple[str, ...] = ()
    cell: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"cpe_id": self.cpe_id, "ue_ids": list(self.ue_ids), "cell": self.cell}

    @classmethod
    def build(cls, cpe_id: object, ue_ids: Iterable[object] = (), cell: object = None,
              limits: RegistryLimits = RegistryLimits()) -> CpeEntry:
        """A validated, canonical entry; RegistryError naming what is wrong."""
        if not is_cpe_id(cpe_id):
            raise RegistryError(f"CPE id {cpe_id!r:.80}: expected 1-64 characters of "
                                "A-Z a-z 0-9 . _ - starting with a letter or digit")
        if isinstance(ue_ids, (str, bytes)):
            raise RegistryError(f"CPE {cpe_id}: ue_ids must be a list")
        ids: list[str] = []
        for raw in ue_ids:
            if len(ids) >= limits.max_ids_per_cpe:
                raise RegistryError(f"CPE {cpe_id}: more than {limits.max_ids_per_cpe} UE ids")
            key = canonical_ue_key(raw, limits)  # type: ignore[arg-type]
            if key not in ids:
                ids.append(key)
        if cell is not None and cell != "":
            return cls(cpe_id, tuple(ids), canonical_cell(cell))  # type: ignore[arg-type]
        return cls(cpe_id, tuple(ids), None)


@dataclass(frozen=True)
class _View:
    """What readers see: never changed after it is built, replaced whole."""

    entries: Mapping[str, CpeEntry] = field(default_factory=dict)
    by_ue: Mapping[str, str] = field(default_factory=dict)
    by_cell: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


def _view(entries: Mapping[str, CpeEntry]) -> _View:
    by_ue: dict[str, str] = {}
    cells: dict[str, list[str]] = {}
    for cpe_id, e in entries.items():
        for key in e.ue_ids:
            by_ue[key] = cpe_id
        if e.cell is not None:
            cells.setdefault(e.cell, []).append(cpe_id)
    return _View(dict(entries), by_ue, {c: tuple(sorted(v)) for c, v in cells.items()})


class CpeRegistry:
    """CPE -> UE ids and cell, with the reverse lookups the indication path needs.

    Parameters
    ----------
    namespace : str
        SDL namespace of the registry.
    backend_factory : callable or None
        Makes an SDL client; None keeps the registry in memory only (tests, the twin).
    limits : RegistryLimits
        Bounds on CPEs, ids per CPE and id length.
    refresh_s : float
        Interval of :attr:`worker`, which reloads the view when the SDL copy changed.
    """

    def __init__(self, namespace: str = DEFAULT_NAMESPACE,
                 backend_factory: Callable[[], SdlBackend] | None = None, *,
                 limits: RegistryLimits = RegistryLimits(), refresh_s: float = 5.0) -> None:
        self.namespace = namespace
        self.limits = limits
        self._sdl = LazySdlClient(backend_factory) if backend_factory is not None else None
        self._write_lock = threading.Lock()
        self._view = _View()
        self._generation: bytes | None = None
        #: Failed SDL reloads and stored entries skipped as invalid (for metrics and logs).
        self.refresh_errors = 0
        self.invalid_stored = 0
        self.worker = Worker("mcw-cpe-registry", self.refresh, refresh_s, deadline_s=30.0)

    # --- reads (lock-free: one immutable view) ------------------------------------------------

    def __len__(self) -> int:
        return len(self._view.entries)

    def entry(self, cpe_id: str) -> CpeEntry | None:
        return self._view.entries.get(cpe_id)

    def entries(self) -> list[CpeEntry]:
        view = self._view
        return [view.entries[k] for k in sorted(view.entries)]

    def cpe_for_keys(self, keys: Sequence[str]) -> str | None:
        """The CPE owning the first of ``keys`` (``UeId.keys()``, most specific first)."""
        by_ue = self._view.by_ue
        for key in keys:
            cpe = by_ue.get(key)
            if cpe is not None:
                return cpe
        return None

    def cpes_in_cell(self, cell: str) -> tuple[str, ...]:
        """The CPEs the registry places in ``cell`` (sorted), empty when none."""
        return self._view.by_cell.get(cell, ())

    def cell_of(self, cpe_id: str) -> str | None:
        e = self._view.entries.get(cpe_id)
        return None if e is None else e.cell

    # --- changes (write through to SDL when there is one) -------------------------------------

    def add(self, cpe_id: str, ue_ids: Iterable[str] = (), cell: str | None = None, *,
            replace: bool = False) -> CpeEntry:
        """Add ``cpe_id`` or, for a known one, merge ``ue_ids`` into its ids and set its cell
        when given (``replace``: the new ids and cell replace the old).  RegistryError when an
        id belongs to another CPE or a bound is passed; nothing changes then."""
        new = CpeEntry.build(cpe_id, ue_ids, cell, self.limits)
        with self._write_lock:
            self._reload_for_write()
            old = self._view.entries.get(new.cpe_id)
            if old is not None and not replace:
                new = CpeEntry.build(new.cpe_id, old.ue_ids + new.ue_ids,
                                     new.cell if new.cell is not None else old.cell, self.limits)
            entries = dict(self._view.entries)
            entries[new.cpe_id] = new
            self._check(entries, [new])
            self._commit(entries, {new.cpe_id: new}, set())
        return new

    def remove(self, cpe_id: str, ue_ids: Iterable[str] | None = None) -> bool:
        """Remove the CPE (``ue_ids`` None) or only those of its ids; False if it is unknown."""
        with self._write_lock:
            self._reload_for_write()
            old = self._view.entries.get(cpe_id)
            if old is None:
                return False
            entries = dict(self._view.entries)
            if ue_ids is None:
                del entries[cpe_id]
                self._commit(entries, {}, {cpe_id})
                return True
            drop = {canonical_ue_key(k, self.limits) for k in ue_ids}
            new = CpeEntry(cpe_id, tuple(k for k in old.ue_ids if k not in drop), old.cell)
            entries[cpe_id] = new
            self._commit(entries, {cpe_id: new}, set())
            return True

    def import_entries(self, entries: Iterable[CpeEntry], *, replace_all: bool = False) -> int:
        """Add or replace these entries in one change (all or nothing); ``replace_all`` drops
        every CPE the import does not name.  Returns the number of entries imported."""
        incoming: dict[str, CpeEntry] = {}
        for e in entries:
            if e.cpe_id in incoming:
                raise RegistryError(f"CPE {e.cpe_id} appears twice in the import")
            incoming[e.cpe_id] = e
            if len(incoming) > self.limits.max_cpes:
                raise RegistryError(f"the import holds more than {self.limits.max_cpes} CPEs")
        with self._write_lock:
            self._reload_for_write()
            current = self._view.entries
            merged = dict(incoming) if replace_all else {**current, **incoming}
            self._check(merged, list(incoming.values()))
            removed = set(current) - set(merged)
            self._commit(merged, incoming, removed)
        return len(incoming)

    def _check(self, entries: Mapping[str, CpeEntry], changed: Sequence[CpeEntry]) -> None:
        if len(entries) > self.limits.max_cpes:
            raise RegistryError(f"the registry holds at most {self.limits.max_cpes} CPEs")
        owners: dict[str, str] = {}
        for e in entries.values():
            for key in e.ue_ids:
                other = owners.setdefault(key, e.cpe_id)
                if other != e.cpe_id:
                    first, second = sorted((other, e.cpe_id))
                    raise RegistryError(f"UE id {key} would belong to both {first} and "
                                        f"{second}; remove it from one first")

    def _commit(self, entries: dict[str, CpeEntry], written: Mapping[str, CpeEntry],
                removed: set[str]) -> None:
        if self._sdl is not None:
            token = uuid.uuid4().hex.encode()
            data = {ENTRY_PREFIX + c: _encode(e) for c, e in written.items()}
            data[GENERATION_KEY] = token
            backend = self._client()
            try:
                if removed:
                    backend.remove(self.namespace, {ENTRY_PREFIX + c for c in removed})
                backend.set(self.namespace, data)
            except Exception:
                self._reset()
                raise
            self._generation = token
        self._view = _view(entries)

    # --- SDL ------------------------------------------------------------------------------------

    def _client(self) -> SdlBackend:
        assert self._sdl is not None
        return self._sdl.get()

    def _reset(self) -> None:
        if self._sdl is not None:
            self._sdl.reset()

    def _reload_for_write(self) -> None:
        # A change starts from what SDL holds, so two operators' commands do not undo each other
        # (raises when SDL is unreachable: a change that cannot be stored is not made).
        if self._sdl is not None:
            self._load(force=False, raise_errors=True)

    def refresh(self) -> bool:
        """Reload from SDL if another writer changed it; True when the view is current.

        A failure keeps the last view (the indication path goes on mapping with it)."""
        if self._sdl is None:
            return True
        with self._write_lock:
            try:
                self._load(force=False, raise_errors=True)
            except Exception as exc:
                self.refresh_errors += 1
                log.warning("CPE registry: SDL namespace %s unreachable, keeping %d CPEs: %s",
                            self.namespace, len(self), exc)
                return False
        return True

    def _load(self, *, force: bool, raise_errors: bool) -> None:
        backend = self._client()
        try:
            generation = backend.get(self.namespace, {GENERATION_KEY}).get(GENERATION_KEY)
            if not force and generation is not None and generation == self._generation:
                return
            if generation is None and self._generation is not None and self._view.entries:
                # Every change writes a generation, so none at all means Redis came back
                # without its data (no persistence): the view in memory is the last copy.
                log.warning("CPE registry: SDL namespace %s lost its data; writing the %d "
                            "CPEs held in memory again", self.namespace, len(self))
                self._commit(dict(self._view.entries), self._view.entries, set())
                return
            stored = backend.find_and_get(self.namespace, ENTRY_PREFIX + "*")
        except Exception:
            self._reset()
            if raise_errors:
                raise
            return
        entries: dict[str, CpeEntry] = {}
        owners: dict[str, str] = {}
        invalid = 0
        for key in sorted(stored):
            try:
                e = _decode(key, stored[key], self.limits)
            except (RegistryError, bounded_json.BoundedJsonError) as exc:
                invalid += 1
                log.error("CPE registry: %s/%s is invalid and ignored: %s", self.namespace,
                          key, exc)
                continue
            if len(entries) >= self.limits.max_cpes:
                invalid += 1
                continue
            taken = [k for k in e.ue_ids if owners.get(k, e.cpe_id) != e.cpe_id]
            if taken:  # another writer's race; the first (by CPE id) keeps the id
                invalid += 1
                log.error("CPE registry: %s claims UE ids of other CPEs %s; those are ignored",
                          e.cpe_id, taken)
                e = CpeEntry(e.cpe_id, tuple(k for k in e.ue_ids if k not in taken), e.cell)
            for k in e.ue_ids:
                owners[k] = e.cpe_id
            entries[e.cpe_id] = e
        self.invalid_stored = invalid
        self._generation = generation
        self._view = _view(entries)
        log.info("CPE registry loaded from SDL namespace %s: %d CPEs", self.namespace,
                 len(entries))

    def start(self) -> None:
        """Load now (best effort) and reload every ``refresh_s`` in :attr:`worker`."""
        if self._sdl is not None:
            self.refresh()
            self.worker.start()

    def stop(self, timeout_s: float = 3.0) -> None:
        self.worker.stop(timeout_s=timeout_s)
        self._reset()


def _encode(e: CpeEntry) -> bytes:
    return json.dumps({"ue_ids": list(e.ue_ids), "cell": e.cell},
                      separators=(",", ":")).encode()


def _decode(key: str, raw: bytes, limits: RegistryLimits) -> CpeEntry:
    doc = bounded_json.loads(raw)
    if not isinstance(doc, dict):
        raise RegistryError("not a JSON object")
    return CpeEntry.build(key[len(ENTRY_PREFIX):], doc.get("ue_ids") or [], doc.get("cell"),
                          limits)


# --- bulk provisioning files ------------------------------------------------------------------

def parse_import(data: bytes, fmt: str | None = None,
                 limits: RegistryLimits = RegistryLimits()) -> list[CpeEntry]:
    """Entries from a provisioning file: JSON (``{"cpes": [{"cpe_id", "ue_ids", "cell"}]}``
    or the bare list, as ``mcw cpe-registry list --json`` prints) or CSV with a header
    ``cpe_id,ue_ids,cell`` (ids separated by spaces or semicolons).  ``fmt`` is ``json``,
    ``csv`` or None (guessed from the first character).  RegistryError names the first bad
    row; nothing is returned then."""
    if len(data) > limits.max_import_bytes:
        raise RegistryError(f"import file larger than {limits.max_import_bytes} bytes")
    if fmt is None:
        fmt = "json" if data.lstrip()[:1] in (b"{", b"[") else "csv"
    if fmt == "json":
        try:
            doc = bounded_json.loads(data, bounded_json.JsonLimits(
                max_bytes=limits.max_import_bytes, max_depth=6))
        except bounded_json.BoundedJsonError as exc:
            raise RegistryError(f"import file: {exc}") from None
        rows = doc.get("cpes") if isinstance(doc, dict) else doc
        if not isinstance(rows, list):
            raise RegistryError('import file: expected {"cpes": [...]} or a list of CPEs')
        out = []
        for i, row in enumerate(rows):
            if not isinstance(row, dict):
                raise RegistryError(f"import file: entry {i} is not an object")
            try:
                out.append(CpeEntry.build(row.get("cpe_id"), row.get("ue_ids") or [],
                                          row.get("cell"), limits))
            except RegistryError as exc:
                raise RegistryError(f"import file: entry {i}: {exc}") from None
            if len(out) > limits.max_cpes:
                raise RegistryError(f"import file: more than {limits.max_cpes} CPEs")
        return out
    if fmt != "csv":
        raise RegistryError(f"import format {fmt!r}: expected json or csv")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise RegistryError(f"import file is not UTF-8: {exc}") from None
    reader = csv.DictReader(io.StringIO(text))
    if reader.fieldnames is None or "cpe_id" not in reader.fieldnames:
        raise RegistryError("import CSV: the header must name cpe_id (and ue_ids, cell)")
    out = []
    for line, row in enumerate(reader, start=2):
        ids = re.split(r"[;\s]+", (row.get("ue_ids") or "").strip())
        try:
            out.append(CpeEntry.build(row.get("cpe_id"), [i for i in ids if i],
                                      (row.get("cell") or "").strip() or None, limits))
        except RegistryError as exc:
            raise RegistryError(f"import CSV line {line}: {exc}") from None
        if len(out) > limits.max_cpes:
            raise RegistryError(f"import CSV: more than {limits.max_cpes} CPEs")
    return out
