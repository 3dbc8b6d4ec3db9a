#!/usr/bin/env bash
# Fetch Karpenter's published Grafana dashboards (aws/karpenter-provider-aws, Apache-2.0) into the cache the
# dashboard tests read (tests/e2e/test_dashboards.py). They are not kept in this repository; the tests check
# nodeplan's own dashboard always and Karpenter's when this directory holds them. Needs access to GitHub.
#   usage: hack/dashboards/fetch.sh        prints the directory as its last stdout line
set -euo pipefail
commit=1d927085dd81a9df9301e613f371dac5b4d16bfe
dir="${NODEPLAN_CACHE:-${HOME}/.cache/nodeplan}/karpenter-dashboards/${commit}"
base="https://raw.githubusercontent.com/aws/karpenter-provider-aws/${commit}/website/content/en/preview/getting-started/getting-started-with-karpenter"
mkdir -p "${dir}"
for name in karpenter-capacity-dashboard karpenter-controllers karpenter-controllers-allocation \
            karpenter-performance-dashboard; do
  [[ -s "${dir}/${name}.json" ]] || curl -fsSL --max-time 60 -o "${dir}/${name}.json" "${base}/${name}.json"
done
echo "${dir}"
