"""Volume topology: a pod whose claims bind it to zones (bound PVs' node affinity, WaitForFirstConsumer
StorageClasses' allowedTopologies) or that cannot run yet (claim missing, unbound Immediate claim).

Claims are resolved when the snapshot loads (``model.volumes``): the zones become node requirements of the
pod, so every stage enforces them as node selection; a claim that stops the pod is its ``volume_problem``.
"""

from __future__ import annotations

from solver.rules.base import Rule, Why


class VolumeTopology(Rule):
    name = "volume topology"
    reads = ("PersistentVolumeClaim", "PersistentVolume", "StorageClass")

    def explain(self, why: Why) -> str:
        return why.pod.volume_problem
