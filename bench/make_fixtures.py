"""Regenerate the bundled example snapshot: ``python -m bench.make_fixtures``."""

from __future__ import annotations

from pathlib import Path

import yaml

from bench.workloads import generic_deployments, linux_pool, nodepool, pod

ROOT = Path(__file__).resolve().parent.parent


def example_objects() -> list[dict[str, object]]:
    objs: list[dict[str, object]] = [
        linux_pool("general", weight=50, limits={"cpu": "256", "memory": "1Ti"},
                   requirements=[{"key": "karpenter.kwok.sh/instance-family", "operator": "In",
                                  "values": ["c", "s", "m"]}]),
        nodepool("gpu-batch", weight=10, taints=[{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}],
                 requirements=[{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                               {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]),
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "node-exporter", "namespace": "monitoring"},
         "spec": {"selector": {"matchLabels": {"app": "node-exporter"}},
                  "template": {"metadata": {"labels": {"app": "node-exporter"}},
                               "spec": {"containers": [{"name": "exporter", "image": "registry.example/ne:1",
                                                        "resources": {"requests": {"cpu": "50m",
                                                                                   "memory": "64Mi"}}}]}}}},
        {"apiVersion": "v1", "kind": "Node",
         "metadata": {"name": "general-existing-1",
                      "labels": {"karpenter.sh/nodepool": "general", "kubernetes.io/os": "linux",
                                 "kubernetes.io/arch": "amd64", "kubernetes.io/hostname": "general-existing-1",
                                 "node.kubernetes.io/instance-type": "s-4x-amd64-linux",
                                 "topology.kubernetes.io/zone": "test-zone-a",
                                 "karpenter.sh/capacity-type": "spot", "karpenter.sh/initialized": "true"}},
         "spec": {"providerID": "kwok://general-existing-1"},
         "status": {"capacity": {"cpu": "4", "memory": "16Gi", "pods": "64", "ephemeral-storage": "20Gi"},
                    "allocatable": {"cpu": "3900m", "memory": "16374Mi", "pods": "64",
                                    "ephemeral-storage": "20Gi"},
                    "conditions": [{"type": "Ready", "status": "True"}]}},
        pod("node-exporter-x1", namespace="monitoring", cpu="50m", memory="64Mi", node_name="general-existing-1",
            labels={"app": "node-exporter"}),
        pod("api-old-0", cpu="1500m", memory="2Gi", node_name="general-existing-1", labels={"app": "api"}),
    ]
    objs[-2]["metadata"]["ownerReferences"] = [  # type: ignore[index]
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "node-exporter", "uid": "uid-ds", "controller": True}]
    objs += generic_deployments(48, seed=7, mean_replicas=8)
    objs += [pod(f"batch-{i}", namespace="batch", cpu="2", memory="8Gi", labels={"app": "batch"},
                 spec_extra={"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "batch",
                                              "effect": "NoSchedule"}],
                             "nodeSelector": {"karpenter.sh/nodepool": "gpu-batch"}}) for i in range(4)]
    objs.append(pod("mainframe-report", cpu="500m", memory="1Gi", labels={"app": "report"},
                    spec_extra={"nodeSelector": {"kubernetes.io/arch": "s390x"}}))
    return objs


def main() -> None:
    out = ROOT / "fixtures" / "snapshots" / "example.yaml"
    out.parent.mkdir(parents=True, exist_ok=True)
    header = "# Example cluster snapshot (regenerate with: python -m bench.make_fixtures)\n"
    out.write_text(header + yaml.safe_dump_all(example_objects(), sort_keys=False))
    print(out)


if __name__ == "__main__":
    main()
