"""The plan verifier: checks a ProvisioningPlan against the snapshot with Kubernetes' own predicates,
independently of how the CP-SAT model encodes them. Every solver test runs it on every plan.

It checks the final state, order-independently: every pair of pods on a node, whichever came first."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable

from model import labels as wk
from model.affinity import LabelSelector, PodAffinityTerm, TopologySpreadConstraint
from model.instancetype import InstanceType
from model.labels import HOSTNAME
from model.plan import ProvisioningPlan
from model.pod import Pod
from model.resources import Resources
from model.snapshot import Snapshot
from model.taints import Taint, untolerated
from solver.inflight import node_views
from solver.rules.antiaffinity import repels
from solver.rules.limits import NODES, pool_usage
from solver.rules.minvalues import shortfalls
from solver.rules.ports import ports_clash

PRICE_TOLERANCE = 1e-6


def _fit_violations(where: str, pods: list[Pod], free: Resources) -> list[str]:
    total = Resources()
    for pod in pods:
        total = total + pod.requests
    over = total.exceeding(free)
    return [f"{where}: pods request {r}={total.to_quantities()[r]} but only "
            f"{free.to_quantities().get(r, '0')} is free" for r in over]


def _placement_violations(where: str, pod: Pod, labels: dict[str, str], taints: list) -> list[str]:  # type: ignore[type-arg]
    out = []
    if not pod.accepts_labels(labels):
        out.append(f"{where}: pod {pod.key} node selector / required node affinity rejects the node's labels")
    missing = untolerated(pod.tolerations, taints)
    if missing:
        out.append(f"{where}: pod {pod.key} does not tolerate taint(s) "
                   + ", ".join(t.describe() for t in missing))
    return out


def _pairwise_violations(where: str, placed: list[Pod], resident: list[Pod],
                         namespaces: dict[str, dict[str, str]]) -> list[str]:
    """Hostname anti-affinity (either direction) and host-port clashes among everything on one node."""
    out = []
    everyone = resident + placed
    for i, pod in enumerate(placed):
        for other in everyone[: len(resident) + i]:
            if repels(pod, other, namespaces):
                out.append(f"{where}: pods {pod.key} and {other.key} violate required pod anti-affinity on the node")
            if ports_clash(pod.host_ports, other.host_ports):
                out.append(f"{where}: pods {pod.key} and {other.key} bind the same host port")
    return out


def _matching(members: list[Pod], namespace: str, selector: LabelSelector) -> int:
    return sum(1 for p in members if p.namespace == namespace and selector.matches(p.labels))


def _final_nodes(snapshot: Snapshot, plan: ProvisioningPlan, pods: dict[str, Pod]
                 ) -> tuple[dict[str, tuple[dict[str, str], list[Pod]]], dict[str, str]]:
    """Every node after the plan (labels incl. hostname, pods) and where each planned pod lands."""
    nodes: dict[str, tuple[dict[str, str], list[Pod]]] = {}
    catalog = {it.name: it for it in snapshot.instance_types}
    for view in node_views(snapshot):  # in-flight NodeClaims are nodes too
        node = view.node
        if not node.deleting:
            nodes[node.name] = ({HOSTNAME: node.name, **node.labels}, snapshot.pods_on(node.name))
    where: dict[str, str] = {}
    for claim in plan.node_claims:
        it = catalog.get(claim.instance_type)
        labels = {HOSTNAME: claim.name, **claim.labels, **(it.labels if it else {}), wk.ZONE: claim.zone}
        nodes[claim.name] = (labels, [pods[k] for k in claim.pods if k in pods])
        where.update((k, claim.name) for k in claim.pods if k in pods)
    for assignment in plan.existing_nodes:
        if assignment.name in nodes:
            nodes[assignment.name][1].extend(pods[k] for k in assignment.pods if k in pods)
            where.update((k, assignment.name) for k in assignment.pods if k in pods)
    return nodes, where


def _domain_index(nodes: dict[str, tuple[dict[str, str], list[Pod]]]) -> Callable[[str, str | None], list[Pod]]:
    """Pods per value of a topology key (None: nodes without the key), indexed once per key, so every
    check looks at its own domain instead of the whole cluster (20,000 pods × 3,000 nodes otherwise)."""
    index: dict[str, dict[str | None, list[Pod]]] = {}

    def pods_in(key: str, value: str | None) -> list[Pod]:
        if key not in index:
            by_value: dict[str | None, list[Pod]] = {}
            for node_labels, members in nodes.values():
                by_value.setdefault(node_labels.get(key), []).extend(members)
            index[key] = by_value
        return index[key].get(value, [])

    return pods_in


def _spread_counts(pod: Pod, spread: TopologySpreadConstraint, selector: LabelSelector,
                   nodes: dict[str, tuple[dict[str, str], list[Pod]]], taints: dict[str, list[Taint]]
                   ) -> dict[str, int]:
    """Matching pods per domain the pod's spread constraint counts (eligible nodes only: node affinity
    unless nodeAffinityPolicy Ignore, tolerated taints if nodeTaintsPolicy Honor); ``selector`` includes
    the spread's matchLabelKeys."""
    counts: dict[str, int] = {}
    for name, (node_labels, members) in nodes.items():
        domain = node_labels.get(spread.topology_key)
        if domain is None or not (spread.node_affinity_policy == "Ignore" or pod.accepts_labels(node_labels)):
            continue
        if spread.node_taints_policy == "Honor" and untolerated(pod.tolerations, taints.get(name, [])):
            continue
        counts[domain] = counts.get(domain, 0) + _matching(members, pod.namespace, selector)
    return counts


def _topology_violations(snapshot: Snapshot, plan: ProvisioningPlan, pods: dict[str, Pod]) -> list[str]:
    """Topology spread (DoNotSchedule) and required pod (anti-)affinity, on the final state, for any
    topology key: a domain is every node sharing the key's value; counts include pods already running.
    Spread counts depend only on (namespace, selector, key, node requirements): computed once per such key."""
    nodes, where = _final_nodes(snapshot, plan, pods)
    namespaces = {ns.name: ns.labels for ns in snapshot.namespaces}
    everyone = [(labels, pod) for labels, members in nodes.values() for pod in members]
    pods_in = _domain_index(nodes)
    taints = {v.node.name: list(v.node.taints) for v in node_views(snapshot)}
    for claim in plan.node_claims:
        pool = snapshot.nodepool(claim.node_pool)
        taints[claim.name] = pool.taints if pool else []
    spread_cache: dict[Hashable, dict[str, int]] = {}
    out = []
    for key, node_name in sorted(where.items()):
        pod = pods[key]
        labels = nodes[node_name][0]
        for spread in pod.topology_spread:
            selector = spread.selector_for(pod.labels)
            if spread.when_unsatisfiable != "DoNotSchedule" or not selector:
                continue
            cache_key = (pod.namespace, selector, spread.topology_key,
                         None if spread.node_affinity_policy == "Ignore" else pod.node_requirements(),
                         pod.tolerations if spread.node_taints_policy == "Honor" else None)
            if cache_key not in spread_cache:
                spread_cache[cache_key] = _spread_counts(pod, spread, selector, nodes, taints)
            counts = spread_cache[cache_key]
            if spread.topology_key not in labels:
                out.append(f"node {node_name}: pod {key} topology spread on {spread.topology_key}: the node has "
                           "no such label (DoNotSchedule)")
                continue
            own = counts.get(labels[spread.topology_key], 0)
            floor = 0 if spread.min_domains and len(counts) < spread.min_domains else min(counts.values(), default=0)
            if own - floor > spread.max_skew:
                out.append(f"node {node_name}: pod {key} topology spread on {spread.topology_key} has skew "
                           f"{own - floor} > maxSkew {spread.max_skew}")
        for term in pod.pod_anti_affinity:
            domain = labels.get(term.topology_key)
            if domain is None:
                continue
            for other in pods_in(term.topology_key, domain):
                if other.key != key and term.selects(pod.namespace, pod.labels, other.namespace, other.labels,
                                                     namespaces.get(other.namespace)):
                    out.append(f"node {node_name}: pod {key} anti-affinity on {term.topology_key} is violated "
                               f"by {other.key}")
        for term in pod.pod_affinity:
            def selected(other: Pod, term: PodAffinityTerm = term, pod: Pod = pod) -> bool:
                return other.key != pod.key and term.selects(pod.namespace, pod.labels, other.namespace,
                                                             other.labels, namespaces.get(other.namespace))
            if any(selected(other) for other in pods_in(term.topology_key, labels.get(term.topology_key))):
                continue
            self_match = term.selects(pod.namespace, pod.labels, pod.namespace, pod.labels)
            if self_match and not any(selected(other) for _, other in everyone):
                continue  # the first of a self-affine group may go anywhere
            out.append(f"node {node_name}: pod {key} affinity on {term.topology_key} finds no matching pod "
                       f"in its domain {labels.get(term.topology_key)}")
    out.extend(_running_anti_affinity_violations(everyone, where, pods_in, namespaces))
    return out


def _running_anti_affinity_violations(everyone: list[tuple[dict[str, str], Pod]], where: dict[str, str],
                                      pods_in: Callable[[str, str | None], list[Pod]],
                                      namespaces: dict[str, dict[str, str]]) -> list[str]:
    """Anti-affinity is symmetric: a running pod's term repels placed pods from its domain (hostname
    pairs are checked per node by ``_pairwise_violations``)."""
    out = []
    for labels, resident in everyone:
        if resident.key in where:
            continue
        for term in resident.pod_anti_affinity:
            domain = labels.get(term.topology_key)
            if term.topology_key == HOSTNAME or domain is None:
                continue
            for other in pods_in(term.topology_key, domain):
                if other.key in where and term.selects(resident.namespace, resident.labels, other.namespace,
                                                       other.labels, namespaces.get(other.namespace)):
                    out.append(f"pod {other.key} lands in {term.topology_key}={domain}, where running pod "
                               f"{resident.key}'s required anti-affinity repels it")
    return out


def verify(snapshot: Snapshot, plan: ProvisioningPlan) -> list[str]:
    """Every violation found, as one line each (empty = valid)."""
    violations: list[str] = []
    pods = {p.key: p for p in snapshot.pods}
    pending = {p.key for p in snapshot.pending_pods()}
    seen: Counter[str] = Counter()
    for claim in plan.node_claims:
        seen.update(claim.pods)
    for assigned in plan.existing_nodes:
        seen.update(assigned.pods)
    seen.update(u.pod for u in plan.unschedulable)
    for key in sorted(pending - seen.keys()):
        violations.append(f"pending pod {key} is missing from the plan")
    for key, n in sorted(seen.items()):
        if key not in pending:
            violations.append(f"plan places {key}, which is not a pending pod in the snapshot")
        elif n > 1:
            violations.append(f"pod {key} appears {n} times in the plan")
    for u in plan.unschedulable:
        if not u.reason.strip():
            violations.append(f"unschedulable pod {u.pod} has no reason")
    catalog: dict[str, InstanceType] = {it.name: it for it in snapshot.instance_types}
    namespaces = {ns.name: ns.labels for ns in snapshot.namespaces}
    added: dict[str, Resources] = {}
    total = 0.0
    for claim in plan.node_claims:
        where = f"nodeClaim {claim.name}"
        pool = snapshot.nodepool(claim.node_pool)
        it = catalog.get(claim.instance_type)
        if pool is None:
            violations.append(f"{where}: NodePool {claim.node_pool} does not exist")
            continue
        if it is None:
            violations.append(f"{where}: instance type {claim.instance_type} is not in the catalog")
            continue
        offering = next((o for o in it.offerings if o.zone == claim.zone
                         and o.capacity_type == claim.capacity_type and o.available), None)
        if offering is None:
            violations.append(f"{where}: no available offering {claim.zone}/{claim.capacity_type} of {it.name}")
            continue
        if abs(offering.price - claim.price) > PRICE_TOLERANCE:
            violations.append(f"{where}: price {claim.price} differs from the offering's {offering.price}")
        total += offering.price
        labels = {**it.labels, **pool.labels, wk.ZONE: claim.zone, wk.CAPACITY_TYPE: claim.capacity_type,
                  wk.NODEPOOL: pool.name}
        for key, value in claim.labels.items():
            if key in labels and labels[key] != value:
                violations.append(f"{where}: label {key}={value} contradicts {labels[key]} from the offering")
        labels = {**claim.labels, **labels}
        failing = pool.requirements.failing(labels)
        if failing:
            violations.append(f"{where}: NodePool {pool.name} requirement(s) not met: "
                              + ", ".join(r.describe() for r in failing))
        members = [pods[k] for k in claim.pods if k in pods]
        short = shortfalls(snapshot, pool, claim.zone, claim.capacity_type, members, claim.labels)
        if short:
            violations.append(f"{where}: NodePool {pool.name} minValues not met by the instance types that could "
                              f"hold its pods ({'; '.join(short)})")
        for pod in members:
            violations.extend(_placement_violations(where, pod, labels, pool.taints))
        overhead = Resources()
        daemons = [ds.pod for ds in snapshot.daemonsets if ds.runs_on(labels, pool.taints)]
        for daemon in daemons:
            overhead = overhead + daemon.requests
        violations.extend(_pairwise_violations(where, members, daemons, namespaces))
        violations.extend(_fit_violations(where, members, (it.allocatable - overhead)))
        use = Resources({**it.capacity, NODES: 1})
        added[pool.name] = added.get(pool.name, Resources()) + use
    for name, use in added.items():
        pool = snapshot.nodepool(name)
        assert pool is not None
        usage = pool_usage(snapshot, pool) + use
        for resource, limit in pool.limits.items():
            if usage[resource] > limit:
                violations.append(f"NodePool {name}: limit {resource}={pool.limits.to_quantities()[resource]} "
                                  f"exceeded ({usage.to_quantities().get(resource, usage[resource])} with this plan)")
    # an existing node is a Node or an in-flight NodeClaim (as pods will find it: ``solver.inflight``)
    nodes = {v.node.name: v.node for v in node_views(snapshot)}
    for assignment in plan.existing_nodes:
        where = f"existing node {assignment.name}"
        existing = nodes.get(assignment.name)
        if existing is None:
            violations.append(f"{where}: not in the snapshot")
            continue
        node = existing
        if node.unschedulable or node.deleting or not node.ready:
            violations.append(f"{where}: is cordoned, being deleted or not Ready")
        bound = snapshot.pods_on(node.name)
        used = Resources()
        for pod in bound:
            used = used + pod.requests
        running = {(p.namespace, p.owner_name) for p in bound if p.owner_kind == "DaemonSet"}
        resident = list(bound)
        for ds in snapshot.daemonsets:
            if (ds.namespace, ds.name) not in running and ds.runs_on(node.labels, node.taints):
                used = used + ds.pod.requests
                resident.append(ds.pod)
        members = [pods[k] for k in assignment.pods if k in pods]
        violations.extend(_pairwise_violations(where, members, resident, namespaces))
        for pod in members:
            violations.extend(_placement_violations(where, pod, node.labels, list(node.taints)))
        violations.extend(_fit_violations(where, members, node.allocatable - used))
    violations.extend(_topology_violations(snapshot, plan, pods))
    if abs(total - plan.cost.total) > 1e-4:
        violations.append(f"cost.total {plan.cost.total} differs from the sum of offering prices {total:.6f}")
    if plan.cost.lower_bound > plan.cost.total + 1e-4:
        violations.append(f"cost.lowerBound {plan.cost.lower_bound} is above cost.total {plan.cost.total}")
    return violations
