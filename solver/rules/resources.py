"""Resource requests (cpu, memory, pods, extended resources): the knapsack dimensions every stage packs.

A class's size is its effective requests (``model.pod``: sidecars, overhead, pod-level resources); a
template's capacity is its allocatable after DaemonSet overhead (``rules.daemonsets``); an existing
node's is what its bound pods leave free.
"""

from __future__ import annotations

from model.resources import Resources
from solver.rules.base import Rule, Why

GPU = "nvidia.com/gpu"


class ResourceFit(Rule):
    name = "resource requests"

    def explain(self, why: Why) -> str:
        if not why.admitted or why.fits:
            return ""
        problem = why.problem
        biggest = Resources({a: int(problem.template_alloc[why.admitted, i].max())
                             for i, a in enumerate(problem.axes)})
        short = why.pod_class.requests.exceeding(biggest)
        catalog = problem.snapshot.instance_types
        absent = [r for r in short if not any(it.capacity.get(r, 0) for it in catalog)]
        if absent:  # not a matter of size or overhead: nothing in the catalog has the resource at all
            example = "; fixtures/catalogs/aws-like.yaml has GPU types" if GPU in absent else ""
            return (f"requests {', '.join(f'{r}={why.pod_class.requests.to_quantities()[r]}' for r in absent)} but "
                    f"no instance type of the catalog ({len(catalog)} types) has {', '.join(absent)}: solve with a "
                    f"catalog that has it (--catalog FILE{example})")
        return (f"requests {why.pod_class.requests.format()} but the largest compatible instance type leaves "
                f"at most {', '.join(f'{r}={biggest.to_quantities().get(r, 0)}' for r in short)} "
                "after DaemonSet overhead")
