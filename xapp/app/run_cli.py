"""``mcw run``: run the xApp process in the near-RT RIC.

:func:`configure` declares the flags (typed as :class:`~xapp.app.run_options.RunOptions`);
:func:`run` loads the configuration, starts :class:`~xapp.app.process.XappProcess` and, on
SIGTERM or SIGINT, stops it within ``--grace-s`` seconds.  It returns 0 once stopped, 1 when
start-up failed and 2 when the configuration is refused.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
from pathlib import Path

from xapp.app.config import ConfigError, load_config
from xapp.app.json_logs import setup_logging
from xapp.app.process import XappProcess
from xapp.app.run_options import RunOptions
from xapp.app.runner import tune_gc

log = logging.getLogger(__name__)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Run the multi-connectivity weights xApp: every control period, read per-WAT KPIs, "
        "forecast capacities, compute MPTCP WRR weights per CPE under the A1 policies in force "
        "and publish them to the CPE agents.  Serves /ric/v1/health/alive, "
        "/ric/v1/health/ready, /ric/v1/config and /metrics over HTTP.")
    parser.epilog = (
        "Environment: CONFIG_FILE (descriptor), MCW_<SECTION>_<KEY> overrides of controls "
        "(e.g. MCW_MQTT_HOST, MCW_LOOP_CONTROL_PERIOD_S, MCW_LOG_LEVEL), DBAAS_SERVICE_HOST/PORT "
        "(SDL), RMR_SEED_RT / RMR_RTG_SVC (RMR routes), HOSTNAME and SERVICE_* (appmgr "
        "registration), MCW_SCHEMAS_DIR.")
    parser.add_argument("--config", default=os.environ.get("CONFIG_FILE"),
                        help="config-file.json (default: $CONFIG_FILE; built-in defaults if "
                             "neither is set)")
    parser.add_argument("--schemas-dir", default=None,
                        help="directory with a1-policy-type-20100.json, a1-policy-type-20101.json "
                             "and controls.schema.json "
                             "(default: $MCW_SCHEMAS_DIR, /opt/mcw/schemas, the repo's schemas/)")
    parser.add_argument("--http-host", default="0.0.0.0", help="HTTP bind address")
    parser.add_argument("--http-port", type=int, default=8080, help="HTTP port (0: any free)")
    parser.add_argument("--rmr", choices=("auto", "on", "off"), default="auto",
                        help="RMR messaging: on fails without librmr_si.so, auto runs without "
                             "it (A1 disabled) when the library is absent (default: auto)")
    parser.add_argument("--rmr-port", type=int, default=4560, help="RMR data port")
    parser.add_argument("--sdl", choices=("redis", "memory"), default="redis",
                        help="state in SDL through ricsdl (DBAAS_SERVICE_HOST/PORT) or in memory "
                             "only (state is lost on restart)")
    parser.add_argument("--estimator", choices=("auto", "model", "ewma"), default="auto",
                        help="capacity forecasts from the model artifact (controls.model.path), "
                             "the EWMA baseline, or the model when it loads and EWMA otherwise")
    parser.add_argument("--kpi-file", type=Path, default=None,
                        help="lab mode: read KPIs from this JSON file instead of InfluxDB")
    parser.add_argument("--publish-file", type=Path, default=None,
                        help="lab mode: append weights to this JSON-lines file instead of MQTT")
    parser.add_argument("--grace-s", type=float, default=25.0,
                        help="shutdown deadline after SIGTERM (keep below the pod's "
                             "terminationGracePeriodSeconds)")
    parser.add_argument("--config-poll-s", type=float, default=2.0,
                        help="how often the config file is checked for changes")


def run(args: argparse.Namespace) -> int:
    opts = RunOptions.from_args(args)
    try:
        config = load_config(opts.config, schemas=opts.schemas_dir)
    except ConfigError as exc:
        print(f"mcw run: {exc}", flush=True)
        return 2
    setup_logging(config.controls.log_level, name=config.name)
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("signal %d received; stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    process: XappProcess | None = None
    try:
        process = XappProcess(opts, config)
        process.start()
        tune_gc()
    except Exception as exc:
        log.error("start-up failed: %s", exc)
        if process is not None:
            process.stop(opts.grace_s)
        return 1
    stop.wait()
    process.stop(opts.grace_s)
    return 0
