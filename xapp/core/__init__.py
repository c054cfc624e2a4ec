"""The core: policy, A1 instance combination, weight engine, estimators and the control loop.

Nothing here does I/O or imports an adapter: InfluxDB, MQTT, SDL and RMR sit behind the
protocols of :mod:`xapp.core.ports` and are wired in :mod:`xapp.app.wiring`.
"""
