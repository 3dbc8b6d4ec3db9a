#!/usr/bin/env bash
# Runs Karpenter's KWOK provider (built by build.sh) against a cluster, in the foreground (it execs, so the
# caller's PID is Karpenter's -- what the benchmark reads /proc of, and what a caller stops by PID).
#
# Usage: hack/karpenter-kwok/run.sh KUBECONFIG
# Env:   KARPENTER_KWOK_BIN      dir with karpenter-kwok (default: the output of build.sh)
#        METRICS_PORT, HEALTH_PROBE_PORT
#                                Karpenter binds both on every interface and has no flag to change that; by
#                                default two currently free ports are picked so they never clash (run the
#                                caller inside `unshare -n` together with the control plane to keep them off
#                                the network entirely).
#        SYSTEM_NAMESPACE        an existing namespace for its events and leases (default kube-system)
#        INSTANCE_TYPES_FILE_PATH  a JSON instance-type list in the KWOK provider's format (default: the
#                                provider's built-in catalog); bench/controller_perf.py writes one from a
#                                nodeplan catalog.
#        Any other Karpenter setting (BATCH_MAX_DURATION, FEATURE_GATES, LOG_LEVEL, ...) passes through.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
[[ $# -eq 1 && -s "$1" ]] || { echo "usage: $0 KUBECONFIG" >&2; exit 2; }
bin="${KARPENTER_KWOK_BIN:-$("${here}/build.sh" | tail -n1)}"

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])'
}

export KUBECONFIG="$1"
export SYSTEM_NAMESPACE="${SYSTEM_NAMESPACE:-kube-system}"
export DISABLE_LEADER_ELECTION=true
export METRICS_PORT="${METRICS_PORT:-$(free_port)}"
export HEALTH_PROBE_PORT="${HEALTH_PROBE_PORT:-$(free_port)}"
# Off-cluster: no webhook, no service; the min-version check reads the API server's version.
exec "${bin}/karpenter-kwok"
