#!/usr/bin/env bash
# Builds the Karpenter harness (this directory's Go module, requiring sigs.k8s.io/karpenter from the Go
# module proxy) into a cache directory keyed by the pinned version (versions.env):
#   ${NODEPLAN_CACHE:-$HOME/.cache/nodeplan}/karpenter-harness/<KARPENTER_VERSION>/bin/karpenter-harness
# Idempotent: when the binary exists and `karpenter-harness -version` reports the pinned version, nothing is
# built. The bin directory is printed as the last line on stdout; everything else goes to stderr.
#
# Usage: bench/karpenter/build.sh [--force]
# Env:   NODEPLAN_CACHE       cache root (default $HOME/.cache/nodeplan)
#        NODEPLAN_BUILD_JOBS  go build -p (default 2)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "${here}/versions.env"

# shellcheck source=../../hack/lib/cached-build.sh
source "${here}/../../hack/lib/cached-build.sh"
parse_build_args "$@"

root="${NODEPLAN_CACHE:-${HOME}/.cache/nodeplan}/karpenter-harness/${KARPENTER_VERSION}"
bin="${root}/bin"
binary="${bin}/karpenter-harness"

is_built() {
  [[ -x "${binary}" ]] || return 1
  [[ "$("${binary}" -version 2>/dev/null)" == "karpenter-harness sigs.k8s.io/karpenter ${KARPENTER_VERSION}" ]]
}

begin_cached_build "${root}" "${bin}"
export GOTOOLCHAIN="${GO_TOOLCHAIN}"

got="$(cd "${here}" && go list -m -f '{{.Version}}' sigs.k8s.io/karpenter)"
if [[ "${got}" != "${KARPENTER_VERSION}" ]]; then
  log "go.mod pins sigs.k8s.io/karpenter ${got}, versions.env says ${KARPENTER_VERSION} (see versions.env)"
  exit 1
fi

start=${SECONDS}
log "building karpenter-harness with sigs.k8s.io/karpenter ${KARPENTER_VERSION} (${GOTOOLCHAIN}, -p ${jobs})"
tmp="${root}/bin.tmp.$$"
rm -rf "${tmp}"
mkdir -p "${tmp}"
trap 'rm -rf "${tmp}"' EXIT
(cd "${here}" && go build -p "${jobs}" -trimpath -ldflags "-s -w" -o "${tmp}/karpenter-harness" .)
mkdir -p "${bin}"
mv -f "${tmp}/karpenter-harness" "${binary}"
if ! is_built; then
  log "the built binary does not report the pinned version:"
  "${binary}" -version >&2 || true
  exit 1
fi
log "built in $((SECONDS - start))s: ${bin}"
echo "${bin}"
