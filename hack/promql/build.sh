#!/usr/bin/env bash
# Builds the PromQL oracle (main.go in this module, Prometheus' promql engine) from the Go module proxy into a
# cache directory keyed by its pinned version (see versions.env):
#   ${NODEPLAN_CACHE:-$HOME/.cache/nodeplan}/promql/<PROMQL_VERSION>/bin/promql
# Idempotent: when the binary exists, its sources are unchanged and it answers a probe query, nothing is built.
# The bin directory is printed as the last line on stdout; everything else goes to stderr.
#
# Usage: hack/promql/build.sh [--force]
# Env:   NODEPLAN_CACHE       cache root (default $HOME/.cache/nodeplan)
#        NODEPLAN_BUILD_JOBS  go build -p (default 2)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "${here}/versions.env"

# shellcheck source=../lib/cached-build.sh
source "${here}/../lib/cached-build.sh"
parse_build_args "$@"

root="${NODEPLAN_CACHE:-${HOME}/.cache/nodeplan}/promql/${PROMQL_VERSION}"
bin="${root}/bin"
# keyed by version, but main.go may change between versions: the stamp records the hash of the sources
stamp="${root}/sources.sha256"

sources_hash() {
  (cd "${here}" && cat go.mod go.sum main.go versions.env | sha256sum | cut -d' ' -f1)
}

probe='{"scrapes":[{"timeMs":1000,"text":"up 1\n"}],"queries":[{"expr":"sum(up)","timeMs":1000}]}'

is_built() {
  [[ -x "${bin}/promql" ]] || return 1
  [[ -s "${stamp}" && "$(cat "${stamp}")" == "$(sources_hash)" ]] || return 1
  [[ "$(echo "${probe}" | "${bin}/promql" 2>/dev/null)" == *'"value":1'* ]]
}

begin_cached_build "${root}" "${bin}"
export GOTOOLCHAIN=local

got="$(cd "${here}" && go list -m -f '{{.Version}}' github.com/prometheus/prometheus)"
if [[ "${got}" != "${PROMQL_VERSION}" ]]; then
  log "go.mod pins github.com/prometheus/prometheus ${got}, versions.env says ${PROMQL_VERSION}"
  exit 1
fi

start=${SECONDS}
install_go_binary promql "github.com/prometheus/prometheus ${PROMQL_VERSION}"
if ! is_built; then
  log "the built oracle does not answer the probe query"
  exit 1
fi
log "built in $((SECONDS - start))s: ${bin}"
echo "${bin}"
