"""InfluxDB: per-WAT telemetry stored and read back.

``line_protocol`` (tables of points as line protocol, pure), ``write_errors`` (what InfluxDB's
answer to a write means for the batch, pure), ``store`` (:class:`~.store.InfluxStore`, the
buffered writer and reader: the xApp's ``KpiSource`` and ``TelemetrySink``) and ``intake``
(:class:`~.intake.InfluxIntake`, other writers' KPIs polled into the intake).
"""
