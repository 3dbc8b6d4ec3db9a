"""Lower bounds that hold under Kubernetes' own rules when the compiled model is stricter than Kubernetes.

``relaxation`` turns a batch into a model every plan the verifier accepts fits (only rules in their exact form,
plus what Kubernetes' hostname rules certainly imply); ``nodeshare`` bounds the cost of that model's plans
from below with per-node prices that know per-node counters (a node holding one anti-affine pod pays for a
whole node, not a share of one). ``constrained_bound`` is the two together.
"""

from __future__ import annotations

from solver.bounds.nodeshare import constrained_bound, node_share_bound, relaxation_bound
from solver.bounds.relaxation import Relaxation, from_problem, recompiled, relaxes_in_place

__all__ = ["Relaxation", "constrained_bound", "from_problem", "node_share_bound", "recompiled", "relaxation_bound",
           "relaxes_in_place"]
