#!/usr/bin/env bash
# Builds the test control plane from Go modules (no downloads besides the Go module proxy):
#   kube-apiserver, kube-scheduler, kube-controller-manager  (module ./k8s)
#   etcd                                                      (module ./etcd)
#   kwok                                                      (module ./kwok)
# into a cache directory keyed by every pinned version (see versions.env):
#   ${NODEPLAN_CACHE:-$HOME/.cache/nodeplan}/control-plane/k8s-<v>_etcd-<v>_kwok-<v>/bin
# Idempotent: when every binary exists and `kube-apiserver --version` (and etcd's and kwok's
# --version) match the pins, nothing is built. The bin directory is printed as the last line on stdout;
# everything else goes to stderr.
#
# Usage: hack/control-plane/build.sh [--force]
# Env:   NODEPLAN_CACHE       cache root (default $HOME/.cache/nodeplan)
#        NODEPLAN_BUILD_JOBS  go build -p (default 2; the machines have 2 cores / 24 GiB)
# A cold build took about 9 minutes on 2 idle cores and 34 minutes on 2 cores shared with other builds (see
# README.md). Progress goes to stderr: one line per component, a line every 50 modules downloaded and every
# minute of compiling (hack/lib/cached-build.sh), never the hundreds of "go: downloading" lines.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "${here}/versions.env"

# shellcheck source=../lib/cached-build.sh
source "${here}/../lib/cached-build.sh"
parse_build_args "$@"

key="k8s-${KUBERNETES_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}"
root="${NODEPLAN_CACHE:-${HOME}/.cache/nodeplan}/control-plane/${key}"
bin="${root}/bin"
binaries=(kube-apiserver kube-scheduler kube-controller-manager etcd kwok)
# kwok needs Stage objects; the ones kwokctl uses by default (node-fast, node-heartbeat-with-lease,
# pod-fast) are taken from the kwok module and written next to bin/ (cluster.sh passes them).
stages="${root}/kwok-stages.yaml"
stage_files=(
  node/fast/node-initialize.yaml
  node/heartbeat-with-lease/node-heartbeat-with-lease.yaml
  pod/fast/pod-ready.yaml
  pod/fast/pod-complete.yaml
  pod/fast/pod-delete.yaml
)

binaries_built() {
  local b
  for b in "${binaries[@]}"; do
    [[ -x "${bin}/${b}" ]] || return 1
  done
  [[ "$("${bin}/kube-apiserver" --version 2>/dev/null)" == "Kubernetes ${KUBERNETES_VERSION}" ]] || return 1
  # the output is read whole before grep sees it: a `cmd | grep -q` pipeline fails under pipefail whenever grep
  # exits on its match before cmd has written its last line (SIGPIPE) — a cold build failed so
  grep -qx "etcd Version: ${ETCD_VERSION#v}" <<<"$("${bin}/etcd" --version 2>/dev/null)" || return 1
  grep -q "^kwok version ${KWOK_VERSION} " <<<"$("${bin}/kwok" --version 2>/dev/null)" || return 1
}

write_stages() {
  local dir f
  dir="$(cd "${here}/kwok" && GOTOOLCHAIN=local GOFLAGS=-mod=readonly go mod download -json sigs.k8s.io/kwok |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [[ -d "${dir}/kustomize/stage" ]] || { log "kwok module source not found"; return 1; }
  {
    echo "# kwok ${KWOK_VERSION} stages (kwokctl defaults), from sigs.k8s.io/kwok@${KWOK_VERSION}/kustomize/stage"
    for f in "${stage_files[@]}"; do
      echo "---"
      cat "${dir}/kustomize/stage/${f}"
    done
  } > "${stages}.tmp"
  mv -f "${stages}.tmp" "${stages}"
}

is_built() {
  binaries_built && [[ -s "${stages}" ]]
}

# built binaries with their stages file missing: only the stages are written
if [[ "${force}" == 0 ]] && binaries_built && [[ ! -s "${stages}" ]]; then
  write_stages
fi
begin_cached_build "${root}" "${bin}"
export GOTOOLCHAIN=local
gobuild=(go build -p "${jobs}" -trimpath)
# build_in DIR ARGS...: go build ARGS in module DIR, with a heartbeat while it compiles
build_in() {
  local dir="$1"
  shift
  with_heartbeat "${dir}" in_dir "${here}/${dir}" "${gobuild[@]}" "$@"
}
in_dir() { (cd "$1" && shift && "$@"); }

# The go.mod files must agree with versions.env.
check_pin() { # dir module version
  local got
  got="$(cd "${here}/$1" && go list -m -f '{{.Version}}' "$2")"
  if [[ "${got}" != "$3" ]]; then
    log "$1/go.mod pins $2 ${got}, versions.env says $3 (see versions.env for how to update)"
    exit 1
  fi
}
check_pin k8s k8s.io/kubernetes "${KUBERNETES_VERSION}"
check_pin k8s k8s.io/api "${KUBERNETES_STAGING_VERSION}"
check_pin etcd go.etcd.io/etcd/server/v3 "${ETCD_VERSION}"
check_pin kwok sigs.k8s.io/kwok "${KWOK_VERSION}"

# Build into a scratch directory and move the binaries in only when everything is built,
# so an interrupted build never looks complete.
tmp="${root}/bin.tmp.$$"
rm -rf "${tmp}"
mkdir -p "${tmp}"
trap 'rm -rf "${tmp}"' EXIT
start=${SECONDS}

# Version stamp as Kubernetes' hack/lib/version.sh does (kubectl, kwok and clients read it).
# buildDate is the module's publication time, so the build is reproducible.
ver="${KUBERNETES_VERSION#v}"
major="${ver%%.*}"
minor="${ver#*.}"; minor="${minor%%.*}"
build_date="$(cd "${here}/k8s" && go list -m -f '{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' k8s.io/kubernetes)"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X ${pkg}.gitVersion=${KUBERNETES_VERSION}"
  ldflags+=" -X ${pkg}.gitMajor=${major} -X ${pkg}.gitMinor=${minor}"
  ldflags+=" -X ${pkg}.gitTreeState=clean -X ${pkg}.gitCommit="
  ldflags+=" -X ${pkg}.buildDate=${build_date}"
done

log "building kube-apiserver kube-scheduler kube-controller-manager ${KUBERNETES_VERSION} (-p ${jobs})"
build_in k8s -ldflags "${ldflags}" -o "${tmp}/" \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-scheduler \
  k8s.io/kubernetes/cmd/kube-controller-manager
log "k8s done after $((SECONDS - start))s"

log "building etcd ${ETCD_VERSION}"
build_in etcd -ldflags "-s -w" -o "${tmp}/etcd" go.etcd.io/etcd/server/v3
log "etcd done after $((SECONDS - start))s"

log "building kwok ${KWOK_VERSION}"
build_in kwok -ldflags "-s -w" -o "${tmp}/kwok" sigs.k8s.io/kwok/cmd/kwok
log "kwok done after $((SECONDS - start))s"

write_stages
mkdir -p "${bin}"
for b in "${binaries[@]}"; do
  mv -f "${tmp}/${b}" "${bin}/${b}"
done
if ! is_built; then
  log "built binaries do not report the pinned versions:"
  "${bin}/kube-apiserver" --version >&2 || true
  "${bin}/etcd" --version >&2 || true
  exit 1
fi
log "built in $((SECONDS - start))s: ${bin}"
echo "${bin}"
