"""``mcw``: the command line of the multi-connectivity weights xApp.

Each sub-command lives in the module that owns the capability and exposes two functions:
``configure(parser)`` adds its arguments, ``run(args) -> int`` does the work.  Modules are
imported only when their command runs, so ``mcw weights`` does not pay for scikit-learn or
matplotlib, and the twin (an evaluation tool) stays out of the xApp's runtime imports.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points

#: The xApp's own commands: command -> (module, one-line help).  Other packages add theirs
#: through the ``mcw.commands`` entry-point group (the twin: ``twin``, ``demo``), so the xApp
#: never imports them and its runtime image need not contain them.
COMMANDS: dict[str, tuple[str, str]] = {
    "weights": ("xapp.app.weights_cli", "compute WRR weights from per-WAT capacities"),
    "model": ("xapp.app.model_cli", "train, evaluate and inspect the capacity model"),
    "telemetry": ("xapp.app.telemetry_cli", "import and load per-WAT KPI telemetry"),
    "cpe-registry": ("xapp.app.registry_cli", "provision the CPE registry (RAN UE ids and cell "
                     "per CPE) that maps E2 KPM reports"),
    "run": ("xapp.app.run_cli", "run the xApp in the near-RT RIC (RMR, A1, SDL, MQTT)"),
}


def commands() -> dict[str, tuple[str, str]]:
    """Every command: the xApp's own and those of installed plug-ins (whose help is the first
    line of the module's docstring, read only when the top-level help is printed)."""
    found = dict(COMMANDS)
    for ep in entry_points(group="mcw.commands"):
        found.setdefault(ep.name, (ep.value, ""))
    return found


def _plugin_help(module_name: str) -> str:
    try:
        doc = importlib.import_module(module_name).__doc__ or ""
    except ImportError:
        return "(not installed here)"
    first = doc.strip().splitlines()[0] if doc.strip() else module_name
    return first.split(": ", 1)[-1].rstrip(".")


def _top_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mcw",
        description="Multi-connectivity weights: predict per-technology capacity and steer "
                    "MPTCP weighted round-robin on 5G NR, Wi-Fi and LiFi CPEs.",
        epilog="Run 'mcw COMMAND --help' for the options of a command.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in commands().items():
        sub.add_parser(name, help=help_text or _plugin_help(module_name), add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    known = commands()
    if not args or args[0] not in known:
        parser = _top_parser()
        if not args:
            parser.print_help()
            return 2
        parser.parse_args(args)  # prints --help, or the "invalid choice" error and exits 2
        return 2
    name, rest = args[0], args[1:]
    module_name, help_text = known[name]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:  # a plug-in registered but not installed in this image
        print(f"mcw {name}: not available here ({exc})", file=sys.stderr)
        return 2
    parser = argparse.ArgumentParser(prog=f"mcw {name}", description=help_text)
    module.configure(parser)
    return int(module.run(parser.parse_args(rest)))


if __name__ == "__main__":
    sys.exit(main())
