#!/usr/bin/env bash
# Sets up (idempotently) and runs the whole test suite against a real Docker engine.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh"
cd "$ROOT"
export HORIZON_REQUIRE_DOCKER=1
exec "$ROOT/.venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
