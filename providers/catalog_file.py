"""File-backed instance catalogs (``--catalog FILE``), format ``nodeplan.io/v1alpha1 InstanceCatalog``.

```yaml
apiVersion: nodeplan.io/v1alpha1
kind: InstanceCatalog
metadata: {name: my-cloud}
region: us-east-1                 # optional: becomes topology.kubernetes.io/region on every type
instanceTypes:
  - name: m5.large
    labels: {kubernetes.io/arch: amd64, kubernetes.io/os: linux}
    capacity: {cpu: "2", memory: 8Gi, pods: "29", ephemeral-storage: 20Gi}
    overhead: {kubeReserved: {cpu: 70m, memory: 574Mi}, systemReserved: {}, evictionThreshold: {memory: 100Mi}}
    offerings:
      - {zone: us-east-1a, capacityType: on-demand, price: 0.096, available: true}
  - name: g5.xlarge
    ...
    resourceSlices:               # optional: the DRA devices each node of the type publishes
      - driver: gpu.nvidia.com    # a ResourceSlice spec minus nodeName (pool: {name: suffix} optional)
        devices:
          - name: gpu-0
            attributes: {productName: {string: NVIDIA A10G}, driverVersion: {version: 550.163.1}}
            capacity: {memory: {value: 23028Mi}}
```
``node.kubernetes.io/instance-type`` is added from ``name`` when missing. ``resourceSlices`` use the
``resource.k8s.io/v1`` field names and limits (``model.dra.SliceTemplate``); a node named N publishes them
in pool N (or N/<pool.name>), generation 1.
"""

from __future__ import annotations

from pathlib import Path

from model import labels as wk
from model.errors import InputError
from model.fields import RawObject
from model.instancetype import InstanceType
from model.snapshot import read_documents

CATALOG_KIND = "InstanceCatalog"
#: The highest hourly price an offering may have ($/h); objectives are integer micro-dollars summed over
#: many nodes, so a price must stay far from int64 (the dearest cloud machines cost well under $1,000/h).
MAX_PRICE = 1_000_000.0


def load_catalog(path: str | Path) -> tuple[InstanceType, ...]:
    """Load and validate a catalog file; errors name the file, the instance type and the field."""
    path = Path(path)
    docs = read_documents(path)
    if len(docs) != 1 or not isinstance(docs[0], dict) or docs[0].get("kind") != CATALOG_KIND:
        raise InputError(f"expected one object of kind {CATALOG_KIND}", file=str(path), field="kind")
    root = RawObject(docs[0])
    try:
        region, items = root.str("region"), root.items("instanceTypes")
    except InputError as err:
        raise err.located(file=str(path), obj=CATALOG_KIND) from None
    seen: set[str] = set()
    out = []
    for item in items:
        name = item.data.get("name")
        label = f"instance type {name if isinstance(name, str) and name else item.path}"
        try:
            instance_type = InstanceType.parse(item.data)
        except InputError as err:
            raise err.located(file=str(path), obj=label) from None
        for i, offering in enumerate(instance_type.offerings):
            if offering.price > MAX_PRICE:
                raise InputError(f"price {offering.price:g} is above the maximum of {MAX_PRICE:,.0f} $/h",
                                 file=str(path), obj=label, field=f"offerings[{i}].price")
        if instance_type.name in seen:
            raise InputError("duplicate instance type", file=str(path), obj=label, field="name")
        if not instance_type.offerings:
            raise InputError("an instance type needs at least one offering", file=str(path), obj=label,
                             field="offerings")
        seen.add(instance_type.name)
        extra = {wk.INSTANCE_TYPE: instance_type.name}
        if region:
            extra[wk.REGION] = region
        out.append(instance_type.model_copy(update={"labels": {**extra, **instance_type.labels}}))
    if not out:
        raise InputError("catalog has no instance types", file=str(path), field="instanceTypes")
    return tuple(out)
