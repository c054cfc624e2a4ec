"""JSON logs through mdclogpy, the O-RAN SC log format, at the level the configuration sets.

The xApp's modules (and the libraries it uses) log through the standard :mod:`logging` API;
:func:`setup_logging` routes every record to one mdclogpy ``Logger``, which writes one JSON object
per line (``ts``, ``crit``, ``id``, ``mdc``, ``msg``) to stdout.  mdclogpy starts at ERROR (one of
the frame's pitfalls), so the level is always set explicitly, and again on each config reload.
"""

from __future__ import annotations

import logging
import os

from mdclogpy import Level, Logger

_LEVELS: dict[str, tuple[int, Level]] = {
    "DEBUG": (logging.DEBUG, Level.DEBUG),
    "INFO": (logging.INFO, Level.INFO),
    "WARNING": (logging.WARNING, Level.WARNING),
    "ERROR": (logging.ERROR, Level.ERROR),
}


class MdclogHandler(logging.Handler):
    """A :class:`logging.Handler` that writes through an mdclogpy ``Logger``."""

    def __init__(self, logger: Logger) -> None:
        super().__init__()
        self.mdc = logger

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
            if record.exc_info:
                message += "\n" + logging.Formatter().formatException(record.exc_info)
            if record.name:
                message = f"{record.name}: {message}"
            level = (Level.ERROR if record.levelno >= logging.ERROR
                     else Level.WARNING if record.levelno >= logging.WARNING
                     else Level.INFO if record.levelno >= logging.INFO else Level.DEBUG)
            self.mdc.log(level, message)
        except Exception:
            self.handleError(record)


_handler: MdclogHandler | None = None


def setup_logging(level: str = "INFO", name: str = "mcw-xapp") -> Logger:
    """Install the mdclogpy handler on the root logger (once) and set the level."""
    global _handler
    if _handler is None:
        mdc = Logger(name=name)
        if "CONFIG_MAP_NAME" in os.environ or "POD_NAME" in os.environ:
            # In a pod (the chart sets POD_NAME, HOST_NAME, SERVICE_NAME, CONTAINER_NAME and
            # SYSTEM_NAME): add those MDC fields to every line, as O-RAN SC xApps do.
            mdc.mdclog_format_init(configmap_monitor=False)
        mdc.add_mdc("PID", str(os.getpid()))
        _handler = MdclogHandler(mdc)
        root = logging.getLogger()
        for h in list(root.handlers):
            root.removeHandler(h)
        root.addHandler(_handler)
    set_level(level)
    return _handler.mdc


def set_level(level: str) -> None:
    """Apply a ``controls.log_level`` value to both logging systems."""
    py_level, mdc_level = _LEVELS.get(level.upper(), _LEVELS["INFO"])
    logging.getLogger().setLevel(py_level)
    # Chatty libraries stay at WARNING unless we debug.
    for noisy in ("urllib3", "paho", "influxdb_client"):
        logging.getLogger(noisy).setLevel(max(py_level, logging.WARNING)
                                          if py_level > logging.DEBUG else py_level)
    if _handler is not None:
        _handler.mdc.set_level(mdc_level)
