# Shared by the build scripts of the Go components nodeplan's tests and benches run (the control plane, the DRA
# CEL oracle, helm, the Karpenter bench harness, Karpenter's KWOK provider): each is built into a cache
# directory keyed by its pinned version, only when missing, one build at a time.
#
# Source it, then:
#   parse_build_args "$@"         # --force (rebuild) or nothing; anything else: usage, exit 2
#   begin_cached_build ROOT BIN   # with an is_built function defined: prints BIN and exits 0 when the build is
#                                 # up to date (also after waiting for a concurrent build); else holds the lock
#                                 # on ROOT and returns, with CGO_ENABLED=0, GOFLAGS=-mod=readonly and $jobs set
# and log MESSAGE (to stderr, prefixed with the script's name).

log() { echo "$(basename "$0"): $*" >&2; }

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
