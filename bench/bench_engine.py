"""Weight engine: exact integer search against naive proportional rounding, same inputs.

Prints, for random capacity vectors and for the paper's 342/1190/12 Mbps case, the fluid
aggregate T(w) as a fraction of the capacity sum for both methods, and the time per CPE of
the single-CPE engine (``decide``) and of the batch engine (``optimal_weights_batch``).  Also
the loop's decision (``decide_batch``) for both directions of the fleet as one call over the
(CPE, direction) rows against one call per direction, as the loop makes it: whether merging
the directions' passes would pay.

    .venv/bin/python bench/bench_engine.py [--cpes 10000] [--json]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from xapp.core.decisions import decide_batch
from xapp.core.policy import Policy
from xapp.core.weights import WatState, decide, fluid_aggregate_batch, optimal_weights_batch


def proportional_rounding(capacity: np.ndarray, max_weight: int) -> np.ndarray:
    """The obvious method: scale so the largest WAT gets max_weight, round, keep >= 1."""
    scaled = capacity / capacity.max(axis=1, keepdims=True) * max_weight
    return np.where(capacity > 0, np.maximum(1, np.rint(scaled)), 0).astype(np.int64)


def _decide_ms(caps: np.ndarray, calls: int, max_weight: int, repeat: int = 5) -> float:
    """Best of ``repeat``: ``decide_batch`` over ``caps`` in ``calls`` equal calls, in ms."""
    policy = Policy(max_weight=max_weight)
    parts = np.array_split(caps, calls)
    ok = [np.ones(p.shape, dtype=bool) for p in parts]
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for p, m in zip(parts, ok, strict=True):
            decide_batch(("nr", "wifi", "lifi"), p, p * 0.9, m, m, np.full(p.shape, np.nan),
                         np.full(p.shape, np.nan), policy, np.ones(p.shape, dtype=np.int64), m,
                         m, m[:, 0])
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


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

    # both directions' rows (the uplink a fraction of the downlink): one call, or one each
    both = np.concatenate([caps, caps * rng.uniform(0.2, 1.0, caps.shape)])
    one_call_ms = _decide_ms(both, 1, args.max_weight)
    per_direction_ms = _decide_ms(both, 2, args.max_weight)

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
        "both_directions_one_call_ms": round(one_call_ms, 1),
        "both_directions_per_direction_ms": round(per_direction_ms, 1),
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
    print(f"  decide_batch, both directions: {one_call_ms:.1f} ms in one call over "
          f"{2 * args.cpes} rows, {per_direction_ms:.1f} ms in one call per direction")
    print(f"paper 342/1190/12: exact {paper_exact:.1f} Mbps, rounding {paper_naive:.1f} Mbps, "
          f"sum 1544")


if __name__ == "__main__":
    main()
