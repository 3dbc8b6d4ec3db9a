"""NodeClaim lifecycle: Launched (the provider created the instance), Registered (its Node joined and is Ready:
its pending pods nominated to it, labels synced, ``karpenter.sh/unregistered`` taint removed), Initialized (Node
Ready, startup taints gone). Nominations (KEP-5278) are written right before the untaint, once the pods are quiet,
and put back while the pod is pending and the node still has room for it (``Lifecycle._settle_nominations``).

Each step reads the cache, does one idempotent write, and records the condition in the NodeClaim's status
subresource; the next cache event moves the claim on. A crash between steps repeats at most one write.
Deleting claims (and claims whose Node is deleted) are handed to ``controller.termination`` each pass.
Every instance call goes through the ``CloudProvider`` interface (``providers.protocol``). A provider that does not
know the Node's name at launch (a real cloud: the kubelet names it) leaves ``status.nodeName`` empty; the Node
that registers with the claim's ``providerID`` is then linked to it (Karpenter matches Nodes by providerID).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from functools import partial
from typing import Any, cast

from kubernetes import client

from controller.cache import ClusterCache
from controller.conditions import conditions_of, is_true, with_condition
from controller.drain import Drainer
from controller.logs import claim_fields, get_logger
from controller.metrics import Metrics
from controller.offerings import UnavailableOfferings
from controller.provisioner import (
    may_nominate,
    node_allocatable,
    nominate,
    planned_nodes,
    planned_pod_uids,
    pod_requests,
    room_left,
)
from controller.rest import CoreApi
from controller.termination import Terminator, claim_node_name
from model import labels as wk
from model.nodepool import NodeClaim
from model.resources import Resources
from providers.fallbacks import planned_offering
from providers.protocol import CloudProvider, InsufficientCapacityError, NodeClassNotReadyError

log = get_logger(__name__)

GROUP, VERSION, PLURAL = "karpenter.sh", "v1", "nodeclaims"


_conditions = conditions_of
_true = is_true
_with_condition = with_condition


def _node_ready(node: Mapping[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or [])


class Lifecycle:
    def __init__(self, api: client.ApiClient, cache: ClusterCache, launcher: CloudProvider, *, nominate: bool = True,
                 bind_grace: float = 15.0, unavailable: UnavailableOfferings | None = None,
                 drainer: Drainer | None = None, metrics: Metrics | None = None,
                 deciding: Callable[[], bool] = lambda: False,
                 gathering: Callable[[], float | None] = lambda: None, decide_now: Callable[[], None] = lambda: None
                 ) -> None:
        """``deciding``: is the provisioner deciding a batch right now? Its NodeClaims would join the nodes
        registering, and pods it joins to their claims need nominations first. ``gathering``: how long the open
        batch window has been gathering pods (None: none is open); ``decide_now`` closes it at once, for a batch
        the registration waits for (``_may_register``)."""
        self.nominate = nominate
        self._deciding = deciding
        self._gathering = gathering
        self._decide_now = decide_now
        self.bind_grace = bind_grace
        self.unavailable = unavailable or UnavailableOfferings()
        self._unbound: dict[str, dict[str, Any]] = {}
        self._planned: dict[str, set[str]] = {}
        #: room left on each node for pods nominated to it from now on, this pass (``NominationRoom``)
        self._room = NominationRoom(cache)
        #: pod UID → when nodeplan wrote its nomination (monotonic) and the pod's resourceVersion then: until the
        #: watch shows a newer version of the pod the nomination is not written again
        self._written: dict[str, tuple[float, str]] = {}
        #: pod UID → when the API server refused its nomination (409: the kube-scheduler owns the field)
        self._refused: dict[str, float] = {}
        self._registration_ready = True
        self._custom = client.CustomObjectsApi(api)
        self._core = CoreApi(api)
        self._cache = cache
        self._launcher = launcher
        self._metrics = metrics
        self.terminator = Terminator(api, cache, launcher, drainer, metrics=metrics)

    def reconcile_all(self) -> int:
        """One pass over every NodeClaim; returns how many writes it made."""
        nodes = {str((n.get("metadata") or {}).get("name")): n for n in self._cache.items("Node")}
        self._refresh()
        writes = 0
        every = self._cache.items("NodeClaim")
        claims = [c for c in every if not (c.get("metadata") or {}).get("deletionTimestamp")]
        writes += self._link_by_provider_id(claims, nodes)
        for raw in every:
            if (raw.get("metadata") or {}).get("deletionTimestamp"):
                writes += self._guarded(raw, lambda c: self.terminator.reconcile(c, nodes))
        for raw in claims:  # a registered claim whose Node is deleted (or gone) is deleted too
            if _true(raw, "Registered"):
                writes += self._guarded(raw, lambda c: self.terminator.delete_claim_of_deleted_node(
                    c, nodes.get(claim_node_name(c))))
        # Register together: every node that turns schedulable makes the scheduler retry *every* pending pod,
        # and a retry against a node still tainted or not Ready drops that pod's nomination. So wait until each
        # launched claim's Node is here and Ready, nominate all their pods once the scheduler has stopped retrying
        # them, then untaint them in one go.
        launched = [c for c in claims if _true(c, "Launched") and not _true(c, "Registered")]
        self._registration_ready = self._may_register(claims, launched, nodes)
        if self.nominate and self._registration_ready:
            def barrier() -> bool:
                # the barrier once more, over the claims as they are now: one the provisioner created while these
                # were nominated registers with them, on a later pass — its pods have no nomination yet, and this
                # untaint would hand them the room left on these nodes (a 29-pod batch created 0.3 s into a
                # 207-pod batch's nominations found 22 of its pods bound there)
                now = [c for c in self._cache.items("NodeClaim")
                       if not (c.get("metadata") or {}).get("deletionTimestamp")]
                return self._may_register(now, launched, nodes)
            self._registration_ready = self._settle_nominations(
                [c for c in launched if claim_node_name(c) in nodes], barrier) and barrier()
        registered = self._register_concurrently(launched, nodes) if self._registration_ready else set()
        writes += len(registered)
        launching = [c for c in claims if _conditions(c).get("Launched", {}).get("status") not in ("True", "False")]
        writes += self._launch_concurrently(launching)
        done = registered | {str(c["metadata"]["name"]) for c in launching}
        for raw in claims:
            if (raw.get("metadata") or {}).get("name") not in done:  # one step per claim and pass
                writes += self._guarded(raw, lambda c: self.reconcile(c, nodes))
        return writes

    def _launch_concurrently(self, claims: list[dict[str, Any]]) -> int:
        """Launch the new claims at once, as Karpenter's NodeClaim lifecycle reconciles them concurrently: one
        after another, a batch's 12 KWOK Nodes took 1.1-1.3 s to create (a cloud's launch call takes seconds each),
        and its nodes register together only once the last has launched. Returns the writes made."""
        if len(claims) < 2:
            return sum(self._guarded(raw, self._launch) for raw in claims)
        with ThreadPoolExecutor(max_workers=min(LAUNCHERS, len(claims))) as pool:
            return sum(pool.map(lambda raw: self._guarded(raw, self._launch), claims))

    def _refresh(self) -> None:
        """What this pass's nominations read: the unbound pods, and where nodeplan planned each of them."""
        self._unbound = self._cache.pods.unbound()
        self._planned = planned_nodes(self._cache.items("NodeClaim"))
        self._room = NominationRoom(self._cache)
        now = time.monotonic()
        self._written = {uid: (t, version) for uid, (t, version) in self._written.items()
                         if now - t < REWRITE_AFTER_SECONDS and self._version(uid) == version}
        self._refused = {uid: t for uid, t in self._refused.items() if now - t < REFUSED_FOR_SECONDS}

    def unfinished(self) -> int:
        """NodeClaims still moving: not yet initialized, or terminating (the lifecycle's queue depth)."""
        return sum(1 for c in self._cache.items("NodeClaim")
                   if (c.get("metadata") or {}).get("deletionTimestamp") or not _true(c, "Initialized"))

    def _link_by_provider_id(self, claims: list[dict[str, Any]], nodes: Mapping[str, dict[str, Any]]) -> int:
        """Record ``status.nodeName`` for launched claims whose Node joined under a name the provider could not
        know (the Node with the claim's providerID)."""
        by_provider_id = {str((n.get("spec") or {}).get("providerID")): n for n in nodes.values()
                          if (n.get("spec") or {}).get("providerID")}
        writes = 0
        for raw in claims:
            status = raw.get("status") or {}
            node = by_provider_id.get(str(status.get("providerID") or ""))
            if node is None or status.get("nodeName") or not _true(raw, "Launched"):
                continue
            name = str(node["metadata"]["name"])
            writes += self._guarded(raw, partial(self._link, node_name=name))
        return writes

    def _link(self, raw: dict[str, Any], node_name: str) -> int:
        self._set_status(raw, {"nodeName": node_name})
        log.info("node joined with the claim's providerID", **claim_fields(raw), node=node_name)
        return 1

    def _may_register(self, claims: list[dict[str, Any]], launched: list[dict[str, Any]],
                      nodes: Mapping[str, dict[str, Any]]) -> bool:
        """The registration barrier: wait while a batch is decided, or a recent claim is still being launched or
        its Node is not Ready, so they all register together. A claim older than ``REGISTRATION_BARRIER_SECONDS``
        waits for nothing.

        Also wait for the batch that was gathering in the open window as they launched (it opened no later than
        ``GATHERED_AT_LAUNCH`` after the oldest of them), and have it decided at once. Untainted before it is
        decided, the joining nodes' room is open to its pods, which the kube-scheduler binds by its own scores
        into room other pods' plans hold (a cleared nomination no longer keeps it), and those pods are planned
        again; decided first, they join the in-flight claims and are nominated with the rest (the adherence e2e:
        54 of 300 pods bound before a batch planned them, 49 re-planned, when the second window was open at the
        first untaint). A window opened later is not waited for: a stream of pods keeps one open for as long as
        it lasts, and nodes held until it ends have every pod bound at once at its end (bench-controller, 1,000
        pods, aws-like, with every open window waited for: each node registered 48 s after the first launch, all
        Running after 79.9 s, 65.2 s before)."""
        young = [(c, age) for c in launched if (age := _age(c, "Launched")) < REGISTRATION_BARRIER_SECONDS]
        if young and self._deciding():
            return False  # its claims, if it creates any, register with these (and its joined pods get nominated)
        gathered = self._gathering()
        if young and gathered is not None and gathered >= max(age for _, age in young) - GATHERED_AT_LAUNCH:
            self._decide_now()
            return False
        if not all(_node_ready(nodes.get((c.get("status") or {}).get("nodeName") or "", {})) for c, _ in young):
            return False
        # a claim created but not launched yet is launched later in this pass: its node joins the others
        return not any(_conditions(c).get("Launched") is None and _created_age(c) < REGISTRATION_BARRIER_SECONDS
                       for c in claims)

    def _register_concurrently(self, launched: list[dict[str, Any]], nodes: Mapping[str, dict[str, Any]]
                               ) -> set[str]:
        """Untaint every joining Node at once, and only then record each claim Registered: each millisecond between
        the first untaint and the last is time in which the scheduler tries pods whose nominated node is still
        tainted, and such a pod is bound into room left on a node untainted first (planned for others) or fails and
        loses its nomination. Session 23's aws-like run: 13 claims registered over 246 ms, one untaint and one
        status write each in turn, and 4 pods nominated to the later ones were bound to earlier ones in that window.
        Returns the names of the claims registered."""
        joining = [(raw, nodes[claim_node_name(raw)]) for raw in launched if claim_node_name(raw) in nodes]
        if len(joining) < 2:
            return set()  # one (or none): ``reconcile`` registers it

        def untaint(item: tuple[dict[str, Any], dict[str, Any]]) -> bool:
            return bool(self._guarded(item[0], lambda raw: self._untaint(raw, item[1])))

        def record(item: tuple[dict[str, Any], dict[str, Any]]) -> str | None:
            done = self._guarded(item[0], lambda raw: self._record_registered(raw, item[1]))
            return str(item[0]["metadata"]["name"]) if done else None

        with ThreadPoolExecutor(max_workers=min(16, len(joining))) as pool:
            started = time.monotonic()
            untainted = [item for item, ok in zip(joining, list(pool.map(untaint, joining)), strict=True) if ok]
            log.info(f"untainted {len(untainted)} node(s) in {time.monotonic() - started:.3f}s")
            return {name for name in pool.map(record, untainted) if name is not None}

    @staticmethod
    def _guarded(raw: dict[str, Any], step: Callable[[dict[str, Any]], int]) -> int:
        """Run one claim's step; an API error is logged and retried on the next pass, not fatal to the rest."""
        try:
            return step(raw)
        except client.ApiException as err:
            log.warning(f"API error: HTTP {err.status} {err.reason}", **claim_fields(raw))
            return 0

    def reconcile(self, raw: dict[str, Any], nodes: Mapping[str, dict[str, Any]]) -> int:
        name = str((raw.get("metadata") or {}).get("name"))
        launched = _conditions(raw).get("Launched", {}).get("status")
        if launched == "False":
            return 0  # failed launch: kept as a record, its pods are re-planned (deleting it needs a finalizer flow)
        if launched != "True":
            return self._launch(raw)
        node = nodes.get((raw.get("status") or {}).get("nodeName") or name)
        if node is None:
            return 0
        if not _true(raw, "Registered"):
            return self._register(raw, node) if self._registration_ready else 0
        if self.nominate and self._reserving(raw):
            # the scheduler drops a nomination in any failed cycle (e.g. one it tried while another node turned
            # schedulable first); put it back while the node still has room for the pod, so the room stays kept
            self._nominate(raw, str(node["metadata"]["name"]), room=True)
        if not _true(raw, "Initialized") and _node_ready(node) and not self._startup_taints_left(raw, node):
            self._patch_node_labels(node, {wk.INITIALIZED: "true"})
            self._set_status(raw, {"conditions": _with_initialized(raw)})
            log.info("initialized nodeclaim", **claim_fields(raw), node=node["metadata"]["name"])
            return 1
        return 0

    def _launch(self, raw: dict[str, Any]) -> int:
        claim = NodeClaim.model_validate(raw)
        try:
            launched = self._launcher.create(claim)
        except InsufficientCapacityError as err:
            # mark the refused offerings unavailable for a while; the claim's pods are no longer covered by it
            # (Launched=False), so the next batch re-plans them without those offerings
            for offering in err.offerings or [planned_offering(claim)]:
                self.unavailable.mark(*offering)
            self._set_status(raw, {"conditions": _with_condition(raw, "Launched", "False",
                                                                  "InsufficientCapacity", str(err))})
            log.warning(f"launch failed: {err}", **claim_fields(raw))
            return 1
        except NodeClassNotReadyError as err:
            # not a verdict on the claim: retried each pass until its node class resolves
            if _conditions(raw).get("Launched", {}).get("message") == str(err):
                return 0
            self._set_status(raw, {"conditions": _with_condition(raw, "Launched", "Unknown", "NodeClassNotReady",
                                                                  str(err))})
            log.warning(f"waiting for the node class: {err}", **claim_fields(raw))
            return 1
        for offering in launched.refused:
            self.unavailable.mark(*offering)
        result = launched.claim
        labels = {k: v for k, v in result.metadata.labels.items() if claim.metadata.labels.get(k) != v}
        if labels:  # a fallback offering was launched: the claim's labels follow what it became
            updated = self._custom.patch_cluster_custom_object(GROUP, VERSION, PLURAL, claim.name,
                                                               {"metadata": {"labels": labels}})
            self._cache.upsert("NodeClaim", cast(dict[str, Any], updated))
            raw["metadata"] = {**raw["metadata"], "labels": {**(raw["metadata"].get("labels") or {}), **labels}}
        status = result.status
        self._set_status(raw, {
            "providerID": status.provider_id,
            "nodeName": status.node_name,
            "imageID": status.image_id,
            "capacity": status.capacity.to_quantities(),
            "allocatable": status.allocatable.to_quantities(),
            "conditions": _with_condition(raw, "Launched", "True", "Launched"),
        })
        log.info("launched nodeclaim", **claim_fields(raw), node=status.node_name or "",
                 provider_id=status.provider_id, instance_type=result.metadata.labels.get(wk.INSTANCE_TYPE, ""))
        return 1

    def _settle_nominations(self, joining: list[dict[str, Any]], barrier: Callable[[], bool]) -> bool:
        """Nominate the pending pods of every claim about to register to its node, right before the untaint, so
        that the cycles the untaint starts see every planned pod nominated: it is tried on its node first, and
        other pods of equal or lower priority find its room taken. kube-scheduler 1.36.3 clears a pod's nomination
        in every failed cycle (preemption finds no candidate) and each clear, like every change of a nomination,
        requeues every pending pod, which fail again while the nodes are tainted and lose theirs too; so the time
        between the first nomination and the untaint is kept short, and starts only once the pods have been quiet
        (no change seen through the watch for ``NOMINATION_QUIET_SECONDS``, at most ``NOMINATION_QUIET_WAIT``):
        the scheduler is then no longer retrying them after the nodes were added. The untaint waits (at most
        ``NOMINATION_SEEN_WAIT``) until the watch shows the nominations — the scheduler's informer sees them about
        as soon — and what was cleared meanwhile is written once more. Nothing is written when ``barrier`` (may
        the nodes register now?) turns false during the quiet wait: a nomination that waits through another
        batch's launch is cleared by every cycle that batch's joining nodes start, and the pod retried with it gone
        binds wherever the scheduler scores best (session 15's aws-like run: a 204-pod and a 174-pod batch nominated
        1.7 and 2.3 s before they could register).
        Returns whether the nodes may register."""
        uids = [uid for raw in joining for uid in planned_pod_uids(raw)]
        if not any(uid in self._unbound for uid in uids):
            return True
        started = last_change = time.monotonic()
        versions = {uid: self._version(uid) for uid in uids}
        while time.monotonic() - last_change < NOMINATION_QUIET_SECONDS:
            if time.monotonic() - started >= NOMINATION_QUIET_WAIT:
                break
            time.sleep(NOMINATION_POLL_SECONDS)
            self._refresh()
            now_versions = {uid: self._version(uid) for uid in uids}
            if now_versions != versions:
                versions, last_change = now_versions, time.monotonic()
        quiet = time.monotonic()
        if not barrier():
            log.info("nominations held back: another NodeClaim is still launching", nodeclaims=len(joining))
            return False
        # last-updated first: among pods of equal priority the scheduler retries first the one whose last attempt
        # failed earliest (its queue orders by that time), and a failed attempt is the pod's last update here; so
        # if a clear requeues them all, those it reaches first were nominated last and spent the least time exposed
        wanted = [item for raw in joining for item in self._wanted(raw, claim_node_name(raw))]
        wanted.sort(key=lambda item: _resource_version(item[1]), reverse=True)
        written = self._write(wanted)
        self._refresh()
        while self._unseen(joining) and time.monotonic() - quiet < NOMINATION_SEEN_WAIT:
            time.sleep(NOMINATION_POLL_SECONDS / 2)
            self._refresh()
        again = self._write([item for raw in joining for item in self._wanted(raw, claim_node_name(raw))])
        log.info(f"nominated {written} pending pod(s) ({again} again) {quiet - started:.2f}s after the pods were "
                 f"quiet{'' if quiet - started < NOMINATION_QUIET_WAIT else ' (not quiet: waited enough)'}, "
                 f"untainting {time.monotonic() - quiet:.2f}s later", nodeclaims=len(joining))
        return True

    def _version(self, uid: str) -> str:
        """The resourceVersion of pending pod ``uid`` as the cache holds it ("" once bound or gone)."""
        pod = self._unbound.get(uid)
        return str((pod.get("metadata") or {}).get("resourceVersion")) if pod is not None else ""

    def _unseen(self, joining: list[dict[str, Any]]) -> int:
        """Planned pods of ``joining`` whose nomination was written and not yet seen through the watch."""
        return sum(1 for raw in joining for uid in planned_pod_uids(raw) if uid in self._written)

    def _nominate(self, raw: Mapping[str, Any], node: str, *, room: bool = False) -> int:
        """Set ``status.nominatedNodeName`` of the claim's still-pending pods to its node: the scheduler tries a
        pod's nominated node first and keeps room for nominated pods when placing others of equal or lower
        priority, so pods land where the plan packed them. ``room``: only where the node still has room for the
        pod (bound pods and other nominations counted): a nomination put back onto a node whose room went to
        other pods would only be tried, failed and cleared again. Returns how many were written."""
        return self._write(self._wanted(raw, node, room=room))

    def _wanted(self, raw: Mapping[str, Any], node: str, *, room: bool = False
                ) -> list[tuple[str, Mapping[str, Any], str]]:
        """(uid, pod, node) for the claim's pending pods to nominate to ``node``. As KEP-5278 asks of external
        components, only where no nomination is, or where nodeplan put it (``controller.provisioner.may_nominate``);
        not one written less than ``REWRITE_AFTER_SECONDS`` ago that the watch does not show yet, nor one the API
        server refused (the kube-scheduler owns it)."""
        pods: list[tuple[str, Mapping[str, Any], str]] = [(uid, p, node) for uid in planned_pod_uids(raw)
                if (p := self._unbound.get(uid)) is not None and uid not in self._written and uid not in self._refused
                and may_nominate(p, node, self._planned.get(uid, ()))]
        return [item for item in pods if self._room.take(node, item[1])] if room else pods

    def _write(self, items: list[tuple[str, Mapping[str, Any], str]]) -> int:
        """Nominate each pod to its node by server-side apply of that one field (``nominate``), concurrently;
        returns how many were written."""
        if not items:
            return 0

        def write(item: tuple[str, Mapping[str, Any], str]) -> bool:
            return nominate(self._core, item[1], item[2], self._planned.get(item[0], ()))

        now = time.monotonic()
        with ThreadPoolExecutor(max_workers=min(NOMINATION_WRITERS, len(items))) as pool:
            done = list(pool.map(write, items))
        for (uid, _, _), ok in zip(items, done, strict=True):
            if ok:
                self._written[uid] = (now, self._version(uid))
            else:
                self._refused[uid] = now
        nodes = sorted({node for _, _, node in items})
        log.info(f"nominated {sum(done)} of {len(items)} pending pod(s)", node=",".join(nodes[:5]))
        return sum(done)

    def _reserving(self, raw: Mapping[str, Any]) -> bool:
        """Registered, and not initialized longer than ``bind_grace`` ago: its pods are still expected."""
        if not _true(raw, "Initialized"):
            return True
        return _age(raw, "Initialized") <= self.bind_grace

    def _register(self, raw: dict[str, Any], node: dict[str, Any]) -> int:
        self._untaint(raw, node)
        return self._record_registered(raw, node)

    def _untaint(self, raw: Mapping[str, Any], node: Mapping[str, Any]) -> int:
        """Remove ``karpenter.sh/unregistered`` and sync the claim's labels (``karpenter.sh/registered`` among them)
        onto the Node, in one patch."""
        labels = dict((raw.get("metadata") or {}).get("labels") or {})
        labels[wk.REGISTERED] = "true"
        taints = [t for t in (node.get("spec") or {}).get("taints") or [] if t.get("key") != wk.UNREGISTERED_TAINT]
        patch = [{"op": "replace" if (node.get("spec") or {}).get("taints") is not None else "add",
                  "path": "/spec/taints", "value": taints}]
        patch += [{"op": "add", "path": f"/metadata/labels/{_escape(k)}", "value": v} for k, v in labels.items()]
        self._core.patch_node(node["metadata"]["name"], patch)
        return 1

    def _record_registered(self, raw: dict[str, Any], node: Mapping[str, Any]) -> int:
        self._set_status(raw, {"conditions": _with_condition(raw, "Registered", "True", "Registered")})
        if self._metrics is not None:
            self._metrics.node_registered(raw)
        log.info("registered nodeclaim", **claim_fields(raw), node=node["metadata"]["name"])
        return 1

    def _startup_taints_left(self, raw: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
        startup = {(t.get("key"), t.get("effect")) for t in (raw.get("spec") or {}).get("startupTaints") or []}
        present = {(t.get("key"), t.get("effect")) for t in (node.get("spec") or {}).get("taints") or []}
        return bool(startup & present)

    def _patch_node_labels(self, node: Mapping[str, Any], labels: Mapping[str, str]) -> None:
        patch = [{"op": "add", "path": f"/metadata/labels/{_escape(k)}", "value": v} for k, v in labels.items()]
        self._core.patch_node(node["metadata"]["name"], patch)

    def _set_status(self, raw: dict[str, Any], status: dict[str, Any]) -> None:
        name = raw["metadata"]["name"]
        updated = self._custom.patch_cluster_custom_object_status(GROUP, VERSION, PLURAL, name, {"status": status})
        self._cache.upsert("NodeClaim", cast(dict[str, Any], updated))
        raw["status"] = {**(raw.get("status") or {}), **status}


class NominationRoom:
    """A node's allocatable less the requests of the pods bound to it and of the pending pods nominated to it, for
    one lifecycle pass: worked out only for the nodes asked about (``ClusterCache.pods``)."""

    def __init__(self, cache: ClusterCache) -> None:
        self._cache = cache
        self._left: dict[str, Resources | None] = {}
        self._allocatable: dict[str, Resources] | None = None

    def take(self, node: str, pod: Mapping[str, Any]) -> bool:
        """Does ``pod`` still fit on ``node``? If so its requests are taken from the room left."""
        left = self._left[node] if node in self._left else self._room(node)
        requests = pod_requests(self._cache, pod)
        if left is None or requests is None or not requests.fits_in(left):
            self._left[node] = left
            return False
        self._left[node] = left - requests
        return True

    def _room(self, node: str) -> Resources | None:
        if self._allocatable is None:
            self._allocatable = node_allocatable(self._cache)
        allocatable = self._allocatable.get(node)
        if allocatable is None:
            return None
        return room_left(allocatable, self._cache.pods.on(node), lambda pod: pod_requests(self._cache, pod))


def _with_initialized(raw: Mapping[str, Any]) -> list[dict[str, Any]]:
    interim = {**raw, "status": {**(raw.get("status") or {}),
                                 "conditions": _with_condition(raw, "Initialized", "True", "Initialized")}}
    return _with_condition(interim, "Ready", "True", "Ready")


#: a claim whose Node has not appeared this long after launch no longer holds the others' registration back
REGISTRATION_BARRIER_SECONDS = 30.0
#: a batch window opened this long after a claim's launch still gathers pods of the wave that claim was planned
#: in (they arrive while its node joins), and the claim's registration waits for it (``Lifecycle._may_register``);
#: condition times are whole seconds, so the margin is 0-1 s and a window opened before the launch always counts
GATHERED_AT_LAUNCH = 1.0
#: registration nominates the joining Nodes' pods once none of them changed for this long (the scheduler has
#: stopped retrying them) ...
NOMINATION_QUIET_SECONDS = 0.5
#: ... or after this long at most
NOMINATION_QUIET_WAIT = 1.0
#: the untaint waits at most this long for the watch to show the nominations
NOMINATION_SEEN_WAIT = 1.0
#: both waits look at the pods this often (the seen wait twice as often), not at every change: while a batch
#: schedules pods change about a hundred times a second (the nominations' own echoes among them) and each look
#: reads every pod (0.7 ms at 1,000 pods). Woken by each change, one registration's 1.5 s of waiting beside 150
#: pod changes a second took 0.23 CPU s, polled 0.06 (1,000 pods, 107 of them nominated)
NOMINATION_POLL_SECONDS = 0.05
#: a nomination written this recently is not written again unless the watch showed the pod changed since
REWRITE_AFTER_SECONDS = 2.0
#: a nomination the API server refused is not tried again for this long
REFUSED_FOR_SECONDS = 5.0
#: concurrent nomination writes (each one request; the client's rate limiter still applies)
NOMINATION_WRITERS = 16
#: concurrent launches of new NodeClaims (``Lifecycle._launch_concurrently``)
LAUNCHERS = 16


def _resource_version(obj: Mapping[str, Any]) -> int:
    """The object's resourceVersion as a number (etcd's revision: later writes have larger ones), 0 if none."""
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0
def _age(raw: Mapping[str, Any], kind: str) -> float:
    """Seconds since condition ``kind`` last changed (infinite when unknown)."""
    stamp = _conditions(raw).get(kind, {}).get("lastTransitionTime")
    try:
        since = datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError:
        return float("inf")
    return (datetime.now(UTC) - since).total_seconds()


def _created_age(raw: Mapping[str, Any]) -> float:
    stamp = (raw.get("metadata") or {}).get("creationTimestamp")
    try:
        since = datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError:
        return float("inf")
    return (datetime.now(UTC) - since).total_seconds()


def _escape(key: str) -> str:
    """A label key as a JSON-pointer segment (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")
