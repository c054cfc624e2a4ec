"""Online use of the model: the per-tick estimator and the hot-reloading model holder.

:class:`ModelEstimator` implements :class:`xapp.core.forecast.CapacityEstimator`: it cleans each
frame (infinite and out-of-range KPIs become NaN and are counted), updates the per-key history
and forecasts all rows of the tick in one batch per technology family.  A row with nothing
usable (no radio KPI and no throughput sample), or whose family has no model, gets a NaN
forecast: the weight engine treats the WAT as unknown.  It never raises on bad data.

:class:`ModelHolder` owns the current :class:`~xapp.model.artifact.LoadedModel` and swaps in a
new artifact only after it verified the signature, loaded it within bounds, made a finite
prediction on a probe frame and passed the physics check (:mod:`xapp.model.physics`: forecasts
on a reference input set finite and within each WAT's plausible range); a refused artifact is
logged with the reason and counted
(``model_reload_failures`` among the estimator's counters, which the xApp exports as
``mcw_estimator_events``), and the old model stays.  Nothing a file in the model directory
holds can stop the reload thread: it outlives any exception of a reload.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np
import pandas as pd
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from numpy.typing import NDArray

from xapp.core.forecast import CapacityForecast, KpiFrame
from xapp.core.kpis import FAMILIES, clean_columns, family_of, normalise_wat
from xapp.core.planning import COST, check_level, cost_levels
from xapp.core.workers import Worker, WorkerState
from xapp.model.adaptive import AdaptiveLowerBound, FamilyCalibration
from xapp.model.artifact import (
    LoadedModel,
    PublicKey,
    card_path,
    load,
    release_public_key_path,
    resolve,
    signature_path,
)
from xapp.model.errors import ArtifactError
from xapp.model.features import (
    DIFF_FIELDS,
    RADIO_FIELDS,
    TRANSPORT_FIELDS,
    FeatureState,
    capacity_sample,
    matrix,
)
from xapp.model.physics import check_forecasts, check_plausible
from xapp.model.signing import load_public_key

log = logging.getLogger(__name__)

Array = NDArray[np.float64]

#: Numeric column of a :class:`KpiFrame` carrying the cell identity (see ``cell_code``).
CELL_COLUMN = "cell_id"
_INPUT_FIELDS: tuple[str, ...] = tuple(sorted(
    {f for fam in FAMILIES for f in RADIO_FIELDS[fam]} | set(DIFF_FIELDS) | set(TRANSPORT_FIELDS)))


def default_model_path() -> Path:
    """``$MCW_MODEL`` if set, else ``models/default/`` shipped with the repository."""
    import os

    env = os.environ.get("MCW_MODEL")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "models" / "default"


def default_public_key_path() -> Path:
    """``$MCW_MODEL_PUBLIC_KEY_FILE`` if set (the same variable overrides
    ``controls.model.public_key_file`` of ``mcw run``), else the project's release key
    shipped with the repository, which signs ``models/default``."""
    import os

    env = os.environ.get("MCW_MODEL_PUBLIC_KEY_FILE")
    return Path(env) if env else release_public_key_path()


@dataclass
class ReloadCounters:
    """Cumulative counts of a :class:`ModelHolder`'s reloads."""

    model_reloads: int = 0
    model_reload_failures: int = 0


@dataclass
class EstimatorCounters:
    """Cumulative counts for Prometheus (names are metric suffixes); with ``reload`` set, the
    model holder's reload counts are reported with them."""

    frames: int = 0
    rows: int = 0
    values_non_finite: int = 0
    values_out_of_range: int = 0
    rows_unknown_wat: int = 0
    rows_no_kpis: int = 0
    rows_no_model: int = 0
    stale_resets: int = 0
    predict_errors: int = 0
    reload: ReloadCounters | None = field(default=None, repr=False, compare=False)

    def as_dict(self) -> dict[str, int]:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "reload"}
        if self.reload is not None:
            out.update(model_reloads=self.reload.model_reloads,
                       model_reload_failures=self.reload.model_reload_failures)
        return out


class ModelHolder:
    """The current model, reloaded atomically when the artifact (or ``LATEST``) changes.

    Safe for concurrent use: :attr:`current` may be read from any thread while :meth:`poll`
    runs in another.

    Parameters
    ----------
    path : str or Path
        An artifact file or a directory with a ``LATEST`` file.
    public_key : Ed25519PublicKey, str or Path, default=None
        The key (or key file) whose signature an artifact must carry; None means
        :func:`default_public_key_path`.  A key file is read once, here: rotating the trusted
        key is a restart (a writable key file must not be able to change whom the xApp trusts).

    plausible_mbps : mapping, default=None
        The most each WAT's forecast may be on the reference inputs (Mbps), over the peak
        rates of :data:`xapp.model.physics.PEAK_MBPS`.

    Raises
    ------
    ArtifactError
        If the first artifact cannot be loaded (there is no old model to keep).
    ValueError
        If ``plausible_mbps`` names an unknown WAT or a value that is not positive.
    """

    def __init__(self, path: str | Path, public_key: PublicKey | None = None,
                 plausible_mbps: Mapping[str, float] | None = None) -> None:
        self.path = Path(path)
        self.plausible_mbps = check_plausible(plausible_mbps or {})
        key = default_public_key_path() if public_key is None else public_key
        self.public_key = key if isinstance(key, Ed25519PublicKey) else load_public_key(key)
        self.counters = ReloadCounters()
        self.last_error = ""
        self._lock = threading.Lock()
        self._model = self._checked_load()
        self._stamp = self._fingerprint()
        #: Polls for a new artifact once started (:meth:`start`).
        self.worker: Worker | None = None

    @property
    def current(self) -> LoadedModel:
        with self._lock:
            return self._model

    @property
    def reloads(self) -> int:
        return self.counters.model_reloads

    @property
    def reload_failures(self) -> int:
        return self.counters.model_reload_failures

    def _fingerprint(self) -> tuple[object, ...]:
        stamp: list[object] = []
        try:
            target = resolve(self.path)
            latest = self.path / "LATEST" if self.path.is_dir() else None
            # The card and signature too: a signature that arrives after its artifact (a
            # copy file by file) makes the next poll try again.
            for p in (latest, target, card_path(target), signature_path(target)):
                if p is not None:
                    try:
                        st = p.stat()
                    except OSError:
                        stamp.extend([str(p), "missing"])
                        continue
                    stamp.extend([str(p), st.st_mtime_ns, st.st_size, st.st_ino])
        except (OSError, ArtifactError):
            stamp.append("unreadable")
        return tuple(stamp)

    def _checked_load(self) -> LoadedModel:
        model = load(self.path, public_key=self.public_key)
        try:
            probe = ModelEstimator(model)
            forecast = probe.step(probe_frame(tuple(model.models)))
        except Exception as exc:  # the loader checked the shape; this is the last guard
            raise ArtifactError(f"{model.path}: probe forecast failed: {exc}") from exc
        if not np.isfinite(forecast.median_mbps).all() or probe.counters.predict_errors:
            raise ArtifactError(f"{model.path}: probe forecast is not finite")
        reference = ModelEstimator(model)
        check_forecasts(reference.step, self.plausible_mbps, str(model.path))
        if reference.counters.predict_errors:
            raise ArtifactError(f"{model.path}: the physics check's forecasts failed")
        return model

    def poll(self) -> bool:
        """Reload if the artifact changed; True when a new model was swapped in.  Never raises
        on a bad artifact: it is counted, logged with the reason, and the old model stays."""
        stamp = self._fingerprint()
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            new = self._checked_load()
        except Exception as exc:  # ArtifactError, or a bug: either way the old model stays
            self.counters.model_reload_failures += 1
            self.last_error = str(exc)
            log.error("model reload refused, keeping %s: %s", self.current.version, exc)
            return False
        with self._lock:
            old, self._model = self._model, new
        self.counters.model_reloads += 1
        self.last_error = ""
        log.info("model reloaded: %s -> %s (key %s)", old.version, new.version, new.key_id)
        return True

    def start(self, interval_s: float = 5.0) -> Worker:
        """Poll every ``interval_s`` in a supervised worker until :meth:`stop`."""
        if self.worker is None:
            self.worker = Worker("mcw-model-reload", self.poll, interval_s)
        return self.worker.start()

    @property
    def alive(self) -> bool:
        """Whether the reload worker runs (False before :meth:`start` and after :meth:`stop`)."""
        return self.worker is not None and self.worker.status().state is WorkerState.OK

    def stop(self) -> None:
        if self.worker is not None:
            self.worker.stop()


def probe_frame(families: tuple[str, ...]) -> KpiFrame:
    """A small plausible frame, one row per family, used to sanity-check a new model."""
    wat_of = {"cellular": "nr", "wifi": "wifi", "lifi": "lifi"}
    wats = [wat_of[f] for f in families]
    n = len(wats)
    values = {"delivered_mbps": np.full(n, 50.0), "rtt_ms": np.full(n, 10.0),
              "sinr_db": np.full(n, 20.0), "snr_db": np.full(n, 25.0),
              "rsrp_dbm": np.full(n, -80.0), "cqi": np.full(n, 12.0)}
    return KpiFrame(time_s=0.0, cpe=np.array([f"probe-{i}" for i in range(n)]),
                    wat=np.array(wats), values=values)


class ModelEstimator:
    """Per-tick capacity forecasts for every (cpe, wat, direction) row of a frame.

    Not safe for concurrent use (one control loop owns it); the model it reads may be swapped
    by a :class:`ModelHolder` at any time.

    Parameters
    ----------
    model : LoadedModel or ModelHolder
    stale_after_s : float, default=10.0
        History of a key unseen for longer is dropped (and its adaptive multiplier).
    adaptive : AdaptiveLowerBound or None, default=None
        Online calibration of the planned capacity per (CPE, WAT) (:mod:`xapp.model.adaptive`);
        None means one with its defaults.  ``AdaptiveLowerBound(eta=0)`` keeps the model's
        static calibration and still measures its coverage.
    level : "cost" or float, default="cost"
        The quantile of each WAT's capacity returned as ``lower_mbps``, which the weight
        engine plans with: ``"cost"`` picks it per row from what an error costs under WRR (the
        WAT's forecast share of its CPE's total, :mod:`xapp.core.planning`); a number
        in [0.01, 0.5] is one level for every row.
    """

    def __init__(self, model: LoadedModel | ModelHolder, stale_after_s: float = 10.0,
                 adaptive: AdaptiveLowerBound | None = None, level: str | float = COST) -> None:
        self.model = model
        self.level = check_level(level)
        self.state = FeatureState(stale_after_s=stale_after_s)
        self.counters = EstimatorCounters(
            reload=model.counters if isinstance(model, ModelHolder) else None)
        self.adaptive = AdaptiveLowerBound() if adaptive is None else adaptive
        self._adaptive_for: LoadedModel | None = None
        self._wat_cache: tuple[object, NDArray[np.str_]] | None = None
        self._cpe_cache: tuple[object, NDArray[np.intp]] | None = None

    def calibration(self) -> dict[str, FamilyCalibration]:
        """Running coverage and mean multiplier of the lower bound per family (any thread)."""
        return self.adaptive.snapshot()

    @property
    def version(self) -> str:
        return self._loaded().version

    def _loaded(self) -> LoadedModel:
        return self.model.current if isinstance(self.model, ModelHolder) else self.model

    def _families(self, wat: NDArray[np.str_]) -> NDArray[np.str_]:
        cache = self._wat_cache
        if cache is not None and cache[0] is wat:
            return cache[1]
        lut: dict[str, str] = {}
        out = np.empty(len(wat), dtype=object)
        for i, w in enumerate(wat.tolist()):
            fam = lut.get(w)
            if fam is None:
                canon = normalise_wat(str(w))
                fam = lut[w] = (family_of(canon) or "") if canon else ""
            out[i] = fam
        fams = out.astype(str)
        self._wat_cache = (wat, fams)
        return fams

    def _cpe_codes(self, cpe: NDArray[np.str_]) -> NDArray[np.intp]:
        cache = self._cpe_cache
        if cache is not None and cache[0] is cpe:
            return cache[1]
        codes = np.asarray(pd.factorize(cpe)[0], dtype=np.intp)
        self._cpe_cache = (cpe, codes)
        return codes

    def step(self, frame: KpiFrame) -> CapacityForecast:
        """Ingest one tick and forecast the next period for the same rows (Mbps, NaN unknown)."""
        n = len(frame)
        c = self.counters
        c.frames += 1
        c.rows += n
        lower = np.full(n, np.nan)
        if n == 0:
            return CapacityForecast(np.full(n, np.nan), lower)
        raw = {name: frame.values[name] for name in (*_INPUT_FIELDS, "delivered_mbps",
                                                     "saturated") if name in frame.values}
        values, counts = clean_columns(raw)
        c.values_non_finite += sum(counts.non_finite.values())
        c.values_out_of_range += sum(counts.out_of_range.values())
        fams = self._families(frame.wat)
        known = fams != ""
        c.rows_unknown_wat += int((~known).sum())
        nan = np.full(n, np.nan)
        delivered = values.get("delivered_mbps", nan)
        saturated = values.get("saturated", nan)
        sample = capacity_sample(delivered, saturated)
        cell = frame.column(CELL_COLUMN)
        times = np.full(n, float(frame.time_s))
        idx = self.state.slots(frame.series, frame.wat)
        before = self.state.stale_resets
        kpis = {k: v for k, v in values.items() if k not in ("delivered_mbps", "saturated")}
        feats = self.state.update(idx, times, sample, kpis, cell)
        c.stale_resets += self.state.stale_resets - before

        loaded = self._loaded()
        adaptive = self.adaptive
        if loaded is not self._adaptive_for:
            self._adaptive_for = loaded
            adaptive.reset()
        by_family = {fam: rows for fam in FAMILIES
                     if len(rows := np.flatnonzero(fams == fam))}
        adaptive.observe(idx, fams, delivered, saturated, ~np.isnan(feats["gap_s"]))
        center = np.full(n, np.nan)
        scale = np.full(n, np.nan)
        forecast: dict[str, NDArray[np.intp]] = {}
        for fam, rows in by_family.items():
            usable = np.isfinite(feats["exp_mean"][rows])
            for f in RADIO_FIELDS[fam]:
                col = values.get(f)
                if col is not None:
                    usable |= np.isfinite(col[rows])
            c.rows_no_kpis += int((~usable).sum())
            rows = rows[usable]
            model = loaded.models.get(fam)
            if model is None:
                c.rows_no_model += len(rows)
                continue
            if len(rows) == 0:
                continue
            X = matrix(feats, loaded.feature_names[fam], rows)
            try:
                center[rows], scale[rows] = model.predict_center_scale(X)
            except Exception:  # a model that cannot predict must not stop the control loop
                c.predict_errors += len(rows)
                log.exception("prediction failed for family %s", fam)
                continue
            forecast[fam] = rows
        median = np.maximum(center, 0.0)
        level = (cost_levels(center, self._cpe_codes(frame.series)) if self.level == COST
                 else np.full(n, self.level))
        for fam, rows in forecast.items():
            slots = idx[rows]
            mult = loaded.models[fam].multiple(level[rows])
            bound = center[rows] - adaptive.factor(fam, slots) * mult * scale[rows]
            lower[rows] = np.clip(bound, 0.0, median[rows])
            adaptive.remember(slots, lower[rows], level[rows], mult > 0.0)
        adaptive.publish(tuple(by_family))
        return CapacityForecast(median, lower)
