#!/usr/bin/env bash
# A real Kubernetes control plane for e2e tests, loopback only:
#   etcd, kube-apiserver (token auth + RBAC), kube-scheduler, kube-controller-manager,
#   kwok (simulates only Nodes annotated kwok.x-k8s.io/node=fake, and the pods bound to them).
#
# Usage: hack/control-plane/cluster.sh up|down|env|status|restart-apiserver
#   up      start everything on free 127.0.0.1 ports, wait until ready, print `env` output
#   down    stop exactly the processes `up` started (by PID) and remove the state dir
#           (`down --keep` keeps it, e.g. to read the logs)
#   env     print `export KEY=value` lines: eval "$(hack/control-plane/cluster.sh env)"
#   status  exit 0 if every process is alive and /readyz answers
#   restart-apiserver [SECONDS]
#           stop kube-apiserver (SIGTERM), keep it down SECONDS (default 0), start it again with the same
#           flags on the same port and wait for /readyz; etcd and the other components keep running and
#           reconnect by themselves (what the controller's e2e test of an API-server restart needs)
# Env:
#   NODEPLAN_CLUSTER_DIR        state dir: pki, kubeconfig, logs, etcd data (default /tmp/nodeplan-cluster)
#   NODEPLAN_CONTROL_PLANE_BIN  dir with the binaries (default: the output of build.sh, which
#                               builds them first if needed — a cold build takes ~6-8 min)
#   NODEPLAN_CLUSTER_TIMEOUT    seconds to wait for readiness (default 120)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dir="${NODEPLAN_CLUSTER_DIR:-/tmp/nodeplan-cluster}"
timeout="${NODEPLAN_CLUSTER_TIMEOUT:-120}"
# Stop order is the reverse of this start order.
components=(etcd kube-apiserver kube-scheduler kube-controller-manager kwok)
host=127.0.0.1

marker=.nodeplan-cluster
log() { echo "cluster.sh: $*" >&2; }
die() { log "$*"; exit 1; }

# Start time (field 22 of /proc/PID/stat) of a live, non-zombie process; fails otherwise.
proc_id() {
  local stat rest
  stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
  rest="${stat##*) }"
  # shellcheck disable=SC2086
  set -- ${rest}
  [[ "$1" != Z && "$1" != X ]] || return 1
  echo "${20}"
}

# True if the process recorded for component $1 is alive and is the one `up` started (same PID
# and same start time, so a recycled PID is never mistaken for it).
alive() {
  local pidfile="${dir}/run/$1.pid" pid started
  [[ -s "${pidfile}" && -s "${dir}/run/$1.start" ]] || return 1
  pid="$(<"${pidfile}")"
  [[ "${pid}" =~ ^[0-9]+$ ]] || return 1
  started="$(proc_id "${pid}")" || return 1
  [[ "${started}" == "$(<"${dir}/run/$1.start")" ]]
}

any_alive() {
  local c
  for c in "${components[@]}"; do
    if alive "${c}"; then return 0; fi
  done
  return 1
}

# Removes the state dir, but only if it is one that `up` made (or is empty).
remove_dir() {
  [[ -e "${dir}" ]] || return 0
  if [[ -e "${dir}/${marker}" ]] || [[ -d "${dir}" && -z "$(ls -A "${dir}")" ]]; then
    rm -rf "${dir}"
  else
    die "${dir} exists and was not made by $0; refusing to remove it (set NODEPLAN_CLUSTER_DIR)"
  fi
}

print_env() {
  [[ -s "${dir}/env" ]] || die "no cluster in ${dir} (run: $0 up)"
  cat "${dir}/env"
}

readyz() { # prints nothing, succeeds when the API server is ready
  curl -sf --max-time 5 --cacert "${dir}/pki/ca.crt" \
    -H "Authorization: Bearer $(<"${dir}/token")" \
    "https://${host}:$(<"${dir}/run/apiserver.port")/readyz" >/dev/null
}

api() { # METHOD PATH [curl args...]: JSON API call as admin
  local method="$1" path="$2"
  shift 2
  curl -sS --max-time 10 --cacert "${dir}/pki/ca.crt" -H "Authorization: Bearer $(<"${dir}/token")" \
    -H 'Accept: application/json' -X "${method}" "https://${host}:$(<"${dir}/run/apiserver.port")${path}" "$@"
}

stop_component() { # NAME: SIGTERM (SIGKILL after 10 s) the process `up` started for NAME, forget its PID
  local c="$1" pid n
  if alive "${c}"; then
    pid="$(<"${dir}/run/${c}.pid")"
    kill -TERM "${pid}" 2>/dev/null || true
    for ((n = 0; n < 100; n++)); do
      alive "${c}" || break
      sleep 0.1
    done
    if alive "${c}"; then
      log "${c} (pid ${pid}) ignored SIGTERM for 10s; sending SIGKILL"
      kill -KILL "${pid}" 2>/dev/null || true
    fi
    log "stopped ${c} (pid ${pid})"
  fi
  rm -f "${dir}/run/${c}.pid" "${dir}/run/${c}.start"
}

stop_all() {
  local i
  for ((i = ${#components[@]} - 1; i >= 0; i--)); do
    stop_component "${components[i]}"
  done
}

free_ports() { # N: prints N distinct free TCP ports on 127.0.0.1
  python3 - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
for s in socks:
    s.close()
EOF
}

gen_pki() {
  local pki="${dir}/pki"
  mkdir -p "${pki}"
  (
    cd "${pki}"
    umask 077
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=nodeplan-test-ca" \
      -keyout ca.key -out ca.crt 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" \
      -keyout apiserver.key -out apiserver.csr 2>/dev/null
    printf '%s\n' \
      "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local" \
      "keyUsage=critical,digitalSignature,keyEncipherment" "extendedKeyUsage=serverAuth" > apiserver.ext
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile apiserver.ext -out apiserver.crt 2>/dev/null
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    rm -f apiserver.csr apiserver.ext ca.srl
  )
}

write_kubeconfig() { # PORT TOKEN
  local ca
  ca="$(base64 -w0 < "${dir}/pki/ca.crt")"
  (umask 077; cat > "${dir}/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: nodeplan-test
  cluster:
    server: https://${host}:$1
    certificate-authority-data: ${ca}
users:
- name: admin
  user:
    token: $2
contexts:
- name: nodeplan-test
  context:
    cluster: nodeplan-test
    user: admin
current-context: nodeplan-test
EOF
  )
}

start() { # NAME BINARY ARGS...: start one component in the background, record its PID
  local name="$1" exe="$2"
  shift 2
  # Started directly (no wrapper), so $! is the component's own PID.
  nohup "${exe}" "$@" > "${dir}/logs/${name}.log" 2>&1 < /dev/null &
  echo $! > "${dir}/run/${name}.pid"
  proc_id $! > "${dir}/run/${name}.start" || true
  log "started ${name} (pid $!)"
}

wait_for() { # WHAT COMMAND...: poll until COMMAND succeeds; fail if a component died
  local what="$1" deadline=$((SECONDS + timeout)) c
  shift
  until "$@"; do
    for c in "${components[@]}"; do
      if [[ -s "${dir}/run/${c}.pid" ]] && ! alive "${c}"; then
        log "${c} exited; last lines of ${dir}/logs/${c}.log:"
        tail -n 30 "${dir}/logs/${c}.log" >&2 || true
        return 1
      fi
    done
    if ((SECONDS >= deadline)); then
      log "timed out after ${timeout}s waiting for ${what}"
      return 1
    fi
    sleep 0.5
  done
  log "${what}: ok"
}

start_apiserver() { # BIN ETCD_PORT API_PORT: the one place kube-apiserver's flags are written
  local bin="$1" etcd_port="$2" api_port="$3"
  start kube-apiserver "${bin}/kube-apiserver" \
    --etcd-servers="http://${host}:${etcd_port}" \
    --bind-address="${host}" --advertise-address="${host}" --secure-port="${api_port}" \
    --tls-cert-file="${dir}/pki/apiserver.crt" --tls-private-key-file="${dir}/pki/apiserver.key" \
    --client-ca-file="${dir}/pki/ca.crt" \
    --token-auth-file="${dir}/pki/tokens.csv" \
    --authorization-mode=RBAC \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="${dir}/pki/sa.pub" \
    --service-account-signing-key-file="${dir}/pki/sa.key" \
    --service-cluster-ip-range=10.0.0.0/24 \
    --endpoint-reconciler-type=none \
    --allow-privileged=true
}

restart_apiserver() { # [SECONDS]: stop kube-apiserver, wait, start it again with the same flags and port
  local down_for="${1:-0}" bin etcd_port api_port
  [[ -s "${dir}/run/ports" && -s "${dir}/run/bin" ]] || die "no cluster in ${dir} (run: $0 up)"
  [[ "${down_for}" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "restart-apiserver: SECONDS must be a number"
  bin="$(<"${dir}/run/bin")"
  etcd_port="$(sed -n 's/^etcd=//p' "${dir}/run/ports")"
  api_port="$(sed -n 's/^kube-apiserver=//p' "${dir}/run/ports")"
  alive etcd || die "etcd is not running in ${dir}"
  stop_component kube-apiserver
  sleep "${down_for}"
  start_apiserver "${bin}" "${etcd_port}" "${api_port}"
  wait_for "kube-apiserver /readyz" readyz
}

healthz() { # PORT: component's own /healthz (served without auth)
  curl -skf --max-time 5 "https://${host}:$1/healthz" >/dev/null
}

kwok_healthz() { curl -sf --max-time 5 "http://${host}:$1/healthz" >/dev/null; }

default_serviceaccount() { api GET /api/v1/namespaces/default/serviceaccounts/default -f -o /dev/null 2>/dev/null; }

up() {
  local bin stages etcd_port etcd_peer_port api_port sched_port kcm_port kwok_port token
  if [[ -d "${dir}/run" ]] && any_alive; then
    die "a cluster is already running in ${dir} (run: $0 down)"
  fi
  remove_dir

  if [[ -n "${NODEPLAN_CONTROL_PLANE_BIN:-}" ]]; then
    bin="${NODEPLAN_CONTROL_PLANE_BIN}"
  else
    bin="$("${here}/build.sh" | tail -n 1)"
  fi
  stages="$(dirname "${bin}")/kwok-stages.yaml"
  for c in "${components[@]}"; do
    [[ -x "${bin}/${c}" ]] || die "missing ${bin}/${c} (run ${here}/build.sh)"
  done
  [[ -s "${stages}" ]] || die "missing ${stages} (run ${here}/build.sh)"

  mkdir -p "${dir}"/{run,logs,etcd}
  chmod 700 "${dir}" "${dir}/etcd"
  touch "${dir}/${marker}"
  gen_pki
  token="$(openssl rand -hex 24)"
  (umask 077; echo "${token}" > "${dir}/token"; echo "${token},admin,admin,system:masters" > "${dir}/pki/tokens.csv")

  read -r etcd_port etcd_peer_port api_port sched_port kcm_port kwok_port < <(free_ports 6)
  echo "${api_port}" > "${dir}/run/apiserver.port"
  write_kubeconfig "${api_port}" "${token}"

  # If anything below fails, stop what was started so far.
  up_ok=0
  trap 'if [[ "${up_ok:-1}" == 0 ]]; then log "up failed; stopping what was started (logs kept in ${dir}/logs)"; stop_all; fi' EXIT

  start etcd "${bin}/etcd" \
    --name=n0 --data-dir="${dir}/etcd" \
    --listen-client-urls="http://${host}:${etcd_port}" --advertise-client-urls="http://${host}:${etcd_port}" \
    --listen-peer-urls="http://${host}:${etcd_peer_port}" --initial-advertise-peer-urls="http://${host}:${etcd_peer_port}" \
    --initial-cluster="n0=http://${host}:${etcd_peer_port}" --initial-cluster-state=new \
    --unsafe-no-fsync=true --log-level=warn
  wait_for "etcd" curl -sf --max-time 5 "http://${host}:${etcd_port}/health" -o /dev/null

  echo "${bin}" > "${dir}/run/bin"
  start_apiserver "${bin}" "${etcd_port}" "${api_port}"
  wait_for "kube-apiserver /readyz" readyz

  # NODEPLAN_CLUSTER_SCHEDULER_ARGS: extra flags, split on spaces (bench-controller's --scheduler-log: its verbosity)
  # shellcheck disable=SC2086
  start kube-scheduler "${bin}/kube-scheduler" \
    --kubeconfig="${dir}/kubeconfig" \
    --bind-address="${host}" --secure-port="${sched_port}" --leader-elect=false ${NODEPLAN_CLUSTER_SCHEDULER_ARGS:-}
  start kube-controller-manager "${bin}/kube-controller-manager" \
    --kubeconfig="${dir}/kubeconfig" \
    --bind-address="${host}" --secure-port="${kcm_port}" --leader-elect=false \
    --service-account-private-key-file="${dir}/pki/sa.key" --root-ca-file="${dir}/pki/ca.crt" \
    --cluster-signing-cert-file="${dir}/pki/ca.crt" --cluster-signing-key-file="${dir}/pki/ca.key"
  # --node-lease-duration-seconds: kwok keeps a Lease per fake Node like a kubelet (kwokctl passes
  # 40; the kwok binary's default is 0 = no leases, and then the Nodes' heartbeat is status only).
  # --node-ip: the address written into fake Nodes' status (where the API server would reach
  # their "kubelet" for logs/exec) is kwok's own loopback server. Pod IPs from --cidr are only
  # recorded in pod status; nothing connects to them.
  start kwok "${bin}/kwok" \
    --kubeconfig="${dir}/kubeconfig" --config="${stages}" \
    --manage-all-nodes=false --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
    --node-lease-duration-seconds=40 \
    --cidr=10.64.0.0/16 --node-ip="${host}" --node-port="${kwok_port}" \
    --server-address="${host}:${kwok_port}"

  wait_for "kube-scheduler /healthz" healthz "${sched_port}"
  wait_for "kube-controller-manager /healthz" healthz "${kcm_port}"
  wait_for "kwok /healthz" kwok_healthz "${kwok_port}"
  # The service-account controller has run: pods can be created in namespace default.
  wait_for "serviceaccount default/default" default_serviceaccount
  up_ok=1

  cat > "${dir}/env" <<EOF
export NODEPLAN_CLUSTER_DIR='${dir}'
export KUBECONFIG='${dir}/kubeconfig'
export NODEPLAN_APISERVER_URL='https://${host}:${api_port}'
export NODEPLAN_APISERVER_TOKEN='${token}'
export NODEPLAN_APISERVER_CA='${dir}/pki/ca.crt'
EOF
  printf '%s\n' "etcd=${etcd_port}" "etcd-peer=${etcd_peer_port}" "kube-apiserver=${api_port}" \
    "kube-scheduler=${sched_port}" "kube-controller-manager=${kcm_port}" "kwok=${kwok_port}" > "${dir}/run/ports"
  log "ready: https://${host}:${api_port} (state in ${dir})"
  print_env
}

down() {
  [[ -d "${dir}" ]] || { log "nothing to stop in ${dir}"; return 0; }
  [[ -d "${dir}/run" ]] && stop_all
  if [[ "${1:-}" == "--keep" ]]; then
    log "kept ${dir}"
  else
    remove_dir
  fi
}

status() {
  local c ok=0
  for c in "${components[@]}"; do
    if alive "${c}"; then
      log "${c}: running (pid $(<"${dir}/run/${c}.pid"))"
    else
      log "${c}: not running"
      ok=1
    fi
  done
  if [[ -s "${dir}/run/apiserver.port" ]] && readyz; then log "kube-apiserver /readyz: ok"; else log "kube-apiserver /readyz: failing"; ok=1; fi
  return "${ok}"
}

case "${1:-}" in
  up) up ;;
  down) down "${2:-}" ;;
  env) print_env ;;
  status) status ;;
  restart-apiserver) restart_apiserver "${2:-0}" ;;
  *) echo "usage: $0 up|down [--keep]|env|status|restart-apiserver [SECONDS]" >&2; exit 2 ;;
esac
