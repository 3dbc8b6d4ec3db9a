"""Per-node counters: rules that cap how many pods of some set one node may hold, modelled as extra
resource dimensions so every stage (greedy, patterns, compact model, proof) enforces them unchanged.

Each counter is exact (it keeps two classes off one node exactly when Kubernetes does) unless its
``strict`` note says where it is stricter; ``conservative`` lists those notes.

- Host ports (exact): Kubernetes binds each (hostIP, protocol, port) once per node, an empty hostIP, 0.0.0.0
  or :: binding every address (``HostPort.conflicts``). Per (protocol, port): one counter of capacity 1
  per specific address, taken by the pods binding that address and by those binding every address, plus
  one taken by the latter alone. Two pods share a counter exactly when their ports conflict; a node whose
  DaemonSets or bound pods hold a conflicting port has capacity 0.
- Required pod anti-affinity on hostname that a pod's own labels match (exact): per distinct term (and
  the owner's values of its matchLabelKeys / mismatchLabelKeys) one counter of capacity H, H the number of
  pending pods it selects that do not carry it. Its owners take H each, those rule-free pods 1 each: a node
  holds one owner and nothing else it selects, or any number of the rule-free ones (Kubernetes lets them
  share: nothing keeps them apart). Karpenter's benchmark (every ``app=nginx`` pod repels the label) has no
  rule-free side, so there H = 1 and the group holds one pod per node.
- Required pod anti-affinity on hostname between classes (the owners' term selects other pending classes,
  not themselves): one dimension of capacity H, the pods of the larger side taking 1 each and those of
  the smaller side H each, where H is the larger side's pod count. A node then holds either any number
  of the larger side or one pod of the smaller side, never both. Conservative: two pods of the smaller
  side never share a node either (none when they repel their own kind anyway); no linear cap can be exact
  here, since both (2, 0) and (0, 2) are allowed and (1, 1) is not.
- Hostname topology spread (DoNotSchedule): per distinct (namespace, selector, maxSkew) one counter.
  maxSkew 1: capacity M + 1 (M the rule-free pending pods the selector matches), carriers taking M + 1,
  rule-free matches 1, a node already running a match losing 1: a carrier's node holds no other match
  (skew ≤ 1 against a minimum of 0) and rule-free matches gather freely. maxSkew s ≥ 2: capacity s, every
  match taking 1, less the matches already on an existing node. Both are exact while some eligible node
  holds no match (the global minimum is 0, as on any cluster with a node outside the group) and stricter
  when every eligible node ends up holding one; with s ≥ 2 the rule-free matches are also capped at s per
  node.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from model.affinity import HostPort, LabelSelector, PodAffinityTerm
from model.labels import HOSTNAME
from model.pod import Pod
from solver.classes import PodClass
from solver.rules.base import BatchContext, Rule

#: host IPs that bind every address (``HostPort.conflicts``)
WILDCARD_IPS = ("", "0.0.0.0", "::")


@dataclass
class NodeCounter:
    name: str
    #: units each pod of a class takes (class index → units)
    uses: dict[int, int]
    #: capacity on a new node, given the daemon pods that run there
    new_capacity: int
    #: host ports: (protocol, port), and the binding a node must not already hold a conflicting port for
    port: tuple[str, int] | None = None
    probe: HostPort | None = None
    selector: tuple[str, LabelSelector] | None = None
    bound_used: dict[str, int] = field(default_factory=dict)
    #: hostname spread with maxSkew 1: a node running any match loses one unit (its carriers are closed)
    star: bool = False
    #: where this counter is stricter than Kubernetes ("" when exact)
    strict: str = ""
    #: capacities that differ node by node (DRA devices): one per template / existing node, in the problem's
    #: order, used instead of ``capacity_with``
    template_capacity: tuple[int, ...] | None = None
    existing_capacity: tuple[int, ...] | None = None
    #: ``uses`` counts per unit of a class (a bundle's shared claim once), not per pod
    per_unit: bool = False

    def capacity_with(self, pods: Sequence[Pod]) -> int:
        """Capacity left on a node already running ``pods`` (daemon pods or bound pods)."""
        if self.probe is None and self.selector is None:
            return self.new_capacity  # anti-affinity: bound pods that repel are handled by node admission
        if self.probe is not None:
            taken = any(self.probe.conflicts(p) for pod in pods for p in pod.host_ports)
            return 0 if taken else self.new_capacity
        assert self.selector is not None
        namespace, selector = self.selector
        matching = sum(1 for pod in pods if pod.namespace == namespace and selector.matches(pod.labels))
        if self.star:
            return self.new_capacity - min(matching, 1)
        return max(self.new_capacity - matching, 0)


def _pods(classes: Sequence[PodClass], indices: Sequence[int]) -> int:
    return sum(len(classes[k].pods) for k in indices)


def _names(classes: Sequence[PodClass], indices: Sequence[int]) -> str:
    names = sorted({classes[k].name for k in indices})
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def apart_groups(classes: Sequence[PodClass], terms: Callable[[Pod], Sequence[PodAffinityTerm]],
                 namespace_labels: Mapping[str, dict[str, str]], skip: Callable[[Pod], bool] = lambda pod: False
                 ) -> list[tuple[str, PodAffinityTerm, list[int], list[int]]]:
    """Classes carrying a hostname anti-affinity term (of ``terms(pod)``) that selects their own pods, grouped by
    (namespace, term, the owner's values of the term's label keys — what it selects depends on them), each with
    the other classes its term selects: ``(namespace, term, owners, selected)``. ``skip``: classes left out."""
    owners_of: dict[tuple[str, PodAffinityTerm, tuple[str | None, ...]], list[int]] = {}
    for c in classes:
        pod = c.representative
        if skip(pod):
            continue
        for term in terms(pod):
            if term.topology_key != HOSTNAME or not term.selects(pod.namespace, pod.labels, pod.namespace, pod.labels,
                                                                  namespace_labels.get(pod.namespace)):
                continue
            projection = tuple(pod.labels.get(k) for k in term.match_label_keys + term.mismatch_label_keys)
            owners = owners_of.setdefault((pod.namespace, term, projection), [])
            if c.index not in owners:
                owners.append(c.index)
    out = []
    for (namespace, term, _), owners in owners_of.items():
        owner = classes[owners[0]].representative
        selected = [o.index for o in classes if o.index not in owners and not skip(o.representative)
                    and term.selects(namespace, owner.labels, o.representative.namespace, o.representative.labels,
                                     namespace_labels.get(o.representative.namespace))]
        out.append((namespace, term, owners, selected))
    return out


def anti_affinity_counters(classes: Sequence[PodClass],
                           namespace_labels: Mapping[str, dict[str, str]] | None = None) -> list[NodeCounter]:
    """Required pod anti-affinity on hostname: one counter per self-matching term, then the cross-class ones."""
    namespace_labels = namespace_labels or {}
    others: dict[tuple[str, PodAffinityTerm], list[int]] = {}
    for c in classes:
        pod = c.representative
        for term in pod.pod_anti_affinity:
            if term.topology_key == HOSTNAME and not term.selects(pod.namespace, pod.labels, pod.namespace,
                                                                  pod.labels, namespace_labels.get(pod.namespace)):
                others.setdefault((pod.namespace, term), []).append(c.index)
    counters: list[NodeCounter] = []
    for namespace, _, owners, selected in apart_groups(classes, lambda pod: pod.pod_anti_affinity, namespace_labels):
        heavy = max(_pods(classes, selected), 1)
        uses = {k: heavy for k in owners} | {k: 1 for k in selected}
        counters.append(NodeCounter(name=f"repel:{namespace}/{len(counters)}", uses=uses, new_capacity=heavy))
    counters.extend(_cross_class(classes, others, namespace_labels, counters))
    return counters


def spread_counters(classes: Sequence[PodClass]) -> list[NodeCounter]:
    """Hostname topology spread (DoNotSchedule): one counter per distinct (namespace, selector, maxSkew)."""
    carriers_of: dict[tuple[str, LabelSelector, int], list[int]] = {}
    for c in classes:
        pod = c.representative
        for spread in pod.topology_spread:
            selector = spread.selector_for(pod.labels)
            if spread.topology_key != HOSTNAME or spread.when_unsatisfiable != "DoNotSchedule" or not selector:
                continue
            carriers = carriers_of.setdefault((pod.namespace, selector, spread.max_skew), [])
            if c.index not in carriers:
                carriers.append(c.index)
    counters: list[NodeCounter] = []
    for (namespace, selector, skew), carriers in carriers_of.items():
        matched = [o.index for o in classes if o.representative.namespace == namespace
                   and selector.matches(o.representative.labels)]
        rule_free = [k for k in matched if k not in carriers]
        strict = (f"at most maxSkew {skew} matching pods per node beside a carrier, stricter than Kubernetes only "
                  "when every eligible node ends up holding a match (global minimum above 0)")
        name = f"spread:{namespace}/{len(counters)}"
        if skew == 1:
            free = _pods(classes, rule_free)
            uses = dict.fromkeys(rule_free, 1) | dict.fromkeys(carriers, free + 1)
            counters.append(NodeCounter(name=name, uses=uses, new_capacity=free + 1, selector=(namespace, selector),
                                        star=True, strict=strict))
            continue
        if rule_free:
            strict += (f"; the matching pods that do not carry it ({_names(classes, rule_free)}) are capped at "
                       f"maxSkew {skew} per node too")
        counters.append(NodeCounter(name=name, uses=dict.fromkeys(matched, 1), new_capacity=skew,
                                    selector=(namespace, selector), strict=strict))
    return counters


def _cross_class(classes: Sequence[PodClass], owners_of: Mapping[tuple[str, PodAffinityTerm], list[int]],
                 namespace_labels: Mapping[str, dict[str, str]], own: Sequence[NodeCounter] = ()
                 ) -> list[NodeCounter]:
    """Weighted counters keeping the owners of a hostname anti-affinity term off the pending classes it
    selects (see the module docstring); terms whose sides overlap or are both bundles are left out.
    ``own``: the self-matching terms' counters (pods of the smaller side they already keep apart cost
    nothing extra)."""
    out: list[NodeCounter] = []
    for (namespace, term), owners in owners_of.items():
        targets = [o.index for o in classes if o.index not in owners and term.selects(
            namespace, classes[owners[0]].representative.labels, o.representative.namespace,
            o.representative.labels, namespace_labels.get(o.representative.namespace))]
        if not targets:
            continue
        sides = sorted([owners, targets], key=lambda side: (_pods(classes, side),
                                                              any(classes[k].bundle for k in side)))
        small, large = sides
        if any(classes[k].bundle for k in small):
            small, large = large, small
            if any(classes[k].bundle for k in small):
                continue
        heavy = _pods(classes, large)
        uses = {k: 1 for k in large} | {k: heavy for k in small}
        apart = all(any(separates(counter, a, b) for counter in own) for a in small for b in small
                    if a != b or len(classes[a].pods) > 1)
        strict = "" if _pods(classes, small) < 2 or apart else (
            f"the pods of {_names(classes, small)} are kept one per node although Kubernetes lets them share one")
        out.append(NodeCounter(name=f"repel-other:{namespace}/{len(out)}", uses=uses, new_capacity=heavy,
                               strict=strict))
    return out


def separates(counter: NodeCounter, a: int, b: int) -> bool:
    """Does this anti-affinity counter keep classes ``a`` and ``b`` off one node?"""
    return (counter.port is None and counter.selector is None and a in counter.uses and b in counter.uses
            and counter.uses[a] + counter.uses[b] > counter.new_capacity)


def conservative(classes: Sequence[PodClass], counters: Sequence[NodeCounter]) -> list[str]:
    """One note per counter whose encoding is stricter than Kubernetes (a plan proved optimal is optimal
    for this stricter model): ``name (rule, the classes it charges): where it is stricter``."""
    notes = []
    for counter in counters:
        if counter.strict:
            notes.append(f"{counter.name} ({_names(classes, sorted(counter.uses))}): {counter.strict}")
    return notes


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
    relaxable = True

    def conservative(self, batch: BatchContext, classes: Sequence[PodClass],
                     counters: Sequence[NodeCounter]) -> list[str]:
        """At most maxSkew matching pods per node is exact only while some eligible node holds none."""
        return conservative(classes, [c for c in counters if c.name.startswith("spread:")])

    def counters(self, batch: BatchContext, classes: Sequence[PodClass]) -> Sequence[NodeCounter]:
        return spread_counters(classes)

    def unmodelled(self, batch: BatchContext, classes: Sequence[PodClass],
                   counters: Sequence[NodeCounter]) -> list[str]:
        """ScheduleAnyway on the hostname is ``rules.hostpreferences``' (it notes what it does not keep)."""
        notes: list[str] = []
        for c in classes:
            pod = c.representative
            if pod.rule_problem or pod.volume_problem:
                continue
            modelled = modelled_spread(pod)
            notes.extend(f"{c.name}: topology spread on {spread.topology_key} ({spread.when_unsatisfiable}) "
                         "is not modelled" for i, spread in enumerate(pod.topology_spread)
                         if not modelled[i] and spread.when_unsatisfiable != "ScheduleAnyway")
        return notes
