#!/usr/bin/env bash
# Copy the generated CRDs (deploy/crds/) into the Helm chart's crds/ folder.
#
# Why: a packaged chart needs real files, not symlinks, and deploy/crds/ stays the one
# generated source (python -m finops.api.crds --write). tests/kube/test_helm_chart.py fails
# when the two folders differ; run this after regenerating the CRDs.
set -euo pipefail
cd "$(dirname "$0")/.."
src=deploy/crds
dst=deploy/helm/finops-operator/crds
mkdir -p "$dst"
rm -f "$dst"/*.yaml
cp "$src"/*.yaml "$dst"/
echo "$dst"
