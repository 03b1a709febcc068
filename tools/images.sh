#!/usr/bin/env bash
# Build every container image the Helm chart needs, from Debian packages and PyPI only: no
# container registry is used. Each image is an OCI image archive, importable with
#   ctr -n k8s.io images import ARCHIVE
# (the archive's index names the image, so no --base-name is needed; one does no harm).
#
#   tools/images.sh [NAME...]    NAME: base finops-operator postgres opencost prometheus pause
#
# Prints one line per image asked for (all by default) on stdout: `NAME REF ARCHIVE`, e.g.
#   finops-operator localhost/finops-operator:0123456789ab /root/.cache/finops/images/finops-operator-0123456789ab.tar
# Logs go to stderr, prefixed [images].
#
# - base: a Debian bookworm minbase root file system (mmdebstrap, from the Debian mirror apt
#   uses here) with python3, python3-venv, python3-pip and ca-certificates, packed with umoci.
# - finops-operator: the repository's Dockerfile with the base as its PYTHON_IMAGE, built by
#   buildah (chroot isolation, host network for pip).
# - postgres: Debian's postgresql-15 on the base; prometheus: built from the Go module proxy
#   (Debian's lacks Kubernetes service discovery), on the base (images/*/Containerfile).
# - opencost: the product image with the development tools' OpenCost replay server
#   (tools/devenv/finops_devenv) on top, replaying the real captures.
# - pause: a static Go binary (images/pause/main.go) in an otherwise empty image.
#
# Each image is cached by a content hash of its inputs under
# ${XDG_CACHE_HOME:-$HOME/.cache}/finops/images/ (buildah's storage too), so a second run
# with unchanged inputs only hashes. Needs root; installs its own Debian packages.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

log() { printf '[images] %s\n' "$*" >&2; }
die() { printf '[images] error: %s\n' "$*" >&2; exit 1; }

ALL=(base finops-operator postgres opencost prometheus pause)
SUITE=bookworm
BASE_PACKAGES=python3,python3-venv,python3-pip,ca-certificates
# Bump to rebuild an image whose recipe lives in this script rather than in its inputs.
RECIPE=1
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/finops/images"
GO="${GO:-/usr/local/go/bin/go}"
HOST_CA=/etc/ssl/certs/ca-certificates.crt

want=("$@")
[ ${#want[@]} -gt 0 ] || want=("${ALL[@]}")
for name in "${want[@]}"; do
  case " ${ALL[*]} " in *" $name "*) ;; *) die "unknown image '$name' (known: ${ALL[*]})" ;; esac
done

[ "$(id -u)" = 0 ] || die "needs root (mmdebstrap, buildah and umoci unpack a root file system)"

# ------------------------------------------------------------------ prerequisites (Debian)
need=()
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
command -v umoci >/dev/null || need+=(umoci)
command -v buildah >/dev/null || need+=(buildah)
# Debian bookworm ships /etc/containers/policy.json in golang-github-containers-common.
[ -e /etc/containers/policy.json ] || need+=(golang-github-containers-common)
command -v flock >/dev/null || need+=(util-linux)
command -v python3 >/dev/null || need+=(python3)
if [ ${#need[@]} -gt 0 ]; then
  log "installing from Debian: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq || die "apt-get update failed"
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null \
    || die "apt-get install ${need[*]} failed"
fi

mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9 || die "cannot lock $CACHE/.lock"

# Work folders under $CACHE, removed however the script ends.
TMPS=()
trap 'rm -rf "${TMPS[@]}"' EXIT
tmpdir() { # VAR LABEL: a new work folder's path into VAR
  local -n _dir=$1
  _dir=$(mktemp -d "$CACHE/.$2.XXXXXX") || die "mktemp in $CACHE failed"
  TMPS+=("$_dir")
}

STORAGE=(--root "$CACHE/buildah/storage" --runroot "$CACHE/buildah/run" --storage-driver overlay)
bah() { buildah "${STORAGE[@]}" "$@"; }

# ------------------------------------------------------------------------------ helpers

# The Debian sources apt uses here, as one-line `deb URI SUITE COMPONENTS` entries for the
# bookworm suites (deb822 .sources files and classic .list files).
debian_sources() {
  python3 - "$SUITE" <<'PY'
import glob, sys
suite = sys.argv[1]
out = []
def add(uri, suites, comps):
    for s in suites:
        if s == suite or s.startswith(suite + "-"):
            out.append(f"deb {uri} {s} {' '.join(comps) or 'main'}")
for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
    for stanza in open(path).read().split("\n\n"):
        fields = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line:
                continue
            key, _, value = line.partition(":")
            fields[key.strip().lower()] = value.split()
        if "deb" in fields.get("types", []) and fields.get("enabled", ["yes"]) != ["no"]:
            for uri in fields.get("uris", []):
                add(uri, fields.get("suites", []), fields.get("components", []))
for path in ["/etc/apt/sources.list", *sorted(glob.glob("/etc/apt/sources.list.d/*.list"))]:
    try:
        lines = open(path).read().splitlines()
    except OSError:
        continue
    for line in lines:
        words = line.split("#")[0].split()
        if len(words) >= 3 and words[0] == "deb":
            words = [w for w in words[1:] if not w.startswith("[")]
            add(words[0], [words[1]], words[2:])
seen = []
for line in out:
    if line not in seen:
        seen.append(line)
print("\n".join(seen))
PY
}

# sha256 of strings and of files/folders (`path:REL`, mode and content of every file).
hash_of() {
  local a p
  for a in "$@"; do
    case "$a" in
      path:*)
        p=${a#path:}
        [ -e "$p" ] || die "input $p missing"
        find "$p" -type f ! -path '*/__pycache__/*' ! -name '*.pyc' -printf '%m %p\n' | LC_ALL=C sort
        find "$p" -type f ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 | LC_ALL=C sort -z \
          | xargs -0 -r sha256sum
        ;;
      *) printf '%s\n' "$a" ;;
    esac
  done | sha256sum | cut -c1-64
}

# Name the image in an OCI layout's index (ref.name = tag, io.containerd.image.name = the
# full reference, which `ctr images import` uses as is) and tar the layout to ARCHIVE.
pack_layout() {
  local layout=$1 ref=$2 archive=$3
  python3 - "$layout/index.json" "$ref" <<'PY' || die "cannot name $2 in $1/index.json"
import json, sys
path, ref = sys.argv[1], sys.argv[2]
index = json.load(open(path))
assert len(index["manifests"]) == 1, index
ann = index["manifests"][0].setdefault("annotations", {})
ann["org.opencontainers.image.ref.name"] = ref.rsplit(":", 1)[1]
ann["io.containerd.image.name"] = ref
json.dump(index, open(path, "w"))
PY
  tar -C "$layout" -cf "$archive.part" oci-layout index.json blobs || die "cannot tar $layout"
  mv "$archive.part" "$archive"
}

# Make sure buildah's storage holds REF, loading it from its ARCHIVE if not.
ensure_in_storage() {
  local ref=$1 archive=$2 id
  bah inspect --type image "$ref" >/dev/null 2>&1 && return 0
  log "loading $ref into buildah storage"
  id=$(bah pull --quiet "oci-archive:$archive" 2>/dev/null | tail -n1) \
    || die "buildah could not load $archive"
  bah tag "$id" "$ref" || die "buildah could not tag $ref"
}

# Push a buildah image to an OCI archive; drop older tags of the same repository.
export_image() {
  local ref=$1 archive=$2 tmp old
  tmpdir tmp layout
  bah push --quiet --format oci "$ref" "oci:$tmp/layout:${ref##*:}" >/dev/null \
    || die "buildah push $ref failed"
  pack_layout "$tmp/layout" "$ref" "$archive"
  rm -rf "$tmp"
  for old in $(bah images --noheading --format '{{.Name}}:{{.Tag}}' "${ref%:*}" 2>/dev/null); do
    [ "$old" = "$ref" ] || bah rmi "$old" >/dev/null 2>&1 || true
  done
}

declare -A REF ARCHIVE
emit=()
built() { REF[$1]=$2; ARCHIVE[$1]=$3; }
cached() { # NAME HASH: true (and recorded) if the archive exists
  local name=$1 tag=${2:0:12}
  local ref="localhost/$name:$tag" archive="$CACHE/$name-$tag.tar"
  [ "$name" = base ] && ref="localhost/finops-base:$tag"
  built "$1" "$ref" "$archive"
  [ -s "$archive" ]
}
timed() { # NAME command...: run it, log the time, drop the name's older archives
  local start=$SECONDS old
  "${@:2}"
  log "$1: built in $((SECONDS - start)) s -> ${ARCHIVE[$1]}"
  for old in "$CACHE/$1"-????????????.tar; do
    [ "$old" = "${ARCHIVE[$1]}" ] || rm -f "$old"
  done
}

# --------------------------------------------------------------------------------- base
BASE_HASH=""
base() {
  [ -n "$BASE_HASH" ] && return 0
  local sources
  sources=$(debian_sources)
  [ -n "$sources" ] || die "no $SUITE entry in /etc/apt/sources.list*: cannot pick a Debian mirror"
  BASE_HASH=$(hash_of base "$RECIPE" "$SUITE" "$BASE_PACKAGES" "$sources")
  if cached base "$BASE_HASH"; then
    return 0
  fi
  log "base: mmdebstrap $SUITE minbase + $BASE_PACKAGES from:"
  printf '%s\n' "$sources" | sed 's/^/[images]   /' >&2
  timed base build_base "$sources"
}
build_base() {
  local sources=$1 tmp ref=${REF[base]} tag=${REF[base]##*:}
  tmpdir tmp base
  local -a mirrors
  mapfile -t mirrors <<<"$sources"
  mmdebstrap --quiet --variant=minbase --mode=root --format=tar \
    --include="$BASE_PACKAGES" \
    --customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/log/apt "$1"/var/log/dpkg.log' \
    "$SUITE" "$tmp/rootfs.tar" "${mirrors[@]}" >&2 || die "mmdebstrap of the base failed"
  umoci init --layout "$tmp/layout" || die "umoci init failed"
  umoci new --image "$tmp/layout:$tag" || die "umoci new failed"
  umoci raw add-layer --image "$tmp/layout:$tag" "$tmp/rootfs.tar" \
    || die "umoci raw add-layer (base root file system) failed"
  umoci config --image "$tmp/layout:$tag" --os linux --architecture amd64 \
    --author "finops-operator tools/images.sh" \
    --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --config.env LANG=C.UTF-8 \
    --config.workingdir / --config.cmd python3 \
    --config.label "org.opencontainers.image.title=finops-base" \
    --config.label "org.opencontainers.image.description=Debian $SUITE minbase with Python 3" \
    --history.created_by "mmdebstrap --variant=minbase --include=$BASE_PACKAGES $SUITE" \
    || die "umoci config of the base failed"
  umoci gc --layout "$tmp/layout"
  pack_layout "$tmp/layout" "$ref" "${ARCHIVE[base]}"
  rm -rf "$tmp"
}

# ------------------------------------------------------------------------ buildah images
# bud NAME CONTAINERFILE CONTEXT BUILD-ARG...
bud() {
  local name=$1 file=$2 context=$3
  shift 3
  local -a args=()
  local a
  for a in "$@"; do args+=(--build-arg "$a"); done
  # This machine's CA bundle (it may trust an egress proxy of its own), mounted for the RUN
  # steps only: pip and apt see it, the image keeps the bundle of its own ca-certificates.
  [ -s "$HOST_CA" ] && args+=(--volume "$HOST_CA:/etc/ssl/certs/ca-certificates.crt:ro")
  bah bud --quiet --isolation chroot --network host --pull=never --layers=false \
    --format oci -f "$file" "${args[@]}" -t "${REF[$name]}" "$context" >&2 \
    || die "buildah bud of $name ($file) failed"
  export_image "${REF[$name]}" "${ARCHIVE[$name]}"
}

OPERATOR_HASH=""
operator() {
  [ -n "$OPERATOR_HASH" ] && return 0
  base
  OPERATOR_HASH=$(hash_of finops-operator "$BASE_HASH" path:Dockerfile path:.dockerignore \
    path:pyproject.toml path:README.md path:src)
  cached finops-operator "$OPERATOR_HASH" && return 0
  ensure_in_storage "${REF[base]}" "${ARCHIVE[base]}"
  log "finops-operator: buildah bud Dockerfile with PYTHON_IMAGE=${REF[base]}"
  timed finops-operator bud finops-operator Dockerfile "$REPO" "PYTHON_IMAGE=${REF[base]}"
}

postgres() {
  base
  local h
  h=$(hash_of postgres "$BASE_HASH" path:images/postgres)
  cached postgres "$h" && return 0
  ensure_in_storage "${REF[base]}" "${ARCHIVE[base]}"
  log "postgres: Debian postgresql-15 on ${REF[base]}"
  timed postgres bud postgres images/postgres/Containerfile images/postgres "BASE_IMAGE=${REF[base]}"
}

# Debian's prometheus package is built without Kubernetes service discovery
# (`kubernetes_sd_configs` is refused), which the chart's scrape config needs; so the
# binary is built from the Go module proxy (module versions v0.X.Y are releases v2.X.Y).
PROMETHEUS_VERSION="${FINOPS_PROMETHEUS_VERSION:-0.55.1}"
prometheus() {
  base
  [ -x "$GO" ] || die "Go not found at $GO (set GO=/path/to/go)"
  local h gover
  gover=$("$GO" env GOVERSION) || die "$GO env GOVERSION failed"
  h=$(hash_of prometheus "$BASE_HASH" "$PROMETHEUS_VERSION" "$gover" path:images/prometheus)
  cached prometheus "$h" && return 0
  ensure_in_storage "${REF[base]}" "${ARCHIVE[base]}"
  log "prometheus: v$PROMETHEUS_VERSION built from the Go module proxy, on ${REF[base]}"
  timed prometheus build_prometheus
}
build_prometheus() {
  local tmp
  tmpdir tmp prometheus
  cp images/prometheus/Containerfile "$tmp/"
  mkdir "$tmp/mod"
  # The module's own replace/exclude lines apply only to its own build: repeat them here.
  (cd "$tmp/mod" && "$GO" mod init finops.local/prometheus-build >/dev/null 2>&1 \
    && "$GO" mod edit -replace k8s.io/klog=github.com/simonpasquier/klog-gokit@v0.3.0 \
      -replace k8s.io/klog/v2=github.com/simonpasquier/klog-gokit/v3@v3.5.0 \
      -exclude github.com/linode/linodego@v1.0.0 \
    && GOFLAGS=-mod=mod "$GO" get "github.com/prometheus/prometheus/cmd/prometheus@v$PROMETHEUS_VERSION" >/dev/null 2>&1 \
    && CGO_ENABLED=0 GOFLAGS=-buildvcs=false "$GO" build -trimpath \
      -ldflags "-s -w -X github.com/prometheus/common/version.Version=${PROMETHEUS_VERSION/0./2.}" \
      -o "$tmp/prometheus" github.com/prometheus/prometheus/cmd/prometheus) \
    || die "go build of prometheus v$PROMETHEUS_VERSION failed"
  rm -rf "$tmp/mod"
  bah bud --quiet --isolation chroot --pull=never --layers=false --format oci \
    --build-arg "BASE_IMAGE=${REF[base]}" \
    -f "$tmp/Containerfile" -t "${REF[prometheus]}" "$tmp" >&2 || die "buildah bud of prometheus failed"
  export_image "${REF[prometheus]}" "${ARCHIVE[prometheus]}"
  rm -rf "$tmp"
}

opencost() {
  operator
  local h
  h=$(hash_of opencost "$OPERATOR_HASH" path:images/opencost path:tests/data/opencost-real \
    path:tools/devenv/finops_devenv)
  cached opencost "$h" && return 0
  ensure_in_storage "${REF[finops-operator]}" "${ARCHIVE[finops-operator]}"
  log "opencost: replay server on ${REF[finops-operator]}"
  local context
  tmpdir context opencost
  cp -r tests/data/opencost-real "$context/opencost-real"
  cp -r tools/devenv/finops_devenv "$context/finops_devenv"
  find "$context/finops_devenv" -name __pycache__ -prune -exec rm -rf {} +
  timed opencost bud opencost images/opencost/Containerfile "$context" \
    "OPERATOR_IMAGE=${REF[finops-operator]}"
}

pause() {
  [ -x "$GO" ] || die "Go not found at $GO (set GO=/path/to/go)"
  local h gover
  gover=$("$GO" env GOVERSION) || die "$GO env GOVERSION failed"
  h=$(hash_of pause "$RECIPE" "$gover" path:images/pause)
  cached pause "$h" && return 0
  log "pause: static Go binary ($gover)"
  timed pause build_pause
}
build_pause() {
  local tmp
  tmpdir tmp pause
  cp images/pause/Containerfile "$tmp/"
  (cd images/pause && CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS= GO111MODULE=off \
    "$GO" build -trimpath -ldflags='-s -w' -o "$tmp/pause" main.go) \
    || die "go build of images/pause/main.go failed"
  bah bud --quiet --isolation chroot --pull=never --layers=false --format oci \
    -f "$tmp/Containerfile" -t "${REF[pause]}" "$tmp" >&2 || die "buildah bud of pause failed"
  export_image "${REF[pause]}" "${ARCHIVE[pause]}"
  rm -rf "$tmp"
}

for name in "${want[@]}"; do
  case "$name" in
    base) base ;;
    finops-operator) operator ;;
    *) "$name" ;;
  esac
  emit+=("$name ${REF[$name]} ${ARCHIVE[$name]}")
done
printf '%s\n' "${emit[@]}"
