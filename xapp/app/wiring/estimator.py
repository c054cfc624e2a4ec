"""The capacity estimator ``mcw run``'s loop asks: the signed model (with bounded exploration)
or the EWMA baseline."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from xapp.app.config import Controls
from xapp.core.ewma import EwmaEstimator
from xapp.core.exploration import ExploringEstimator
from xapp.core.forecast import CapacityEstimator
from xapp.core.workers import Worker

if TYPE_CHECKING:  # xapp.model's package imports scikit-learn (see build_estimator)
    from xapp.model.adaptive import FamilyCalibration

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EstimatorParts:
    """The estimator and what the metrics read of it."""

    estimator: CapacityEstimator
    #: The version of the model it runs (it may hot-reload), or ``ewma-baseline``.
    version: Callable[[], str]
    #: The capacity model's input-check counters (None for the EWMA baseline).
    counters: Callable[[], Mapping[str, int]] | None = None
    #: The capacity model's lower-bound coverage and multiplier per family (None for the EWMA).
    calibration: Callable[[], Mapping[str, FamilyCalibration]] | None = None


def build_estimator(choice: str, controls: Controls, stoppers: list[Callable[[], object]],
                    workers: list[Worker]) -> EstimatorParts:
    """``choice`` is ``--estimator``: ``model`` fails when the model does not load, ``auto``
    falls back to the EWMA baseline then, ``ewma`` does not try."""
    if choice in ("auto", "model"):
        try:
            # scikit-learn, scipy and pandas (some 1,700 modules, seconds to import): a process
            # on the EWMA baseline does without them.
            from xapp.model.online import ModelEstimator, ModelHolder

            holder = ModelHolder(controls.model.path, controls.model.public_key_file,
                                 plausible_mbps=controls.model.plausible_mbps)
            workers.append(holder.start(interval_s=controls.model.reload_check_s))
            stoppers.append(holder.stop)
            model = ModelEstimator(holder, stale_after_s=controls.loop.kpi_max_age_s * 2,
                                   level=controls.model.planning_level)
            log.info("capacity model %s loaded from %s", model.version, controls.model.path)
            # The model's forecasts, with bounded exploration where delivered throughput was
            # censored by the weights, so no WAT is locked out (xapp.core.exploration).
            return EstimatorParts(ExploringEstimator(model), lambda: str(model.version),
                                  model.counters.as_dict, model.calibration)
        except Exception as exc:
            if choice == "model":
                raise RuntimeError(f"capacity model not loadable: {exc}") from exc
            log.warning("capacity model not loadable (%s); using the EWMA baseline", exc)
    return EstimatorParts(EwmaEstimator(), lambda: "ewma-baseline")
