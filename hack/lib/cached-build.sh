# Shared by the build scripts of the Go components nodeplan's tests and benches run (the control plane, the DRA
# CEL oracle, helm, the Karpenter bench harness, Karpenter's KWOK provider): each is built into a cache
# directory keyed by its pinned version, only when missing, one build at a time.
#
# Source it, then:
#   parse_build_args "$@"         # --force (rebuild) or nothing; anything else: usage, exit 2
#   begin_cached_build ROOT BIN   # with an is_built function defined: prints BIN and exits 0 when the build is
#                                 # up to date (also after waiting for a concurrent build); else holds the lock
#                                 # on ROOT and returns, with CGO_ENABLED=0, GOFLAGS=-mod=readonly and $jobs set
# and log MESSAGE (to stderr, prefixed with the script's name). Once sourced, `go` is a function that
# runs the real go with its "go: downloading MODULE VERSION" lines (hundreds on a cold build) folded into a
# progress line every 50 modules and a total; every other line (compiler and proxy errors) passes through
# and go's exit status is kept.

log() { echo "$(basename "$0"): $*" >&2; }

# stdin: go's stderr; stdout: it without the per-module download lines, with a count instead
go_download_progress() {
  awk -v prog="$(basename "$0")" '
    /^go: downloading / { n++; if (n % 50 == 0) { printf "%s: go: %d modules downloaded so far\n", prog, n; fflush() }; next }
    { print; fflush() }
    END { if (n) printf "%s: go: %d modules downloaded\n", prog, n }'
}

# with_heartbeat LABEL CMD...: run CMD, logging "LABEL: still building after Ns" every
# ${NODEPLAN_BUILD_HEARTBEAT:-60} seconds (a cold Kubernetes build compiles for many minutes without a word)
with_heartbeat() {
  local label="$1" began="${SECONDS}" beat status=0
  shift
  { while sleep "${NODEPLAN_BUILD_HEARTBEAT:-60}"; do log "${label}: still building after $((SECONDS - began))s"; done; } &
  beat=$!
  "$@" || status=$?
  kill "${beat}" 2>/dev/null || true
  wait "${beat}" 2>/dev/null || true
  return "${status}"
}

go() {
  # go's stdout stays stdout (fd 3); its stderr goes through the filter; pipefail keeps go's exit status
  local status
  { command go "$@" 2>&1 1>&3 3>&- | go_download_progress >&2; status="${PIPESTATUS[0]}"; } 3>&1
  return "${status}"
}

parse_build_args() {
  force=0
  case "${1:-}" in
    --force) force=1 ;;
    "") ;;
    *) echo "usage: $0 [--force]" >&2; exit 2 ;;
  esac
}

begin_cached_build() {
  local root="$1" bin="$2"
  if [[ "${force:-0}" == 0 ]] && is_built; then
    log "up to date: ${bin}"
    echo "${bin}"
    exit 0
  fi
  mkdir -p "${root}"
  # One build at a time per version (a second caller waits, then finds the binary built).
  exec 9>"${root}/.build.lock"
  flock 9
  if [[ "${force:-0}" == 0 ]] && is_built; then
    log "built by a concurrent run: ${bin}"
    echo "${bin}"
    exit 0
  fi
  export CGO_ENABLED=0
  # The checked-in go.sum is authoritative: never rewrite go.mod/go.sum during a build.
  export GOFLAGS="-mod=readonly -buildvcs=false"
  jobs="${NODEPLAN_BUILD_JOBS:-2}"
}

# install_go_binary NAME WHAT [PACKAGE]: go build PACKAGE (default: the module in ${here}) into ${bin}/NAME
# through a temporary directory (a failed build leaves no binary behind), then record sources_hash in ${stamp}.
install_go_binary() {
  local name="$1" what="$2" package="${3:-.}"
  build_tmp="${root}/bin.tmp.$$"
  rm -rf "${build_tmp}"
  mkdir -p "${build_tmp}"
  trap 'rm -rf "${build_tmp}"' EXIT
  log "building ${name} (${what}, -p ${jobs})"
  (cd "${here}" && go build -p "${jobs}" -trimpath -ldflags "-s -w" -o "${build_tmp}/${name}" "${package}")
  mkdir -p "${bin}"
  mv -f "${build_tmp}/${name}" "${bin}/${name}"
  sources_hash > "${stamp}"
}
