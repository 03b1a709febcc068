#!/usr/bin/env bash
# Build helm from the Go module proxy into a cache outside the clone.
#
# Why: the chart tests run `helm lint` and `helm template`, and no binary may be downloaded or
# committed. Fresh clones on one machine share the cache (like tools/build-control-plane.sh).
# Idempotent: builds only when the binary is missing. Prints the path of the helm binary.
set -euo pipefail

HELM_VERSION="${FINOPS_HELM_VERSION:-3.21.4}"
CACHE_ROOT="${FINOPS_HELM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/finops/helm}"
OUT="$CACHE_ROOT/$HELM_VERSION"
HELM="$OUT/helm"

log() { printf '[build-helm] %s\n' "$*" >&2; }

if [ ! -x "$HELM" ]; then
  command -v go >/dev/null || { log "go is required (the machine's Go toolchain)"; exit 1; }
  mkdir -p "$OUT"
  work="$(mktemp -d "$OUT/build.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  export CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOBIN="$work"
  # Helm's Makefile stamps the version and the Kubernetes version its client libraries
  # speak; without them `helm version` prints only the minor and client-only commands
  # (lint, template, install --dry-run=client) assume Kubernetes v1.20.
  gomod="$(go mod download -json "helm.sh/helm/v3@v$HELM_VERSION" \
    | python3 -c 'import json,sys;print(json.load(sys.stdin)["GoMod"])')"
  k8s_minor="$(sed -n 's#^[[:space:]]*k8s.io/client-go v0\.\([0-9]*\)\..*#\1#p' "$gomod" | head -n1)"
  [ -n "$k8s_minor" ] || { log "cannot read the client-go version of helm v$HELM_VERSION"; exit 1; }
  log "compiling helm v$HELM_VERSION for Kubernetes 1.$k8s_minor (a few minutes on a cold cache)"
  go install -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=v$HELM_VERSION \
      -X helm.sh/helm/v3/internal/version.gitTreeState=clean \
      -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 \
      -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$k8s_minor \
      -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 \
      -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$k8s_minor" \
    "helm.sh/helm/v3/cmd/helm@v$HELM_VERSION"
  mv "$work/helm" "$HELM.tmp"
  mv "$HELM.tmp" "$HELM"
fi
echo "$HELM"
