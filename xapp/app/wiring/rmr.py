"""RMR for ``mcw run``: the glue (A1 requests, health checks, ``A1_POLICY_QUERY``, RIC
indications, appmgr registration) when ``--rmr`` and the library allow it, its supervision,
and the A1 resync it makes possible."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping

from xapp.adapters.a1 import A1Handler, A1Resync
from xapp.adapters.e2.decoder_process import DecoderProcess
from xapp.adapters.rmr import RmrGlue, rmr_library_available
from xapp.app.config import POD_IP_ENV
from xapp.core.workers import Supervisor, Worker

log = logging.getLogger(__name__)


def build_rmr(mode: str, port: int, http_port: int, a1: A1Handler, resync: A1Resync,
              sdl_connected: Callable[[], bool], on_config_event: Callable[[], object],
              decoder: DecoderProcess | None, replica_id: str, sharded: bool
              ) -> tuple[RmrGlue | None, str]:
    """The glue, not started, and ""; or None and why RMR is off although asked for
    (``--rmr auto`` without librmr; "" with ``--rmr off``).  ``--rmr on`` without the
    library raises."""
    if mode == "off":
        return None, ""
    ok, why = rmr_library_available()
    if not ok:
        if mode == "on":
            raise RuntimeError(why)
        log.warning("RMR disabled: %s; A1 policies arrive only through SDL", why)
        return None, (f"--rmr auto without the RMR library ({why}): no A1 requests or health "
                      "checks over RMR; policies only from SDL")
    replica, http_endpoint = appmgr_identity(replica_id, sharded, http_port)
    glue = RmrGlue(a1, sdl_connected, port=port, on_config_event=on_config_event,
                   on_query_sent=resync.query_sent, indications=decoder,
                   log_level=logging.getLogger().level,
                   replica_id=replica, http_endpoint=http_endpoint)
    return glue, ""


def supervise_rmr(glue: RmrGlue, supervisor: Supervisor, decoder: DecoderProcess | None,
                  resync: A1Resync) -> None:
    """The started glue's workers under ``supervisor``, and the A1 resync's worker started
    (it queries the mediator over RMR and ends once the instances in force are the
    mediator's)."""
    decoder_workers = [] if decoder is None else decoder.workers()
    for worker in glue.workers():
        # The decoder out of its budget costs E2, not A1 and the loop (a pod restart).
        supervisor.add(worker, degrades="e2" if worker in decoder_workers else None)
    supervisor.watch("rmr-receive", glue.rmr_healthy)

    def resync_step() -> None:
        if resync.step():
            resyncing.stop()  # done: the worker ends (a stopped worker is healthy)

    resyncing = supervisor.add(Worker("mcw-a1-resync", resync_step, 1.0))
    resyncing.start()


def appmgr_identity(replica_id: str, sharded: bool, http_port: int,
                    environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(replica id, HTTP endpoint) this pod registers with at the appmgr
    (:func:`xapp.adapters.rmr.appmgr_register_body`): its own entry with several replicas,
    the frame's one shared entry ("", "") with one."""
    if not sharded:
        return "", ""
    env = os.environ if environ is None else environ
    pod_ip = env.get(POD_IP_ENV, "").strip()
    return replica_id, f"{pod_ip}:{http_port}" if pod_ip else ""
