"""Telemetry tests share the real-influxd fixture of the model tests."""

from __future__ import annotations

from tests.model.conftest import _influx_server, _one_openmp_thread, influx, influx_db

__all__ = ["_influx_server", "_one_openmp_thread", "influx", "influx_db"]
