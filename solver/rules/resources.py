"""Resource requests (cpu, memory, pods, extended resources): the knapsack dimensions every stage packs.

A class's size is its effective requests (``model.pod``: sidecars, overhead, pod-level resources); a
template's capacity is its allocatable after DaemonSet overhead (``rules.daemonsets``); an existing
node's is what its bound pods leave free.
"""

from __future__ import annotations

from model.resources import Resources
from solver.rules.base import Rule, Why


class ResourceFit(Rule):
    name = "resource requests"

    def explain(self, why: Why) -> str:
        if not why.admitted or why.fits:
            return ""
        problem = why.problem
        biggest = Resources({a: int(problem.template_alloc[why.admitted, i].max())
                             for i, a in enumerate(problem.axes)})
        short = why.pod_class.requests.exceeding(biggest)
        return (f"requests {why.pod_class.requests.format()} but the largest compatible instance type leaves "
                f"at most {', '.join(f'{r}={biggest.to_quantities().get(r, 0)}' for r in short)} "
                "after DaemonSet overhead")
