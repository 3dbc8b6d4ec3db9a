#!/usr/bin/env bash
# Installs Debian's headless-capable Chromium for the HTML report test (tests/report/test_html_render.py).
# Idempotent: does nothing when chromium is already on PATH. Needs root (or sudo) and apt-get.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-chromium: apt-get not found; install chromium yourself (the HTML render test is skipped)" >&2
  exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo -n"; else
    echo "install-chromium: not root and no sudo; the HTML render test is skipped" >&2
    exit 0
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
command -v chromium >/dev/null
