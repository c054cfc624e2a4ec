"""What the planning level and the adaptive factor are worth in closed loop.

Runs the shipped loop on the twin (``mcw twin --policy xapp --estimator model``, 1 s period,
seed 0) with the same model artifact under several planning settings and prints the ratio to
the oracle per scenario beside the EWMA's (the baseline, measured in the same run):

* ``level=0.1``: the former constant 10 % lower bound;
* ``level=0.3`` / ``level=0.5``: other constant levels;
* ``cost``: the level chosen by cost (``xapp.core.planning``), with the adaptive factor's learning
  rate ``eta`` 0 (frozen), 0.05, 0.1 (the default) and 0.2.

    OMP_NUM_THREADS=1 .venv/bin/python bench/bench_planning.py [--json] [--seeds 0 1 2]

The model is ``$MCW_MODEL`` (default ``models/default``), verified with
``$MCW_MODEL_PUBLIC_KEY_FILE`` (default the release key).
"""

from __future__ import annotations

import argparse
import json

from twin.policies import TwinOptions, run_with_oracle, summary
from twin.scenarios import build
from xapp.core.exploration import ExploringEstimator
from xapp.core.forecast import CapacityEstimator
from xapp.model import ModelEstimator, ModelHolder, default_model_path
from xapp.model.adaptive import AdaptiveLowerBound

SCENARIOS = ("wifi-walk", "lockin", "paper-static")
SETTINGS: tuple[tuple[str, str | float, float], ...] = (
    ("level 0.1", 0.1, 0.1), ("level 0.3", 0.3, 0.1), ("level 0.5", 0.5, 0.1),
    ("cost, eta 0", "cost", 0.0), ("cost, eta 0.05", "cost", 0.05),
    ("cost, eta 0.1 (default)", "cost", 0.1), ("cost, eta 0.2", "cost", 0.2))


def ratio(scenario: str, seed: int, estimator: CapacityEstimator | None) -> float:
    """The shipped loop's ratio to the oracle with ``estimator`` (None: the EWMA)."""
    scn = build(scenario, n_cpes=1, seed=seed)
    res = run_with_oracle(scn, "xapp", TwinOptions(), estimator=estimator)
    return float(summary(res)["ratio_to_oracle"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    args = ap.parse_args()
    holder = ModelHolder(default_model_path())
    rows: dict[str, dict[str, float]] = {}
    for seed in args.seeds:
        for name, setting in (("EWMA (baseline)", None), *((s[0], s[1:]) for s in SETTINGS)):
            key = f"{name} seed {seed}" if len(args.seeds) > 1 else name
            for scn in SCENARIOS:
                est: CapacityEstimator | None = None
                if setting is not None:
                    level, eta = setting
                    est = ExploringEstimator(ModelEstimator(
                        holder, adaptive=AdaptiveLowerBound(eta=eta), level=level))
                rows.setdefault(key, {})[scn] = round(ratio(scn, seed, est), 4)
            if not args.json:
                print(key, rows[key], flush=True)
    if args.json:
        print(json.dumps({"model": holder.current.version, "ratio_to_oracle": rows}, indent=2))


if __name__ == "__main__":
    main()
