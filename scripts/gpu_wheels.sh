#!/usr/bin/env bash
# Download, on a machine with network, the wheels that `horizon serve` needs and the GPU machine's
# own python3 lacks (it has torch, triton, httpx, tokenizers, jinja2, but no fastapi, uvicorn or
# pydantic), at the versions this checkout's .venv runs, for CPython 3.12 on manylinux x86_64.
# scripts/gpu_check.sh installs them from .whl/ offline when its engine stage finds them missing;
# carry .whl/ (git-ignored) to the GPU run.
#
#   scripts/gpu_wheels.sh [PYTHON_VERSION]      (default 3.12, the GPU machine's python3)
set -euo pipefail
cd "$(dirname "$0")/.."
PY_VERSION="${1:-3.12}"
VENV_PY=.venv/bin/python
[ -x "$VENV_PY" ] || { echo "gpu_wheels: no $VENV_PY (run scripts/setup.sh first)" >&2; exit 2; }
# The server's import closure minus what the GPU image ships (found with importlib.metadata's
# packages_distributions over sys.modules after importing inference.server and uvicorn).
NAMES="fastapi starlette pydantic pydantic-core annotated-types annotated-doc typing-inspection typing-extensions
       uvicorn opentelemetry-api python-multipart"
PINS=$("$VENV_PY" -c "import importlib.metadata as m, sys; print(' '.join(f'{n}=={m.version(n)}' for n in sys.argv[1:]))" $NAMES)
mkdir -p .whl
rm -f .whl/*.whl
PLATFORMS=""
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
  PLATFORMS="$PLATFORMS --platform $p"
done
# shellcheck disable=SC2086
"$VENV_PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$PY_VERSION" --implementation cp \
  $PLATFORMS -d .whl $PINS
ls -1 .whl
