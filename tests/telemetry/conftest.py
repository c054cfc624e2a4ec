"""Telemetry tests share the real-influxd fixture of the model tests."""

from __future__ import annotations

from tests.model.conftest import influx

__all__ = ["influx"]
