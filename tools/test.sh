#!/usr/bin/env bash
# The project's test command: lint, types (src and the benchmarks), layer contracts, then
# every test tier.
#
# pytest's exit 5 (nothing collected) is a failure here, like any other non-zero status.
set -uo pipefail
cd "$(dirname "$0")/.."
V=.venv/bin
status=0
run() { echo "+ $*" >&2; "$@" || status=1; }

run "$V/ruff" check src tests benchmarks tools
run "$V/ruff" format --check src tests benchmarks tools
run "$V/mypy"
run "$V/mypy" --explicit-package-bases benchmarks
run "$V/lint-imports"
echo "+ pytest $*" >&2
"$V/pytest" "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure" >&2
fi
[ "$rc" -ne 0 ] && status=1
exit "$status"
