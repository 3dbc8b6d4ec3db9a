"""Per-node counters: rules that cap how many pods of some set one node may hold, modelled as extra
resource dimensions so every stage (greedy, patterns, compact model, proof) enforces them unchanged.

- Host ports: each (protocol, port) any pending pod binds is a dimension of capacity 1; a node whose
  DaemonSets or bound pods already bind it has capacity 0.
- Required pod anti-affinity on hostname that a pod's own labels match: each distinct term is a
  dimension of capacity 1 consumed by every pending pod it selects, so a group of Deployments that all
  repel one label (Karpenter's benchmark: every ``app=nginx`` pod) holds one pod per node in total.
  Conservative when a selected pod does not itself repel the others.
- Required pod anti-affinity on hostname between classes (the owners' term selects other pending classes,
  not themselves): one dimension of capacity H, the pods of the larger side taking 1 each and those of
  the smaller side H each, where H is the larger side's pod count. A node then holds either any number
  of the larger side or one pod of the smaller side, never both. Conservative: two pods of the smaller
  side never share a node either (none when they repel their own kind anyway).
- Hostname topology spread (DoNotSchedule): each distinct (namespace, selector, maxSkew) is a dimension
  of capacity maxSkew, consumed by every pending pod the selector matches, less the matching pods
  already on an existing node. At most maxSkew per node keeps the skew at most maxSkew whatever the
  minimum is (conservative when every node already holds one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from model.affinity import LabelSelector, PodAffinityTerm
from model.labels import HOSTNAME
from model.pod import Pod
from solver.classes import PodClass
from solver.rules.base import BatchContext, Rule


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
    """Every per-node counter of the batch, in axis order (each rule family builds its own)."""
    return (anti_affinity_counters(classes, namespace_labels) + host_port_counters(classes)
            + spread_counters(classes))


def anti_affinity_counters(classes: Sequence[PodClass],
                           namespace_labels: Mapping[str, dict[str, str]] | None = None) -> list[NodeCounter]:
    """Required pod anti-affinity on hostname: one counter per self-matching term, then the cross-class ones."""
    counters: list[NodeCounter] = []
    namespace_labels = namespace_labels or {}
    repelled: dict[tuple[str, PodAffinityTerm], NodeCounter] = {}
    others: dict[tuple[str, PodAffinityTerm], list[int]] = {}
    for c in classes:
        pod = c.representative
        for term in pod.pod_anti_affinity:
            if term.topology_key != HOSTNAME:
                continue
            if not term.selects(pod.namespace, pod.labels, pod.namespace, pod.labels,
                                namespace_labels.get(pod.namespace)):
                others.setdefault((pod.namespace, term), []).append(c.index)
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
    counters.extend(_cross_class(classes, others, namespace_labels))
    return counters


def host_port_counters(classes: Sequence[PodClass]) -> list[NodeCounter]:
    """One counter of capacity 1 per host port any pending pod binds."""
    counters: list[NodeCounter] = []
    ports: dict[tuple[str, int], NodeCounter] = {}
    for c in classes:
        for port in c.representative.host_ports:
            key = (port.protocol, port.port)
            if key not in ports:
                ports[key] = NodeCounter(name=f"hostPort:{port.protocol}/{port.port}", uses={}, new_capacity=1,
                                         port=key)
                counters.append(ports[key])
            ports[key].uses[c.index] = 1
    return counters


def spread_counters(classes: Sequence[PodClass]) -> list[NodeCounter]:
    """Hostname topology spread (DoNotSchedule): one counter of capacity maxSkew per distinct selector."""
    counters: list[NodeCounter] = []
    spreads: dict[tuple[str, LabelSelector, int], NodeCounter] = {}
    for c in classes:
        pod = c.representative
        for spread in pod.topology_spread:
            selector = spread.selector_for(pod.labels)
            if spread.topology_key != HOSTNAME or spread.when_unsatisfiable != "DoNotSchedule" or not selector:
                continue
            spread_key = (pod.namespace, selector, spread.max_skew)
            if spread_key in spreads:
                continue
            counter = NodeCounter(name=f"spread:{pod.namespace}/{len(spreads)}", new_capacity=spread.max_skew,
                                  uses={o.index: 1 for o in classes if o.representative.namespace == pod.namespace
                                        and selector.matches(o.representative.labels)},
                                  selector=(pod.namespace, selector))
            spreads[spread_key] = counter
            counters.append(counter)
    return counters


def _cross_class(classes: Sequence[PodClass], owners_of: Mapping[tuple[str, PodAffinityTerm], list[int]],
                 namespace_labels: Mapping[str, dict[str, str]]) -> list[NodeCounter]:
    """Weighted counters keeping the owners of a hostname anti-affinity term off the pending classes it
    selects (see the module docstring); terms whose sides overlap or are both bundles are left out."""
    out: list[NodeCounter] = []
    for (namespace, term), owners in owners_of.items():
        targets = [o.index for o in classes if o.index not in owners and term.selects(
            namespace, classes[owners[0]].representative.labels, o.representative.namespace,
            o.representative.labels, namespace_labels.get(o.representative.namespace))]
        if not targets:
            continue
        sides = sorted([owners, targets], key=lambda side: (sum(len(classes[k].pods) for k in side),
                                                              any(classes[k].bundle for k in side)))
        small, large = sides
        if any(classes[k].bundle for k in small):
            small, large = large, small
            if any(classes[k].bundle for k in small):
                continue
        heavy = sum(len(classes[k].pods) for k in large)
        uses = {k: 1 for k in large} | {k: heavy for k in small}
        out.append(NodeCounter(name=f"repel-other:{namespace}/{len(out)}", uses=uses, new_capacity=heavy))
    return out


def separates(counter: NodeCounter, a: int, b: int) -> bool:
    """Does this anti-affinity counter keep classes ``a`` and ``b`` off one node?"""
    return (counter.port is None and counter.selector is None and a in counter.uses and b in counter.uses
            and counter.uses[a] + counter.uses[b] > counter.new_capacity)


def modelled_spread(pod: Pod) -> Mapping[int, bool]:
    """Which of a pod's spread constraints nodeplan models (by position): DoNotSchedule on hostname
    (per-node counters), any constraint on another key (pins or soft pins, ``rules.topology``); a
    constraint without a labelSelector counts no pods and always holds."""
    return {i: s.selector is None or s.topology_key != HOSTNAME or s.when_unsatisfiable == "DoNotSchedule"
            for i, s in enumerate(pod.topology_spread)}


class HostnameSpread(Rule):
    """Topology spread on the hostname: DoNotSchedule as per-node counters (``spread_counters``)."""

    name = f"topology spread on {HOSTNAME}"
    counter_names = {"spread": f"topology spread on {HOSTNAME}"}

    def counters(self, batch: BatchContext, classes: Sequence[PodClass]) -> Sequence[NodeCounter]:
        return spread_counters(classes)

    def unmodelled(self, batch: BatchContext, classes: Sequence[PodClass],
                   counters: Sequence[NodeCounter]) -> list[str]:
        notes = []
        for c in classes:
            pod = c.representative
            if pod.rule_problem or pod.volume_problem:
                continue
            modelled = modelled_spread(pod)
            notes.extend(f"{c.name}: topology spread on {spread.topology_key} ({spread.when_unsatisfiable}) "
                         "is not modelled" for i, spread in enumerate(pod.topology_spread) if not modelled[i])
        return notes
