"""The twin: an evaluation tool for MPTCP WRR weight policies (not part of the xApp runtime).

Scenarios (:mod:`twin.scenarios`) give per-WAT capacity traces; the fluid simulation
(:mod:`twin.fluid`) turns weights over time into delivered throughput; policies
(:mod:`twin.policies`) produce the weights, from the oracle to the paper's probes to the
xApp's estimator and weight engine.  The xApp never imports this package.
"""

from twin.scenarios import Scenario, ScenarioError, build

__all__ = ["Scenario", "ScenarioError", "build"]
