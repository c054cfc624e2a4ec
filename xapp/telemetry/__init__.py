"""Per-WAT telemetry: the ``wat_kpi`` schema, the InfluxDB store and the Raca 5G importer.

``xapp.telemetry.influx`` pulls in ``influxdb-client``; import it where it is used.
"""

from __future__ import annotations

from xapp.telemetry.schema import (
    FIELD_RANGES,
    KPI_FIELDS,
    MEASUREMENT_KPI,
    MEASUREMENT_PREDICTION,
    MEASUREMENT_WEIGHT,
    TAGS,
    clean_columns,
)

__all__ = ["FIELD_RANGES", "KPI_FIELDS", "MEASUREMENT_KPI", "MEASUREMENT_PREDICTION",
           "MEASUREMENT_WEIGHT", "TAGS", "clean_columns"]
