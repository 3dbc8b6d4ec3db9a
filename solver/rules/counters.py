"""Per-node counters: rules that cap how many pods of some set one node may hold, modelled as extra
resource dimensions so every stage (greedy, patterns, compact model, proof) enforces them unchanged.

- Host ports: each (protocol, port) any pending pod binds is a dimension of capacity 1; a node whose
  DaemonSets or bound pods already bind it has capacity 0.
- Required pod anti-affinity on hostname that a pod's own labels match: each distinct term is a
  dimension of capacity 1 consumed by every pending pod it selects, so a group of Deployments that all
  repel one label (Karpenter's benchmark: every ``app=nginx`` pod) holds one pod per node in total.
  Conservative when a selected pod does not itself repel the others.
- Hostname topology spread (DoNotSchedule): each distinct (namespace, selector, maxSkew) is a dimension
  of capacity maxSkew, consumed by every pending pod the selector matches, less the matching pods
  already on an existing node. At most maxSkew per node keeps the skew at most maxSkew whatever the
  minimum is (conservative when every node already holds one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from model.affinity import LabelSelector, PodAffinityTerm
from model.labels import HOSTNAME, ZONE
from model.pod import Pod
from solver.classes import PodClass


@dataclass
class NodeCounter:
    name: str
    #: units each pod of a class takes (class index → units)
    uses: dict[int, int]
    #: capacity on a new node, given the daemon pods that run there
    new_capacity: int
    port: tuple[str, int] | None = None
    selector: tuple[str, LabelSelector] | None = None
    bound_used: dict[str, int] = field(default_factory=dict)

    def capacity_with(self, pods: Sequence[Pod]) -> int:
        """Capacity left on a node already running ``pods`` (daemon pods or bound pods)."""
        if self.port is None and self.selector is None:
            return self.new_capacity  # anti-affinity: bound pods that repel are handled by node admission
        if self.port is not None:
            protocol, number = self.port
            taken = any(p.port == number and p.protocol == protocol for pod in pods for p in pod.host_ports)
            return 0 if taken else self.new_capacity
        assert self.selector is not None
        namespace, selector = self.selector
        matching = sum(1 for pod in pods if pod.namespace == namespace and selector.matches(pod.labels))
        return max(self.new_capacity - matching, 0)


def build_counters(classes: Sequence[PodClass],
                   namespace_labels: Mapping[str, dict[str, str]] | None = None) -> list[NodeCounter]:
    counters: list[NodeCounter] = []
    namespace_labels = namespace_labels or {}
    repelled: dict[tuple[str, PodAffinityTerm], NodeCounter] = {}
    for c in classes:
        pod = c.representative
        for term in pod.pod_anti_affinity:
            if term.topology_key != HOSTNAME or not term.selects(pod.namespace, pod.labels, pod.namespace,
                                                                 pod.labels, namespace_labels.get(pod.namespace)):
                continue
            term_key = (pod.namespace, term)
            if term_key in repelled:
                repelled[term_key].uses[c.index] = 1
                continue
            uses = {o.index: 1 for o in classes if term.selects(
                pod.namespace, pod.labels, o.representative.namespace, o.representative.labels,
                namespace_labels.get(o.representative.namespace))}
            uses[c.index] = 1
            counter = NodeCounter(name=f"repel:{pod.namespace}/{len(repelled)}", uses=uses, new_capacity=1)
            repelled[term_key] = counter
            counters.append(counter)
    ports: dict[tuple[str, int], NodeCounter] = {}
    for c in classes:
        for port in c.representative.host_ports:
            key = (port.protocol, port.port)
            if key not in ports:
                ports[key] = NodeCounter(name=f"hostPort:{port.protocol}/{port.port}", uses={}, new_capacity=1,
                                         port=key)
                counters.append(ports[key])
            ports[key].uses[c.index] = 1
    spreads: dict[tuple[str, LabelSelector, int], NodeCounter] = {}
    for c in classes:
        pod = c.representative
        for spread in pod.topology_spread:
            if spread.topology_key != HOSTNAME or spread.when_unsatisfiable != "DoNotSchedule" or not spread.selector:
                continue
            spread_key = (pod.namespace, spread.selector, spread.max_skew)
            if spread_key in spreads:
                continue
            counter = NodeCounter(name=f"spread:{pod.namespace}/{len(spreads)}", new_capacity=spread.max_skew,
                                  uses={o.index: 1 for o in classes if o.representative.namespace == pod.namespace
                                        and spread.selector.matches(o.representative.labels)},
                                  selector=(pod.namespace, spread.selector))
            spreads[spread_key] = counter
            counters.append(counter)
    return counters


def modelled_spread(pod: Pod) -> Mapping[int, bool]:
    """Which of a pod's spread constraints nodeplan models (by position): DoNotSchedule on hostname
    (per-node counters) or zone (zone pins, ``rules.zones``)."""
    return {i: s.topology_key in (HOSTNAME, ZONE) and s.when_unsatisfiable == "DoNotSchedule"
            and s.selector is not None for i, s in enumerate(pod.topology_spread)}
