"""Where the xApp learns the E2 nodes and their KPM RAN function: the R-NIB or configuration.

The R-NIB is what the O-RAN SC E2 manager keeps in SDL, namespace ``e2Manager`` (keys as
ricxappframe 3.2.2's ``xapp_frame.RMRXapp.GetListNodebIds``/``GetNodeb`` read them, and as
o-ran-sc/ric-plt-e2mgr ``rNibWriter.go`` writes them):

``GNB`` / ``ENB``         SDL groups whose members are ``NbIdentity`` protobufs (inventory name,
                          global id, connection status)
``RAN:<inventory name>``  a ``NodebInfo`` protobuf; ``gnb.ran_functions`` lists each RAN
                          function's id, revision, OID and definition

The definition is the E2 Setup Request's RANfunctionDefinition as the E2 manager received it
from the E2 termination in XER: the OCTET STRING as hexadecimal text, with whitespace
(``E2Manager/models/e2_setup_request_message.go``, ``RanFunctionDefinition string``).  It is
decoded with :func:`xapp.adapters.e2.kpm_decode.decode_ran_function_description`; a function
that is not a KPM the codec supports is skipped and counted.

A RIC without R-NIB access (or a test bed) lists its nodes in ``controls.e2.nodes`` instead
(:class:`StaticNodes`).  Every input here is outside data: bounded, and refused with a count,
never raised out of :meth:`RnibNodes.nodes` beyond an SDL outage.
"""

from __future__ import annotations

import binascii
import logging
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, cast

from xapp.adapters.e2.records import E2DecodeError, E2Node, KpmRanFunction

log = logging.getLogger(__name__)

#: SDL namespace of the E2 manager's R-NIB.
RNIB_NAMESPACE = "e2Manager"
#: Node types whose identities the E2 manager lists (SDL group names).
NODE_GROUPS = ("GNB", "ENB")
#: A RIC serves hundreds of nodes; more identities than this are refused, not read.
MAX_NODES = 4096
#: A NodebInfo with its cells and functions is a few KiB; a larger value is refused.
MAX_NODEB_BYTES = 1024 * 1024
#: Hex text of one RANfunctionDefinition (the simulator's is ~1.5 KB of bytes).
MAX_DEFINITION_CHARS = 256 * 1024
#: Standard KPM REPORT styles, used for statically configured nodes that name none.
DEFAULT_STATIC_STYLES = (1,)

DecodeDescription = Callable[[bytes, int, str, int], KpmRanFunction]


class NodeSource(Protocol):
    """The E2 nodes the RIC knows now (connected or not), with their KPM function if any."""

    def nodes(self) -> list[E2Node]: ...


class RnibBackend(Protocol):
    """The part of ``ricsdl.syncstorage.SyncStorage`` the R-NIB reader uses."""

    def get(self, ns: str, keys: str | AbstractSet[str]) -> dict[str, bytes]: ...

    def get_members(self, ns: str, group: str) -> AbstractSet[bytes]: ...

    def close(self) -> None: ...


def ricsdl_rnib_backend() -> RnibBackend:
    """A ricsdl client (``DBAAS_SERVICE_HOST``/``PORT`` from the environment, like every RIC
    component) for reading the R-NIB, with the socket timeout of every ricsdl client of the
    xApp (:func:`xapp.adapters.sdl.ricsdl_backend`): a hung Redis fails a read of the node
    list instead of holding the E2 subscriber."""
    from xapp.adapters.sdl import ricsdl_backend

    return cast(RnibBackend, ricsdl_backend())


@dataclass(frozen=True)
class StaticNode:
    """One node of ``controls.e2.nodes``: what the R-NIB would have said about it."""

    inventory_name: str
    ran_function_id: int
    kpm_version: int = 3
    report_styles: tuple[int, ...] = DEFAULT_STATIC_STYLES
    oid: str = ""
    global_id: str = ""
    #: The node's cell, NR CGI "<plmn hex>-<nci hex>", and its carrier's PRBs (see E2Node).
    cell: str | None = None
    prb_total: int | None = None

    def node(self) -> E2Node:
        # Styles are offered with their standard formats (O-RAN.WG3.E2SM-KPM 7.4.1):
        # style n uses action definition format n and indication message format 1, except
        # the multi-UE styles 4 and 5, which report in format 3.
        styles = {s: (f"style {s}", s, 1, 3 if s in (4, 5) else 1 if s != 3 else 2)
                  for s in self.report_styles}
        # The standard definitions of the configured version until its indications say
        # otherwise (aper.default_dialect).
        kpm = KpmRanFunction(ran_function_id=self.ran_function_id, oid=self.oid,
                             revision=0, short_name="ORAN-E2SM-KPM",
                             kpm_version=self.kpm_version, report_styles=styles,
                             dialect="v2" if self.kpm_version == 2 else "v3")
        return E2Node(self.inventory_name, self.global_id or self.inventory_name, kpm,
                      cell=self.cell, prb_total=self.prb_total)


class StaticNodes:
    """Nodes from configuration (always connected as far as the xApp can tell)."""

    def __init__(self, nodes: Sequence[StaticNode]) -> None:
        self._nodes = [n.node() for n in nodes]

    def nodes(self) -> list[E2Node]:
        return list(self._nodes)


@dataclass
class NodeCounters:
    """What reading the R-NIB refused, by reason (exported as metrics)."""

    counts: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def inc(self, reason: str, n: int = 1) -> None:
        with self._lock:
            self.counts[reason] = self.counts.get(reason, 0) + n

    def as_dict(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)


def definition_bytes(text: str) -> bytes:
    """The RANfunctionDefinition bytes from the R-NIB's XER hex text; E2DecodeError if not."""
    if len(text) > MAX_DEFINITION_CHARS:
        raise E2DecodeError(f"RAN function definition of {len(text)} characters is over the "
                            f"{MAX_DEFINITION_CHARS} bound")
    digits = "".join(text.split())
    try:
        return binascii.unhexlify(digits)
    except (binascii.Error, ValueError) as exc:
        raise E2DecodeError(f"RAN function definition is not hexadecimal text: {exc}") from exc


class RnibNodes:
    """Reads the E2 manager's R-NIB through SDL on each :meth:`nodes` call.

    Parameters
    ----------
    backend_factory : callable
        Makes an SDL client (``xapp.adapters.sdl.ricsdl_backend``); made again after a failure.
    decode : callable
        ``(definition, ran_function_id, oid, revision) -> KpmRanFunction``; raises
        E2DecodeError for a function that is not a supported KPM (the codec's function).
    namespace : str
        The E2 manager's namespace (``e2Manager`` unless the platform renamed it).
    """

    def __init__(self, backend_factory: Callable[[], RnibBackend], decode: DecodeDescription,
                 *, namespace: str = RNIB_NAMESPACE) -> None:
        self._factory = backend_factory
        self._decode = decode
        self.namespace = namespace
        self._backend: RnibBackend | None = None
        self._lock = threading.Lock()
        self.counters = NodeCounters()
        # (name, function id, revision, definition) -> decoded: the R-NIB is polled every few
        # seconds and a definition only changes on a new E2 Setup or RIC Service Update.
        self._cache: dict[tuple[str, int, int, str], KpmRanFunction | None] = {}

    def nodes(self) -> list[E2Node]:
        """Every node the R-NIB lists; raises (the caller's worker counts it) when SDL fails."""
        with self._lock:
            if self._backend is None:
                self._backend = self._factory()
            try:
                return self._read(self._backend)
            except Exception:
                backend, self._backend = self._backend, None
                _close_quietly(backend)
                raise

    def close(self) -> None:
        with self._lock:
            backend, self._backend = self._backend, None
        _close_quietly(backend)

    def _read(self, backend: RnibBackend) -> list[E2Node]:
        from ricxappframe.entities.rnib.nb_identity_pb2 import NbIdentity

        names: dict[str, bool] = {}
        for group in NODE_GROUPS:
            members = backend.get_members(self.namespace, group)
            if len(members) > MAX_NODES:
                self.counters.inc("too_many_nodes")
                raise E2DecodeError(f"R-NIB group {group} lists {len(members)} nodes, over the "
                                    f"{MAX_NODES} bound")
            for raw in members:
                ident = NbIdentity()
                try:
                    ident.ParseFromString(bytes(raw))
                except Exception:
                    self.counters.inc("bad_identity")
                    continue
                if ident.inventory_name:
                    names[ident.inventory_name] = ident.connection_status == _CONNECTED
        if not names:
            return []
        keys = {"RAN:" + name for name in names}
        stored = backend.get(self.namespace, keys)
        out: list[E2Node] = []
        seen: set[tuple[str, int, int, str]] = set()
        for name in sorted(names):
            value = stored.get("RAN:" + name)
            if value is None:
                self.counters.inc("missing_nodeb")
                continue
            node = self._node(name, bytes(value), names[name], seen)
            if node is not None:
                out.append(node)
        # Forget decodings of functions no node offers any more, so the cache stays bounded.
        self._cache = {k: v for k, v in self._cache.items() if k in seen}
        return out

    def _node(self, name: str, raw: bytes, listed_connected: bool,
              seen: set[tuple[str, int, int, str]]) -> E2Node | None:
        from ricxappframe.entities.rnib.nodeb_info_pb2 import NodebInfo

        if len(raw) > MAX_NODEB_BYTES:
            self.counters.inc("nodeb_too_large")
            return None
        info = NodebInfo()
        try:
            info.ParseFromString(raw)
        except Exception:
            self.counters.inc("bad_nodeb")
            log.warning("R-NIB entry RAN:%s is not a NodebInfo protobuf; node skipped", name)
            return None
        connected = info.connection_status == _CONNECTED if info.connection_status else \
            listed_connected
        gid = info.global_nb_id
        global_id = f"{gid.plmn_id}-{gid.nb_id}" if gid.plmn_id or gid.nb_id else name
        functions = info.gnb.ran_functions if info.HasField("gnb") else ()
        cell, prbs = served_cell(info)
        return E2Node(name, global_id, self._kpm(name, functions, seen), connected,
                      cell=cell, prb_total=prbs)

    def _kpm(self, name: str, functions: Iterable[object],
             seen: set[tuple[str, int, int, str]]) -> KpmRanFunction | None:
        """The node's KPM function of the highest version the codec decodes, or None."""
        best: KpmRanFunction | None = None
        for fn in functions:
            fid = int(getattr(fn, "ran_function_id", 0))
            rev = int(getattr(fn, "ran_function_revision", 0))
            oid = str(getattr(fn, "ran_function_oid", ""))
            text = str(getattr(fn, "ran_function_definition", ""))
            key = (name, fid, rev, text)
            seen.add(key)
            if key in self._cache:
                decoded = self._cache[key]
            else:
                decoded = None
                try:
                    decoded = self._decode(definition_bytes(text), fid, oid, rev)
                except E2DecodeError as exc:
                    # Not KPM, or a KPM version the codec does not speak: normal for RC/NI.
                    self.counters.inc("not_kpm")
                    log.info("node %s RAN function %d (OID %r) not used: %s", name, fid, oid, exc)
                except Exception as exc:  # a codec bug must not stop discovery
                    self.counters.inc("decode_error")
                    log.error("node %s RAN function %d: decoding failed: %s", name, fid, exc)
                self._cache[key] = decoded
            if decoded is not None and (best is None or decoded.kpm_version > best.kpm_version):
                best = decoded
        return best


_RNIB_CELL_RE: Final = re.compile(r"([0-9a-fA-F]{6})[:\-]([0-9a-fA-F]{1,9})")
_NRB_RE: Final = re.compile(r"NRB([0-9]{2,3})")


def served_cell(info: Any) -> tuple[str | None, int | None]:
    """(NR CGI "<plmn hex>-<nci hex>", PRBs) of a gNB's first served NR cell in its R-NIB
    entry (E2 manager's ``cellId`` "<plmn>:<nci>" and the NR mode's transmission bandwidth
    ``NRB<n>``), or None for what is not there.  A node with several cells has no one cell:
    its cell-level reports name their own."""
    try:
        if not info.HasField("gnb") or len(info.gnb.served_nr_cells) != 1:
            return None, None
        inf = info.gnb.served_nr_cells[0].served_nr_cell_information
        match = _RNIB_CELL_RE.fullmatch(str(inf.cell_id).strip())
        cell = f"{match.group(1).lower()}-{match.group(2).lower()}" if match else None
        mode = inf.choice_nr_mode
        bw = (mode.tdd.transmission_bandwidth if mode.HasField("tdd")
              else mode.fdd.dl_transmission_bandwidth)
        name = bw.DESCRIPTOR.fields_by_name["ncnrb"].enum_type.values_by_number.get(bw.ncnrb)
        nrb = _NRB_RE.fullmatch(name.name) if name is not None else None
        return cell, int(nrb.group(1)) if nrb else None
    except Exception:  # an R-NIB entry of another schema version: no cell, not an error
        return None, None


#: ``ConnectionStatus.CONNECTED`` of the R-NIB protobufs (nb_identity.proto, nodeb_info.proto).
_CONNECTED = 1


def _close_quietly(backend: RnibBackend | None) -> None:
    if backend is None:
        return
    try:
        backend.close()
    except Exception:
        log.debug("closing the R-NIB SDL client failed", exc_info=True)


class CombinedNodes:
    """Configured nodes first, then the R-NIB's (a configured name wins over the R-NIB's)."""

    def __init__(self, sources: Sequence[NodeSource]) -> None:
        self._sources = list(sources)

    def nodes(self) -> list[E2Node]:
        out: dict[str, E2Node] = {}
        for source in self._sources:
            for node in source.nodes():
                out.setdefault(node.inventory_name, node)
        return list(out.values())


class OwnedNodes:
    """The nodes of ``source`` this replica owns (several replicas share the fleet): a node
    belongs to the replica holding the shard of its inventory name, with that shard's lease
    (``owns``: :meth:`xapp.core.ownership.ShardFence.allows`).  The subscriber sees a node it
    no longer owns as gone (its subscription is deleted at submgr) and the new owner's
    subscriber sees it appear, so each node has one subscription at a time."""

    def __init__(self, source: NodeSource, owns: Callable[[str], bool]) -> None:
        self._source = source
        self._owns = owns

    def nodes(self) -> list[E2Node]:
        return [n for n in self._source.nodes() if self._owns(n.inventory_name)]


def node_view(node: E2Node) -> Mapping[str, object]:
    """A node as ``/ric/v1/e2/subscriptions`` shows it."""
    kpm = node.kpm
    return {"global_id": node.global_id, "connected": node.connected, "cell": node.cell,
            "prb_total": node.prb_total,
            "kpm": None if kpm is None else {
                "ran_function_id": kpm.ran_function_id, "oid": kpm.oid,
                "revision": kpm.revision, "version": kpm.kpm_version,
                "short_name": kpm.short_name,
                "report_styles": sorted(kpm.report_styles)}}
