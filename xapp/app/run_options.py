"""``mcw run``'s command line as one typed record."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RunOptions:
    """What ``mcw run``'s command line decides (its flags: :func:`xapp.app.run_cli.configure`),
    typed; everything else comes from the configuration file."""

    config: str | None = None
    schemas_dir: str | None = None
    http_host: str = "0.0.0.0"
    http_port: int = 8080
    rmr: str = "auto"
    rmr_port: int = 4560
    sdl: str = "redis"
    estimator: str = "auto"
    kpi_file: Path | None = None
    publish_file: Path | None = None
    grace_s: float = 25.0
    config_poll_s: float = 2.0

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> RunOptions:
        """The options of parsed arguments (each field from the flag of the same name)."""
        return cls(**{f: getattr(args, f) for f in cls.__dataclass_fields__})
