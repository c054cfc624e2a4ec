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

#: command -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "weights": ("xapp.weights_cli", "compute WRR weights from per-WAT capacities"),
    "twin": ("twin.cli", "simulate a CPE's MPTCP WRR connection under a weight policy"),
    "demo": ("twin.demo", "closed-loop demo on the wifi-walk scenario (dry-run kernel backend)"),
    "model": ("xapp.model.cli", "train, evaluate and inspect the capacity model"),
    "telemetry": ("xapp.telemetry.cli", "generate, import and load per-WAT KPI telemetry"),
    "run": ("xapp.ric.main", "run the xApp in the near-RT RIC (RMR, A1, SDL, MQTT)"),
}


def _top_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mcw",
        description="Multi-connectivity weights: predict per-technology capacity and steer "
                    "MPTCP weighted round-robin on 5G NR, Wi-Fi and LiFi CPEs.",
        epilog="Run 'mcw COMMAND --help' for the options of a command.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in COMMANDS:
        parser = _top_parser()
        if not args:
            parser.print_help()
            return 2
        parser.parse_args(args)  # prints --help, or the "invalid choice" error and exits 2
        return 2
    name, rest = args[0], args[1:]
    module_name, help_text = COMMANDS[name]
    module = importlib.import_module(module_name)
    parser = argparse.ArgumentParser(prog=f"mcw {name}", description=help_text)
    module.configure(parser)
    return int(module.run(parser.parse_args(rest)))


if __name__ == "__main__":
    sys.exit(main())
