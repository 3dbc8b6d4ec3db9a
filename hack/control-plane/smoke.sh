#!/usr/bin/env bash
# Smoke test of a running test control plane (hack/control-plane/cluster.sh up), with curl only:
#  1. the API answers with the admin token,
#  2. a Node annotated kwok.x-k8s.io/node=fake (cpu 4, memory 8Gi, pods 110) is made Ready by kwok,
#  3. a Pod without nodeName is bound to that Node by kube-scheduler and made Running by kwok.
# Cleans up the objects it made. Exit 0 on success.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
eval "$("${here}/cluster.sh" env)"
node="smoke-node-$$"
pod="smoke-pod-$$"
timeout="${SMOKE_TIMEOUT:-60}"

api() { # METHOD PATH [BODY]
  local args=(-sS --max-time 10 --cacert "${NODEPLAN_APISERVER_CA}"
    -H "Authorization: Bearer ${NODEPLAN_APISERVER_TOKEN}" -H 'Accept: application/json' -X "$1")
  [[ $# -ge 3 ]] && args+=(-H 'Content-Type: application/json' --data "$3")
  curl "${args[@]}" "${NODEPLAN_APISERVER_URL}$2"
}

jq_py() { # PYTHON-EXPR over the JSON document `d` on stdin
  python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"
}

wait_until() { # DESCRIPTION COMMAND...
  local what="$1" deadline=$((SECONDS + timeout))
  shift
  until "$@"; do
    ((SECONDS < deadline)) || { echo "FAIL: timed out waiting for ${what}" >&2; return 1; }
    sleep 1
  done
  echo "ok: ${what}"
}

cleanup() {
  api DELETE "/api/v1/namespaces/default/pods/${pod}?gracePeriodSeconds=0" >/dev/null 2>&1 || true
  api DELETE "/api/v1/nodes/${node}" >/dev/null 2>&1 || true
}
trap cleanup EXIT

echo "ok: API answers: $(api GET /api/v1/namespaces | jq_py '",".join(i["metadata"]["name"] for i in d["items"])')"
echo "ok: server version $(api GET /version | jq_py 'd["gitVersion"]')"

api POST /api/v1/nodes "$(cat <<EOF
{"apiVersion":"v1","kind":"Node",
 "metadata":{"name":"${node}","annotations":{"kwok.x-k8s.io/node":"fake"},
   "labels":{"kubernetes.io/hostname":"${node}","kubernetes.io/os":"linux","kubernetes.io/arch":"amd64","type":"kwok"}},
 "status":{"capacity":{"cpu":"4","memory":"8Gi","pods":"110"},
           "allocatable":{"cpu":"4","memory":"8Gi","pods":"110"}}}
EOF
)" >/dev/null

node_ready() {
  [[ "$(api GET "/api/v1/nodes/${node}" | jq_py \
    '[c["status"] for c in d.get("status",{}).get("conditions",[]) if c["type"]=="Ready"]')" == "['True']" ]]
}
wait_until "node ${node} Ready (kwok)" node_ready
api GET "/api/v1/nodes/${node}" | jq_py '"   allocatable=%s taints=%s" % (d["status"]["allocatable"], d["spec"].get("taints"))'

api POST /api/v1/namespaces/default/pods "$(cat <<EOF
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"${pod}"},
 "spec":{"containers":[{"name":"c","image":"example.invalid/none:0",
   "resources":{"requests":{"cpu":"1","memory":"1Gi"}}}]}}
EOF
)" >/dev/null

pod_field() { api GET "/api/v1/namespaces/default/pods/${pod}" | jq_py "$1"; }
pod_scheduled() { [[ "$(pod_field 'd["spec"].get("nodeName","")')" == "${node}" ]]; }
pod_running() { [[ "$(pod_field 'd["status"].get("phase","")')" == "Running" ]]; }
wait_until "pod ${pod} bound to ${node} (kube-scheduler)" pod_scheduled
wait_until "pod ${pod} Running (kwok)" pod_running
pod_field '"   podIP=%s hostIP=%s" % (d["status"].get("podIP"), d["status"].get("hostIP"))'
echo "SMOKE OK"
