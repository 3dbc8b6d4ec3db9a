"""Well-known label, annotation and taint keys (Kubernetes and karpenter.sh)."""

HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
ARCH = "kubernetes.io/arch"
OS = "kubernetes.io/os"
CAPACITY_TYPE = "karpenter.sh/capacity-type"
NODEPOOL = "karpenter.sh/nodepool"
INITIALIZED = "karpenter.sh/initialized"
REGISTERED = "karpenter.sh/registered"
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
DISRUPTED_TAINT = "karpenter.sh/disrupted"
UNREGISTERED_TAINT = "karpenter.sh/unregistered"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"

CAPACITY_TYPES = ("spot", "on-demand", "reserved")

#: Labels every node Karpenter launches carries, whose values come from the offering it launches on.
WELL_KNOWN_NODE_LABELS = frozenset({ZONE, REGION, INSTANCE_TYPE, ARCH, OS, CAPACITY_TYPE, NODEPOOL, HOSTNAME})
