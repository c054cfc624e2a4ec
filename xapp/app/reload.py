"""What a running ``mcw run`` makes of a configuration reload: the timings of its controls
(:func:`xapp.core.timings.derive_timings`, the one derivation), the loop settings it applies
and those it keeps back with a warning, and the sections that wait for a restart."""

from __future__ import annotations

from dataclasses import replace

from xapp.app.config import Controls
from xapp.core.loop import LoopSettings
from xapp.core.timings import Timings, derive_timings, restart_only

#: Sections of ``controls`` that the running connections hold: a change waits for a restart.
RESTART_ONLY_SECTIONS = ("influxdb", "mqtt", "model", "sdl_namespace", "a1", "e2", "sharding")


def timings_of(c: Controls) -> Timings:
    """The timings of controls ``c`` (:func:`xapp.core.timings.derive_timings`, the one
    derivation)."""
    return derive_timings(c.loop.control_period_s, c.sharding.lease_s)


def loop_on_reload(wanted: LoopSettings, running: Timings, in_use: frozenset[str],
                   shard_lease_setting: float, *, sharded: bool, lease_in_force_s: float
                   ) -> tuple[LoopSettings, Timings, list[str]]:
    """What a running process makes of a reloaded ``controls.loop``: the loop settings it
    applies, the timings then in force, and a warning for each change it keeps back.

    A new period is applied only when no timing derived from it that a running component
    holds (``in_use``) would change: otherwise the loop would tick at one period and the rest
    run at another (a 15 s shard lease beside a 1 s period, past the weights' lease).  Such a
    change needs a restart; the period in force stays and the warning names what would have
    changed.  A weights lease at or below the running shard lease is kept back too."""
    warnings: list[str] = []
    loop = wanted
    timings = derive_timings(wanted.control_period_s, shard_lease_setting)
    fixed = restart_only(running, timings, in_use)
    if fixed:
        names = ", ".join(f"{name} {a:g} -> {b:g}" for name, (a, b) in fixed.items())
        warnings.append(
            f"controls.loop.control_period_s {running.control_period_s:g} s -> "
            f"{wanted.control_period_s:g} s needs a restart: {names} cannot change in a "
            f"running process; the period stays {running.control_period_s:g} s until then")
        loop = replace(loop, control_period_s=running.control_period_s)
        timings = running
    if sharded and timings.shard_lease_s >= loop.lease_s:
        warnings.append(
            f"controls.loop.lease_s {loop.lease_s:g} s refused: it must stay above the running "
            f"shard lease ({timings.shard_lease_s:g} s); {lease_in_force_s:g} s stays")
        loop = replace(loop, lease_s=lease_in_force_s)
    return loop, timings, warnings


def restart_only_changes(old: Controls, new: Controls) -> list[str]:
    """The sections of :data:`RESTART_ONLY_SECTIONS` that differ between ``old`` and
    ``new``."""
    return [name for name in RESTART_ONLY_SECTIONS if _changed(old, new, name)]


def _changed(old: Controls, new: Controls, name: str) -> bool:
    a, b = getattr(old, name), getattr(new, name)
    if name == "model":  # reload_check_s is the loader's
        return bool(a.path != b.path)
    return bool(a != b)
