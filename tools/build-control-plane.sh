#!/usr/bin/env bash
# Build a real kube-apiserver and etcd from the Go module proxy into a cache outside the clone.
#
# Why: tests need the real API server (CEL, defaults, pruning, webhooks, printer columns) and
# no binary may be downloaded or committed. Fresh clones on one machine share the cache.
# Idempotent: rebuilds only what is missing. Prints the directory holding the binaries.
set -euo pipefail

K8S_VERSION="${FINOPS_K8S_VERSION:-1.35.4}"
ETCD_VERSION="${FINOPS_ETCD_VERSION:-3.6.16}"
CACHE_ROOT="${FINOPS_ENVTEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/finops/envtest}"
OUT="$CACHE_ROOT/k8s-$K8S_VERSION-etcd-$ETCD_VERSION"
BIN="$OUT/bin"

log() { printf '[build-control-plane] %s\n' "$*" >&2; }

command -v go >/dev/null || { log "go is required (the machine's Go toolchain)"; exit 1; }
mkdir -p "$BIN"
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false

build_apiserver() {
  local work="$OUT/src/kube-apiserver" minor staging gomod
  minor="$(echo "$K8S_VERSION" | cut -d. -f2)"
  staging="v0.${K8S_VERSION#1.}"
  rm -rf "$work" && mkdir -p "$work" && cd "$work"
  go mod init finops.local/kube-apiserver-build >/dev/null 2>&1
  gomod="$(go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | python3 -c 'import json,sys;print(json.load(sys.stdin)["GoMod"])')"
  # Every staging module is published as k8s.io/<name> at v0.<minor>.<patch>; pin them all.
  for m in $(sed -n 's#^[[:space:]]*\(k8s.io/[^ ]*\) => ./staging/.*#\1#p' "$gomod"); do
    go mod edit -replace="$m=$m@$staging"
  done
  go get "k8s.io/kubernetes@v$K8S_VERSION" >/dev/null
  go get "k8s.io/kubernetes/cmd/kube-apiserver@v$K8S_VERSION" >/dev/null
  log "compiling kube-apiserver v$K8S_VERSION (several minutes on a cold cache)"
  go build -trimpath -o "$BIN/kube-apiserver.tmp" \
    -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION \
      -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor" \
    k8s.io/kubernetes/cmd/kube-apiserver
  mv "$BIN/kube-apiserver.tmp" "$BIN/kube-apiserver"
}

build_etcd() {
  local work="$OUT/src/etcd"
  rm -rf "$work" && mkdir -p "$work" && cd "$work"
  go mod init finops.local/etcd-build >/dev/null 2>&1
  go get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION" >/dev/null
  log "compiling etcd v$ETCD_VERSION"
  go build -trimpath -ldflags "-s -w" -o "$BIN/etcd.tmp" go.etcd.io/etcd/server/v3
  mv "$BIN/etcd.tmp" "$BIN/etcd"
}

[ -x "$BIN/etcd" ] || build_etcd
[ -x "$BIN/kube-apiserver" ] || build_apiserver
rm -rf "$OUT/src"
echo "$BIN"
