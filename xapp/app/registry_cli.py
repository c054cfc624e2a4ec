"""``mcw cpe-registry``: provision which RAN UE ids and serving cell belong to which CPE.

E2SM-KPM reports name UEs by network-side ids (AMF-UE-NGAP-ID + GUAMI, RAN UE ID, F1AP id,
C-RNTI); the xApp maps them to CPEs through this registry, kept in SDL (Redis, found through
``DBAAS_SERVICE_HOST``/``DBAAS_SERVICE_PORT`` like every RIC component).  No standard core API
reaches a near-RT RIC, so the registry is provisioned here: one CPE at a time, or in bulk from
a CSV/JSON export of the core or the CPE management system.  The running xApp picks changes up
within its refresh interval (5 s).

Examples::

    mcw cpe-registry add cpe-0001 --ue-id amf:00f110-2-1-3:17 --ue-id crnti:4660 \\
        --cell 00f110-00000000a
    mcw cpe-registry show cpe-0001 --json
    mcw cpe-registry list --json > registry.json
    mcw cpe-registry import registry.csv           # header: cpe_id,ue_ids,cell
    mcw cpe-registry remove cpe-0001 --ue-id crnti:4660
    mcw cpe-registry remove cpe-0001

Exit status: 0 done, 1 the CPE is not registered, 2 invalid input (nothing changed),
3 SDL unreachable (nothing changed).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from xapp.adapters.e2.registry import CpeEntry, CpeRegistry

UE_ID_HELP = ("a UE id as KPM reports it: amf:<plmn>-<region>-<set>-<pointer>:<AMF-UE-NGAP-ID>, "
              "ranue:<hex digits>, f1ap:<gNB-CU UE F1AP id> or crnti:<C-RNTI>; repeat for "
              "several (at most 8 per CPE)")
CELL_HELP = "serving NR cell as <plmn hex>-<nci hex>, e.g. 00f110-00000000a"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Provision the CPE registry the xApp maps E2SM-KPM UE reports with: CPE id -> the UE "
        "ids the RAN uses and the serving cell, kept in SDL.  Per-UE KPM reports reach a CPE "
        "only through one of its UE ids; cell-level load reaches the CPEs registered in the "
        "cell.  No standard core API is reachable from a near-RT RIC: provision here, or "
        "import an export of the core / CPE management system.")
    parser.epilog = ("Exit status: 0 done, 1 CPE not registered, 2 invalid input, "
                     "3 SDL unreachable (nothing is changed on 2 or 3).")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--namespace", default=None,
                        help="SDL namespace of the registry (default mcw-cpe-registry, the "
                             "one the xApp reads)")
    common.add_argument("--json", action="store_true", help="print the result as JSON")
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    add = sub.add_parser("add", parents=[common], help="register a CPE or add ids to it",
                         description="Register CPE_ID with UE ids and a cell; for a CPE "
                         "already registered the ids are added and the cell replaced when "
                         "given.  A UE id registered to another CPE is refused.")
    add.add_argument("cpe_id", metavar="CPE_ID", help="the CPE's id (as in its MQTT topics)")
    add.add_argument("--ue-id", action="append", default=[], metavar="KEY", help=UE_ID_HELP)
    add.add_argument("--cell", default=None, help=CELL_HELP)
    add.add_argument("--replace", action="store_true",
                     help="replace the CPE's ids and cell instead of adding to them")
    rem = sub.add_parser("remove", parents=[common], help="unregister a CPE or some of its ids",
                         description="Remove CPE_ID, or only the given UE ids of it.")
    rem.add_argument("cpe_id", metavar="CPE_ID")
    rem.add_argument("--ue-id", action="append", default=None, metavar="KEY", help=UE_ID_HELP)
    sub.add_parser("list", parents=[common], help="every registered CPE",
                   description="Print every registered CPE; --json prints the document "
                   "'import' reads.")
    show = sub.add_parser("show", parents=[common], help="one CPE's ids and cell")
    show.add_argument("cpe_id", metavar="CPE_ID")
    imp = sub.add_parser(
        "import", parents=[common], help="bulk provisioning from a CSV or JSON file",
        description="Add or replace the CPEs of FILE in one change (all or nothing).  CSV: a "
        "header cpe_id,ue_ids,cell, ids separated by ';' or spaces.  JSON: "
        '{"cpes": [{"cpe_id": ..., "ue_ids": [...], "cell": ...}]}, as list --json prints.')
    imp.add_argument("file", type=Path, metavar="FILE")
    imp.add_argument("--format", choices=("csv", "json"), default=None,
                     help="file format (default: JSON when it starts with { or [)")
    imp.add_argument("--replace-all", action="store_true",
                     help="remove every registered CPE the file does not name")


def _print(args: argparse.Namespace, doc: dict[str, Any], text: str) -> None:
    print(json.dumps(doc, sort_keys=True) if args.json else text)


def _describe(entry: CpeEntry) -> str:
    ids = ", ".join(entry.ue_ids) or "no UE ids"
    return f"{entry.cpe_id}: {ids}; cell {entry.cell or 'unknown'}"


def run(args: argparse.Namespace) -> int:
    from xapp.adapters.e2.registry import DEFAULT_NAMESPACE, CpeRegistry, RegistryError
    from xapp.adapters.sdl import ricsdl_backend

    registry = CpeRegistry(args.namespace or DEFAULT_NAMESPACE, ricsdl_backend)
    try:
        if not registry.refresh():
            print(f"mcw cpe-registry: SDL unreachable (namespace {registry.namespace}); "
                  "check DBAAS_SERVICE_HOST/DBAAS_SERVICE_PORT", file=sys.stderr)
            return 3
        return _act(args, registry)
    except RegistryError as exc:
        print(f"mcw cpe-registry: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"mcw cpe-registry: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # ricsdl's and redis-py's errors: SDL went away mid-change
        print(f"mcw cpe-registry: SDL error, nothing changed: {type(exc).__name__}: {exc}",
              file=sys.stderr)
        return 3
    finally:
        registry.stop()


def _act(args: argparse.Namespace, registry: CpeRegistry) -> int:
    action = args.action
    if action == "add":
        entry = registry.add(args.cpe_id, args.ue_id, args.cell, replace=args.replace)
        _print(args, entry.to_dict(), f"registered {_describe(entry)}")
        return 0
    if action == "remove":
        if not registry.remove(args.cpe_id, args.ue_id):
            _print(args, {"cpe_id": args.cpe_id, "removed": False},
                   f"{args.cpe_id} is not registered")
            return 1
        left = registry.entry(args.cpe_id)
        _print(args, {"cpe_id": args.cpe_id, "removed": True,
                      "entry": None if left is None else left.to_dict()},
               f"removed {args.cpe_id}" if left is None else f"now {_describe(left)}")
        return 0
    if action == "show":
        found = registry.entry(args.cpe_id)
        if found is None:
            _print(args, {"cpe_id": args.cpe_id, "registered": False},
                   f"{args.cpe_id} is not registered")
            return 1
        _print(args, found.to_dict(), _describe(found))
        return 0
    if action == "list":
        entries = registry.entries()
        _print(args, {"cpes": [e.to_dict() for e in entries]},
               "\n".join(_describe(e) for e in entries) or "no CPE registered")
        return 0
    # import
    from xapp.adapters.e2.registry import RegistryError, parse_import

    limit = registry.limits.max_import_bytes
    if args.file.stat().st_size > limit:
        raise RegistryError(f"{args.file}: larger than {limit} bytes")
    entries = parse_import(args.file.read_bytes(), args.format, registry.limits)
    n = registry.import_entries(entries, replace_all=args.replace_all)
    _print(args, {"imported": n, "registered": len(registry)},
           f"imported {n} CPEs; {len(registry)} registered")
    return 0
