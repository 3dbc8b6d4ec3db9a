#!/usr/bin/env bash
# Builds the DRA CEL oracle (main.go in this module, k8s.io/dynamic-resource-allocation/cel) from the Go
# module proxy into a cache directory keyed by its pinned version (see versions.env):
#   ${NODEPLAN_CACHE:-$HOME/.cache/nodeplan}/dra-cel/<DRA_CEL_VERSION>/bin/dra-cel
# Idempotent: when the binary exists and answers a probe case, nothing is built. The bin directory is
# printed as the last line on stdout; everything else goes to stderr.
#
# Usage: hack/dra-cel/build.sh [--force]
# Env:   NODEPLAN_CACHE       cache root (default $HOME/.cache/nodeplan)
#        NODEPLAN_BUILD_JOBS  go build -p (default 2)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "${here}/versions.env"

# shellcheck source=../lib/cached-build.sh
source "${here}/../lib/cached-build.sh"
parse_build_args "$@"

root="${NODEPLAN_CACHE:-${HOME}/.cache/nodeplan}/dra-cel/${DRA_CEL_VERSION}"
bin="${root}/bin"
# The binary is keyed by version, but main.go may change between versions: the stamp records the hash of
# the module's sources, so an edited oracle is rebuilt.
stamp="${root}/sources.sha256"

sources_hash() {
  (cd "${here}" && cat go.mod go.sum main.go versions.env | sha256sum | cut -d' ' -f1)
}

is_built() {
  [[ -x "${bin}/dra-cel" ]] || return 1
  [[ -s "${stamp}" && "$(cat "${stamp}")" == "$(sources_hash)" ]] || return 1
  [[ "$(echo '{"expression":"device.driver == \"d\"","driver":"d"}' | "${bin}/dra-cel" 2>/dev/null)" == *'"result":true'* ]]
}

begin_cached_build "${root}" "${bin}"
export GOTOOLCHAIN=local

# The oracle must evaluate as the pinned control plane's scheduler does.
# shellcheck source=../control-plane/versions.env
staging="$(source "${here}/../control-plane/versions.env" && echo "${KUBERNETES_STAGING_VERSION}")"
if [[ "${DRA_CEL_VERSION}" != "${staging}" ]]; then
  log "versions.env pins DRA_CEL_VERSION=${DRA_CEL_VERSION}, the control plane's staging version is ${staging}"
  exit 1
fi
got="$(cd "${here}" && go list -m -f '{{.Version}}' k8s.io/dynamic-resource-allocation)"
if [[ "${got}" != "${DRA_CEL_VERSION}" ]]; then
  log "go.mod pins k8s.io/dynamic-resource-allocation ${got}, versions.env says ${DRA_CEL_VERSION}"
  exit 1
fi

start=${SECONDS}
install_go_binary dra-cel "k8s.io/dynamic-resource-allocation ${DRA_CEL_VERSION}"
if ! is_built; then
  log "the built oracle does not answer the probe case"
  exit 1
fi
log "built in $((SECONDS - start))s: ${bin}"
echo "${bin}"
