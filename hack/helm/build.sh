#!/usr/bin/env bash
# Builds helm from the Go module proxy (module ./, `tool helm.sh/helm/v3/cmd/helm`) for the chart tests, into a
# cache directory keyed by the pinned version (versions.env):
#   ${NODEPLAN_CACHE:-$HOME/.cache/nodeplan}/helm/<version>/bin/helm
# Idempotent: when the binary exists and `helm version --template '{{.Version}}'` matches the pin, nothing is
# built. The bin directory is printed as the last line on stdout; everything else goes to stderr.
#
# Usage: hack/helm/build.sh [--force]
# Env:   NODEPLAN_CACHE       cache root (default $HOME/.cache/nodeplan)
#        NODEPLAN_BUILD_JOBS  go build -p (default 2)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "${here}/versions.env"

# shellcheck source=../lib/cached-build.sh
source "${here}/../lib/cached-build.sh"
parse_build_args "$@"

root="${NODEPLAN_CACHE:-${HOME}/.cache/nodeplan}/helm/${HELM_VERSION}"
bin="${root}/bin"

is_built() {
  [[ -x "${bin}/helm" ]] && [[ "$("${bin}/helm" version --template '{{.Version}}' 2>/dev/null)" == "${HELM_VERSION}" ]]
}

begin_cached_build "${root}" "${bin}"
export GOTOOLCHAIN=local
got="$(cd "${here}" && go list -m -f '{{.Version}}' helm.sh/helm/v3)"
if [[ "${got}" != "${HELM_VERSION}" ]]; then
  log "go.mod pins helm.sh/helm/v3 ${got}, versions.env says ${HELM_VERSION}"
  exit 1
fi

# Version stamps as helm's own Makefile sets them: the release version, and the Kubernetes version helm lint /
# template assume (client-go v0.X.Y -> 1.X).
client_go="$(cd "${here}" && go list -m -f '{{.Version}}' k8s.io/client-go)"
k8s_minor="$(echo "${client_go}" | cut -d. -f2)"
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}"
ldflags+=" -X helm.sh/helm/v3/internal/version.metadata= -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  ldflags+=" -X ${pkg}.k8sVersionMajor=1 -X ${pkg}.k8sVersionMinor=${k8s_minor}"
done

tmp="${root}/bin.tmp.$$"
rm -rf "${tmp}"
mkdir -p "${tmp}"
trap 'rm -rf "${tmp}"' EXIT
start=${SECONDS}
log "building helm ${HELM_VERSION} (-p ${NODEPLAN_BUILD_JOBS:-2})"
(cd "${here}" && go build -p "${NODEPLAN_BUILD_JOBS:-2}" -trimpath -ldflags "${ldflags}" -o "${tmp}/helm" \
  helm.sh/helm/v3/cmd/helm)
mkdir -p "${bin}"
mv -f "${tmp}/helm" "${bin}/helm"
if ! is_built; then
  log "the built helm does not report ${HELM_VERSION}: $("${bin}/helm" version 2>&1 || true)"
  exit 1
fi
log "built in $((SECONDS - start))s: ${bin}"
echo "${bin}"
