"""``mcw run``'s command line as one typed record."""

from __future__ import annotations

import argparse
from dataclasses import fields
from pathlib import Path

from xapp.app.run_cli import configure
from xapp.app.run_options import RunOptions


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    configure(p)
    return p


def test_every_flag_is_a_field_with_the_same_default() -> None:
    args = parser().parse_args([])
    assert {f.name for f in fields(RunOptions)} == set(vars(args))
    defaults = RunOptions.from_args(args)
    for f in fields(RunOptions):
        if f.name != "config":  # $CONFIG_FILE is read by the parser's default
            assert getattr(defaults, f.name) == f.default, f.name


def test_flags_reach_the_options() -> None:
    opts = RunOptions.from_args(parser().parse_args(
        ["--rmr", "off", "--sdl", "memory", "--http-port", "0", "--kpi-file", "k.json",
         "--grace-s", "3"]))
    assert (opts.rmr, opts.sdl, opts.http_port, opts.kpi_file, opts.grace_s) == (
        "off", "memory", 0, Path("k.json"), 3.0)
