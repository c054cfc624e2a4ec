"""Adapters: one module (or package) per external system, each implementing a core protocol.

``influx`` (InfluxDB), ``mqtt`` (the device channel), ``sdl`` (Redis through ricsdl), ``rmr`` (the
only importer of ``ricxappframe.rmr``), ``a1`` (A1 policy messages), ``raca5g`` (trace import),
``lab`` (in-memory and file stand-ins used by the twin, benches and lab mode).
"""
