#!/usr/bin/env bash
# Builds the controller image from Containerfile with buildah (Debian's package; no daemon) and smoke-tests it.
#
#   1. base image localhost/nodeplan-base:bookworm, made once from Debian's packages (debootstrap, minbase +
#      python3.11): this machine reaches deb.debian.org but no container registry
#   2. localhost/nodeplan:<key> (and :latest) from Containerfile; <key> is a hash of every input (Containerfile,
#      lock, pyproject, the Python packages, the example snapshot, the commit), so an unchanged tree is not
#      rebuilt. On the host first: build/image/ gets the runtime part of requirements.lock
#      (runtime_requirements.py), its wheels (pip download, hash-checked again in the image), nodeplan's wheel
#      and a pip wheel; the image build itself downloads nothing (this machine's HTTPS goes through a proxy
#      whose CA only the host trusts)
#   3. inside the image, as its non-root user, with no network: nodeplan --version (the commit),
#      nodeplan run --help, nodeplan solve on the bundled example; dev packages absent; size printed
#
# What works here: buildah 1.28 from Debian bookworm, as root, storage driver vfs, isolation chroot (buildah
# refuses --network with chroot isolation; the smoke test gets an empty network namespace from unshare). No
# container registry is reachable, hence the debootstrap base. The image reference is the last line on stdout;
# everything else goes to stderr.
#
# Usage: hack/image/build.sh [--force] [--no-smoke]
# Env:   NODEPLAN_IMAGE       repository (default localhost/nodeplan)
#        NODEPLAN_IMAGE_BASE  base image (default localhost/nodeplan-base:bookworm)
#        DEBIAN_MIRROR        (default http://deb.debian.org/debian)
#        PYTHON               the host Python whose pip stages the wheels (default .venv/bin/python)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/../.." && pwd)"
image="${NODEPLAN_IMAGE:-localhost/nodeplan}"
base="${NODEPLAN_IMAGE_BASE:-localhost/nodeplan-base:bookworm}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
force=0 smoke=1
for arg in "$@"; do
  case "${arg}" in
    --force) force=1 ;;
    --no-smoke) smoke=0 ;;
    *) echo "usage: $0 [--force] [--no-smoke]" >&2; exit 2 ;;
  esac
done

log() { echo "hack/image/build.sh: $*" >&2; }
export STORAGE_DRIVER=vfs BUILDAH_ISOLATION=chroot
bah() { buildah --storage-driver vfs "$@"; }

if ! command -v buildah >/dev/null || ! command -v debootstrap >/dev/null; then
  if [[ "$(id -u)" != 0 ]]; then
    log "needs buildah and debootstrap (apt-get install -y buildah debootstrap)"
    exit 2
  fi
  log "installing buildah and debootstrap from Debian"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq buildah debootstrap >/dev/null
fi

exists() { bah inspect --type image "$1" >/dev/null 2>&1; }
start=${SECONDS}

# -- 1. the base image -------------------------------------------------------------------------------------------
if [[ "${force}" == 1 ]] || ! exists "${base}"; then
  log "making ${base} with debootstrap (bookworm minbase + python3.11) from ${mirror}"
  ctr="$(bah from scratch)"
  trap 'bah rm "${ctr}" >/dev/null 2>&1 || true' EXIT
  root="$(bah mount "${ctr}")"
  debootstrap --variant=minbase --include=python3.11,ca-certificates bookworm "${root}" "${mirror}" >&2
  rm -rf "${root}"/var/lib/apt/lists/* "${root}"/var/cache/apt/*.bin "${root}"/var/cache/apt/archives/*.deb \
    "${root}"/var/log/* "${root}"/usr/share/doc/* "${root}"/usr/share/man/* "${root}"/usr/share/locale/*
  echo "deb ${mirror} bookworm main" > "${root}/etc/apt/sources.list"
  bah umount "${ctr}" >/dev/null
  bah config --env LANG=C.UTF-8 --env PATH=/usr/sbin:/usr/bin:/sbin:/bin --cmd /bin/sh "${ctr}"
  bah commit --quiet --rm "${ctr}" "${base}" >/dev/null
  trap - EXIT
  log "base ready after $((SECONDS - start))s"
fi

# -- 2. the image, keyed by its inputs ---------------------------------------------------------------------------
cd "${repo}"
commit="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
if [[ "${commit}" != unknown ]] && [[ -n "$(git status --porcelain -- model solver providers controller cli reports \
    requirements.lock pyproject.toml Containerfile 2>/dev/null)" ]]; then
  commit="${commit}-dirty"  # built from a modified tree: say so
fi
key="$( { cat Containerfile .containerignore requirements.lock pyproject.toml hack/image/runtime_requirements.py \
          fixtures/snapshots/example.yaml; echo "${commit}" "${base}";
          find model solver providers controller cli reports -name '*.py' -print0 | sort -z | xargs -0 cat; } |
        sha256sum | cut -c1-12)"
ref="${image}:${key}"
if [[ "${force}" == 0 ]] && exists "${ref}"; then
  log "up to date: ${ref}"
else
  # build/image/: the runtime lock, its wheels (hash-checked again in the image), nodeplan's wheel, a pip wheel
  python="${PYTHON:-${repo}/.venv/bin/python}"
  stage="${repo}/build/image"
  rm -rf "${stage}"
  mkdir -p "${stage}/wheels"
  staged=${SECONDS}
  "${python}" "${here}/runtime_requirements.py" requirements.lock pyproject.toml > "${stage}/runtime.lock"
  pip=("${python}" -m pip --disable-pip-version-check --quiet)
  "${pip[@]}" download --require-hashes --no-deps --only-binary=:all: --python-version 3.11 \
    -r "${stage}/runtime.lock" -d "${stage}/wheels" >&2
  "${pip[@]}" download --no-deps --only-binary=:all: "pip==$("${python}" -m pip --version | cut -d' ' -f2)" \
    -d "${stage}/wheels" >&2
  # binutils for the builder stage's strip, from Debian itself through the host's apt (the base's release);
  # they stay in the builder stage
  . /etc/os-release
  [[ "${VERSION_CODENAME:-}" == bookworm ]] || { log "the host's apt must be bookworm's (the base's) to stage binutils"; exit 2; }
  mkdir -p "${stage}/debs"
  (cd "${stage}/debs" && apt-get download -qq binutils binutils-x86-64-linux-gnu binutils-common libbinutils \
    libctf-nobfd0 libctf0 libgprofng0 libjansson4 >&2 2>/dev/null)
  src="$(mktemp -d)"
  cp -r pyproject.toml README.md model solver providers controller cli reports "${src}/"
  find "${src}" -name __pycache__ -prune -exec rm -rf {} +
  "${pip[@]}" wheel --no-deps "${src}" -w "${stage}/wheels" >&2
  rm -rf "${src}"
  log "wheels staged in $((SECONDS - staged))s ($(du -sh "${stage}/wheels" | cut -f1))"
  log "building ${ref} (commit ${commit})"
  built=${SECONDS}
  bah build --quiet --layers --isolation chroot --build-arg "BASE=${base}" \
    --build-arg "COMMIT=${commit}" -f Containerfile -t "${ref}" -t "${image}:latest" . >&2
  log "image built in $((SECONDS - built))s"
  # vfs keeps a full copy per layer: drop earlier builds of this repository and dangling intermediates
  bah images --format '{{.Name}}:{{.Tag}}' | grep -x "${image}:[0-9a-f]\{12\}" | grep -vx "${ref}" |
    xargs -r buildah --storage-driver vfs rmi >/dev/null 2>&1 || true
  bah rmi --prune >/dev/null 2>&1 || true
fi

# -- 3. smoke test -----------------------------------------------------------------------------------------------
if [[ "${smoke}" == 1 ]]; then
  ctr="$(bah from --quiet "${ref}")"
  trap 'bah rm "${ctr}" >/dev/null 2>&1 || true' EXIT
  # chroot isolation cannot make a network namespace itself (buildah refuses --network none with it): unshare
  # gives the run an empty one, so the smoke test proves the image needs no network
  in_image() { unshare --net buildah --storage-driver vfs run --isolation chroot --user 65532:65532 "${ctr}" -- "$@"; }
  user="$(bah inspect --type image --format '{{.OCIv1.Config.User}}' "${ref}")"
  [[ "${user}" == "65532:65532" ]] || { log "image user is '${user}', expected 65532:65532"; exit 1; }
  version="$(in_image nodeplan --version)"
  [[ "${version}" == *"(commit ${commit})" ]] || { log "nodeplan --version: '${version}', expected commit ${commit}"; exit 1; }
  in_image nodeplan run --help >/dev/null
  # the controller's imports (kubernetes sync client, dynamic client, watch, config) despite the pruning
  in_image python -c 'import controller.run, kubernetes.client, kubernetes.dynamic, kubernetes.watch, kubernetes.config'
  # every compiled module still loads after strip (ortools runs in the solve below; CEL, YAML, msgspec here)
  in_image python -c 'import numpy, pandas, pydantic_core, yaml._yaml, yaml_rs, msgspec, botocore.session
from model.dracel import compile_selector
assert compile_selector("device.driver == \"gpu.example.com\"").cost_bound > 0'
  plan="$(in_image nodeplan solve /usr/share/nodeplan/example.yaml --time-limit 20 -o json)"
  echo "${plan}" | python3 -c 'import json, sys; p = json.load(sys.stdin); assert p["nodeClaims"] and \
    p["solver"]["status"] in ("OPTIMAL", "FEASIBLE"), p["solver"]' ||
    { log "nodeplan solve in the image did not plan the example"; exit 1; }
  if in_image python -c 'import socket; socket.create_connection(("deb.debian.org", 80), timeout=3)' 2>/dev/null; then
    log "the smoke test's container has network"; exit 1
  fi
  if in_image python -c 'import pytest' 2>/dev/null || in_image python -c 'import mypy' 2>/dev/null \
      || in_image python -m pip --version >/dev/null 2>&1; then
    log "dev packages or pip found in the image"; exit 1
  fi
  size="$(bah images --format '{{.Size}}' "${ref}" | awk 'NR == 1')"  # awk reads it all: no SIGPIPE under pipefail
  log "smoke test passed: ${version}; run --help and solve of the example OK as 65532 with no network; size ${size}"
fi
log "done in $((SECONDS - start))s"
echo "${ref}"
