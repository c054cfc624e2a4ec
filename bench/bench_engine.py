"""Weight engine: exact integer search against naive proportional rounding, same inputs.

Prints, for random capacity vectors and for the paper's 342/1190/12 Mbps case, the fluid
aggregate T(w) as a fraction of the capacity sum for both methods, and the time per CPE of
the single-CPE engine (``decide``) and of the batch engine (``optimal_weights_batch``).

    .venv/bin/python bench/bench_engine.py [--cpes 10000] [--json]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from xapp.core.policy import Policy
from xapp.core.weights import WatState, decide, fluid_aggregate_batch, optimal_weights_batch


def proportional_rounding(capacity: np.ndarray, max_weight: int) -> np.ndarray:
    """The obvious method: scale so the largest WAT gets max_weight, round, keep >= 1."""
    scaled = capacity / capacity.max(axis=1, keepdims=True) * max_weight
    return np.where(capacity > 0, np.maximum(1, np.rint(scaled)), 0).astype(np.int64)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpes", type=int, default=10_000)
    parser.add_argument("--max-weight", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    rng = np.random.default_rng(args.seed)
    # 5G 50-400 Mbps, Wi-Fi 50-1400 Mbps, LiFi 1-25 Mbps: the spread of the paper's testbed
    caps = np.column_stack([rng.uniform(50, 400, args.cpes), rng.uniform(50, 1400, args.cpes),
                            rng.uniform(1, 25, args.cpes)])
    total = caps.sum(axis=1)

    t0 = time.perf_counter()
    exact = optimal_weights_batch(caps, args.max_weight)
    batch_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    naive = proportional_rounding(caps, args.max_weight)
    naive_s = time.perf_counter() - t0

    exact_ratio = fluid_aggregate_batch(caps, exact) / total
    naive_ratio = fluid_aggregate_batch(caps, naive) / total

    single = 300
    t0 = time.perf_counter()
    for row in caps[:single]:
        decide({w: WatState(float(c)) for w, c in zip(("nr", "wifi", "lifi"), row, strict=True)},
               Policy(max_weight=args.max_weight))
    decide_ms = (time.perf_counter() - t0) / single * 1e3

    paper = np.array([[342.0, 1190.0, 12.0]])
    paper_exact = float(fluid_aggregate_batch(paper, optimal_weights_batch(paper))[0])
    paper_naive = float(fluid_aggregate_batch(paper, proportional_rounding(paper, 100))[0])

    figures = {
        "cpes": args.cpes,
        "exact_mean_ratio_to_sum": round(float(exact_ratio.mean()), 5),
        "exact_min_ratio_to_sum": round(float(exact_ratio.min()), 5),
        "naive_mean_ratio_to_sum": round(float(naive_ratio.mean()), 5),
        "naive_min_ratio_to_sum": round(float(naive_ratio.min()), 5),
        "exact_never_worse": bool((exact_ratio >= naive_ratio - 1e-12).all()),
        "batch_ms_per_1000_cpes": round(batch_s / args.cpes * 1e6, 2),
        "naive_ms_per_1000_cpes": round(naive_s / args.cpes * 1e6, 3),
        "decide_ms_per_cpe": round(decide_ms, 3),
        "paper_exact_mbps": paper_exact,
        "paper_naive_mbps": paper_naive,
        "paper_sum_mbps": 1544.0,
    }
    if args.json:
        print(json.dumps(figures))
        return
    print(f"{args.cpes} random CPEs, max_weight {args.max_weight}")
    print(f"  exact search   T/sum mean {figures['exact_mean_ratio_to_sum']:.4f}  "
          f"min {figures['exact_min_ratio_to_sum']:.4f}  "
          f"{figures['batch_ms_per_1000_cpes']} ms per 1000 CPEs (batch)")
    print(f"  prop. rounding T/sum mean {figures['naive_mean_ratio_to_sum']:.4f}  "
          f"min {figures['naive_min_ratio_to_sum']:.4f}  (baseline)")
    print(f"  exact never worse than rounding: {figures['exact_never_worse']}")
    print(f"  decide() for one CPE: {figures['decide_ms_per_cpe']} ms")
    print(f"paper 342/1190/12: exact {paper_exact:.1f} Mbps, rounding {paper_naive:.1f} Mbps, "
          f"sum 1544")


if __name__ == "__main__":
    main()
