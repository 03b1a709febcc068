#!/usr/bin/env bash
# Build the node half of a real cluster from the Go module proxy into a cache outside the clone:
# kubelet, kube-controller-manager, kube-scheduler, kube-proxy, kubectl and CoreDNS.
#
# Why: the `cluster` test tier and `finops sandbox --real-node` run the chart's pods on a real
# node; no binary may be downloaded or committed. Kubernetes is built at the version
# tools/build-control-plane.sh builds kube-apiserver at, so they share the Go build cache.
# Idempotent: builds only what is missing. Prints the directory holding the binaries.
set -euo pipefail

K8S_VERSION="${FINOPS_K8S_VERSION:-1.35.4}"
COREDNS_VERSION="${FINOPS_COREDNS_VERSION:-1.14.7}"
CACHE_ROOT="${FINOPS_NODE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/finops/node}"
OUT="$CACHE_ROOT/k8s-$K8S_VERSION-coredns-$COREDNS_VERSION"
BIN="$OUT/bin"
COMPONENTS=(kubelet kube-controller-manager kube-scheduler kube-proxy kubectl)

log() { printf '[build-node] %s\n' "$*" >&2; }

command -v go >/dev/null || { log "go is required (the machine's Go toolchain)"; exit 1; }
mkdir -p "$BIN"
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false

build_kubernetes() {
  local work="$OUT/src/kubernetes" minor staging gomod pkgs=() c
  minor="$(echo "$K8S_VERSION" | cut -d. -f2)"
  staging="v0.${K8S_VERSION#1.}"
  rm -rf "$work" && mkdir -p "$work" && cd "$work"
  go mod init finops.local/kubernetes-node-build >/dev/null 2>&1
  gomod="$(go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | python3 -c 'import json,sys;print(json.load(sys.stdin)["GoMod"])')"
  # Every staging module is published as k8s.io/<name> at v0.<minor>.<patch>; pin them all.
  for m in $(sed -n 's#^[[:space:]]*\(k8s.io/[^ ]*\) => ./staging/.*#\1#p' "$gomod"); do
    go mod edit -replace="$m=$m@$staging"
  done
  go get "k8s.io/kubernetes@v$K8S_VERSION" >/dev/null
  for c in "${COMPONENTS[@]}"; do
    [ -x "$BIN/$c" ] && continue
    go get "k8s.io/kubernetes/cmd/$c@v$K8S_VERSION" >/dev/null
    pkgs+=("k8s.io/kubernetes/cmd/$c")
  done
  [ "${#pkgs[@]}" -gt 0 ] || return 0
  log "compiling ${pkgs[*]##*/} v$K8S_VERSION (several minutes on a cold cache)"
  mkdir -p "$OUT/tmp"
  go build -trimpath -o "$OUT/tmp/" \
    -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION \
      -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor \
      -X k8s.io/client-go/pkg/version.gitVersion=v$K8S_VERSION \
      -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor" \
    "${pkgs[@]}"
  for c in "${pkgs[@]##*/}"; do mv "$OUT/tmp/$c" "$BIN/$c"; done
}

build_coredns() {
  local work="$OUT/src/coredns"
  rm -rf "$work" && mkdir -p "$work"
  log "compiling coredns v$COREDNS_VERSION"
  GOBIN="$work" go install -trimpath -ldflags "-s -w" "github.com/coredns/coredns@v$COREDNS_VERSION"
  mv "$work/coredns" "$BIN/coredns"
}

missing=0
for c in "${COMPONENTS[@]}"; do [ -x "$BIN/$c" ] || missing=1; done
[ "$missing" = 0 ] || build_kubernetes
[ -x "$BIN/coredns" ] || build_coredns
rm -rf "$OUT/src" "$OUT/tmp"
echo "$BIN"
