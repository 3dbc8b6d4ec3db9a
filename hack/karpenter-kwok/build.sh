#!/usr/bin/env bash
# Builds Karpenter's KWOK provider (the Go main sigs.k8s.io/karpenter/kwok: Karpenter with its KWOK cloud
# provider) from the Go module proxy into a cache directory keyed by the pinned version
# (KARPENTER_VERSION in bench/karpenter/versions.env -- the one pin shared with the bench harness):
#   ${NODEPLAN_CACHE:-$HOME/.cache/nodeplan}/karpenter-kwok/<KARPENTER_VERSION>/bin/karpenter-kwok
# and copies the module's CRDs next to bin/:
#   .../crds/core/  pkg/apis/crds/*.yaml            (Karpenter's own karpenter.sh CRDs)
#   .../crds/kwok/  kwok/charts/crds/*.yaml + kwok/apis/crds/*.yaml  (what the KWOK chart installs,
#                   including the KWOKNodeClass CRD)
# Idempotent: when the binary's embedded build info names sigs.k8s.io/karpenter at the pinned version and
# the CRDs are present, nothing is built. The bin directory is the last line on stdout; the rest is stderr.
#
# Usage: hack/karpenter-kwok/build.sh [--force]
# Env:   NODEPLAN_CACHE       cache root (default $HOME/.cache/nodeplan)
#        NODEPLAN_BUILD_JOBS  go build -p (default 2)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../../bench/karpenter/versions.env
source "${here}/../../bench/karpenter/versions.env"

# shellcheck source=../lib/cached-build.sh
source "${here}/../lib/cached-build.sh"
parse_build_args "$@"

root="${NODEPLAN_CACHE:-${HOME}/.cache/nodeplan}/karpenter-kwok/${KARPENTER_VERSION}"
bin="${root}/bin"
binary="${bin}/karpenter-kwok"
crds="${root}/crds"

# Karpenter's go.mod names the minimum toolchain; an older local go fetches it from the module proxy.
export GOTOOLCHAIN="${GO_TOOLCHAIN}"
# `go version -m` and `go mod download` below must not rewrite go.mod/go.sum either.
export GOFLAGS="-mod=readonly -buildvcs=false"

is_built() {
  [[ -x "${binary}" ]] || return 1
  [[ -s "${crds}/core/karpenter.sh_nodepools.yaml" && -s "${crds}/kwok/karpenter.kwok.sh_kwoknodeclasses.yaml" ]] || return 1
  # The build info go embeds names the module version the main package came from.
  # read whole first: `go version -m | grep -q` fails under pipefail when grep exits before go has written all
  grep -qP "^\s+mod\s+sigs\.k8s\.io/karpenter\s+\Q${KARPENTER_VERSION}\E(\s|$)" <<<"$(go version -m "${binary}" 2>/dev/null)"
}

copy_crds() {
  local dir
  dir="$(cd "${here}" && go mod download -json "sigs.k8s.io/karpenter@${KARPENTER_VERSION}" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [[ -d "${dir}/pkg/apis/crds" && -d "${dir}/kwok/charts/crds" ]] || { log "karpenter module source not found"; return 1; }
  rm -rf "${crds}.tmp"
  mkdir -p "${crds}.tmp/core" "${crds}.tmp/kwok"
  cp "${dir}"/pkg/apis/crds/*.yaml "${crds}.tmp/core/"
  cp "${dir}"/kwok/charts/crds/*.yaml "${dir}"/kwok/apis/crds/*.yaml "${crds}.tmp/kwok/"
  chmod -R u+w "${crds}.tmp"
  rm -rf "${crds}"
  mv "${crds}.tmp" "${crds}"
}

begin_cached_build "${root}" "${bin}"

got="$(cd "${here}" && go list -m -f '{{.Version}}' sigs.k8s.io/karpenter)"
if [[ "${got}" != "${KARPENTER_VERSION}" ]]; then
  log "go.mod pins sigs.k8s.io/karpenter ${got}, bench/karpenter/versions.env says ${KARPENTER_VERSION};"
  log "update with: cd hack/karpenter-kwok && GOTOOLCHAIN=${GO_TOOLCHAIN} GOFLAGS=-mod=mod go get -tool sigs.k8s.io/karpenter/kwok@${KARPENTER_VERSION} && go mod tidy"
  exit 1
fi

start=${SECONDS}
log "building karpenter-kwok from sigs.k8s.io/karpenter ${KARPENTER_VERSION} (${GOTOOLCHAIN}, -p ${jobs})"
tmp="${root}/bin.tmp.$$"
rm -rf "${tmp}"
mkdir -p "${tmp}"
trap 'rm -rf "${tmp}"' EXIT
(cd "${here}" && go build -p "${jobs}" -trimpath -ldflags "-s -w" -o "${tmp}/karpenter-kwok" sigs.k8s.io/karpenter/kwok)
copy_crds
mkdir -p "${bin}"
mv -f "${tmp}/karpenter-kwok" "${binary}"
if ! is_built; then
  log "the built binary does not report the pinned version:"
  go version -m "${binary}" >&2 || true
  exit 1
fi
log "built in $((SECONDS - start))s: ${bin}"
echo "${bin}"
