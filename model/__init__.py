"""nodeplan's domain: Kubernetes objects, quantities, label algebra, snapshots and plans (no I/O but parsing)."""
