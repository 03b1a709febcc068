#!/usr/bin/env bash
# Set the project up on a fresh machine: OS packages, the virtualenv, the real control plane.
#
# Idempotent; safe to run again. Needs only the package registries (Debian, PyPI, Go proxy).
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[setup] %s\n' "$*" >&2; }

# PostgreSQL 15 server binaries (the tests start their own throw-away cluster).
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    log "installing PostgreSQL server from Debian"
    export DEBIAN_FRONTEND=noninteractive
    # Keep the package from starting a system-wide server: the tests start their own.
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
    apt-get update -qq
    apt-get install -y -qq postgresql-15 >/dev/null
    rm -f /usr/sbin/policy-rc.d
  else
    log "PostgreSQL server binaries missing: install Debian's postgresql-15 (needs root)"
    exit 1
  fi
fi

# Chromium for the dashboard's browser test (driven by Playwright; it never downloads browsers).
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    log "installing Chromium from Debian"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core fonts-liberation >/dev/null
  else
    log "Chromium missing: install Debian's chromium (needs root) for the dashboard test"
  fi
fi

# The real node of the `cluster` tier: Debian's containerd, runc, CNI plugins and iptables.
node_pkgs=()
command -v containerd >/dev/null 2>&1 || node_pkgs+=(containerd)
command -v runc >/dev/null 2>&1 || node_pkgs+=(runc)
[ -x /usr/lib/cni/bridge ] || node_pkgs+=(containernetworking-plugins)
command -v iptables >/dev/null 2>&1 || node_pkgs+=(iptables)
command -v conntrack >/dev/null 2>&1 || node_pkgs+=(conntrack)
if [ "${#node_pkgs[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    log "installing ${node_pkgs[*]} from Debian (the cluster tier's node)"
    export DEBIAN_FRONTEND=noninteractive
    # Keep containerd's package from starting a system-wide daemon: the harness runs its own.
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${node_pkgs[@]}" >/dev/null
    rm -f /usr/sbin/policy-rc.d
  else
    log "not root: the cluster tier (a real node) will be skipped"
  fi
fi

PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  log "creating .venv"
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[dev]'
# The development tools (sandbox, control plane, OpenCost replay): a distribution of their own,
# never part of the product's wheel or image.
.venv/bin/python -m pip install -q -e tools/devenv

# The FinOps Foundation's FOCUS validator, which tests/db/test_focus_validator.py runs on an
# export. It needs Python >= 3.12 (the project runs on 3.11), so it gets a virtualenv of its
# own; FOCUS_PYTHON names the interpreter when none below is found.
focus_python() {
  local candidate
  for candidate in "${FOCUS_PYTHON:-}" python3.12 python3.13 "$HOME"/.pyenv/versions/3.1[2-9]*/bin/python3; do
    [ -n "$candidate" ] && command -v "$candidate" >/dev/null 2>&1 || continue
    if "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
      command -v "$candidate"
      return 0
    fi
  done
  return 1
}
if [ ! -x .venv-focus/bin/focus-validator ]; then
  if focus_py="$(focus_python)"; then
    log "creating .venv-focus (focus-validator 2.2.1 on $("$focus_py" --version 2>&1))"
    "$focus_py" -m venv .venv-focus
    .venv-focus/bin/python -m pip install -q --upgrade pip
    .venv-focus/bin/python -m pip install -q "focus-validator==2.2.1" "pyarrow==21.0.0"
  else
    log "no Python >= 3.12 found (set FOCUS_PYTHON): the FOCUS validator test will not run"
  fi
fi

log "building (or reusing) kube-apiserver and etcd"
tools/build-control-plane.sh >/dev/null
tools/build-helm.sh >/dev/null
log "building (or reusing) kubelet, controller-manager, scheduler, kube-proxy, kubectl, CoreDNS"
tools/build-node.sh >/dev/null
log "ready: .venv/bin/finops --help"
