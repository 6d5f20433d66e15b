"""The explicit offline substitute for swebench's base image (only with `offline_substitute`).

swebench's base Dockerfile starts FROM ubuntu (Docker Hub) and installs Miniconda from
repo.anaconda.com; neither is reachable offline. The substitute keeps that Dockerfile's own steps
(its apt packages, its user) on a locally available base image and replaces Miniconda with a small
conda stand-in at the same paths: `conda create -n NAME python=X PKGS` makes a venv at
/opt/miniconda3/envs/NAME with the system Python (the requested version is recorded, not honoured)
and pip-installs PKGS; `conda activate NAME` puts it on PATH. Anything else conda would do fails
loudly. Scores from these images are marked not comparable to the official harness's.
"""

from __future__ import annotations

import re

STANDIN_DIR = "conda-standin"
NOT_COMPARABLE = ("not comparable: built on the offline substitute {base} (conda stand-in, system Python) "
                  "instead of swebench's ubuntu + Miniconda base image")

_CONDA_FUNCTION = r'''# conda stand-in (Horizon offline substitute): venvs at the Miniconda paths.
conda() {
  case "${1:-}" in
    activate)
      local name="${2:-base}"
      if [ "$name" != base ]; then
        [ -d "/opt/miniconda3/envs/$name" ] || { echo "conda stand-in: no environment $name" >&2; return 1; }
        export VIRTUAL_ENV="/opt/miniconda3/envs/$name" PATH="/opt/miniconda3/envs/$name/bin:$PATH"
      fi
      export CONDA_DEFAULT_ENV="$name" ;;
    deactivate) export CONDA_DEFAULT_ENV=base ;;
    *) /opt/miniconda3/bin/conda "$@" ;;
  esac
}
'''

_CONDA_COMMAND = r'''#!/bin/bash
# conda stand-in (Horizon offline substitute): only `conda create` is available offline.
set -euo pipefail
cmd="${1:-}"; shift || true
case "$cmd" in
  create)
    name=""; python=""; pkgs=()
    while [ $# -gt 0 ]; do
      case "$1" in
        -n|--name) name="$2"; shift 2 ;;
        -c|--channel) shift 2 ;;
        -y|--yes|-q|--quiet) shift ;;
        python=*|python==*) python="${1#python=}"; python="${python#=}"; shift ;;
        -*) echo "conda stand-in: unsupported option $1" >&2; exit 2 ;;
        *=*) p="$1"; case "$p" in *==*|*'>'*|*'<'*|*'!'*|*'~'*) ;; *) p="${p/=/==}" ;; esac; pkgs+=("$p"); shift ;;
        *) pkgs+=("$1"); shift ;;
      esac
    done
    [ -n "$name" ] || { echo "conda stand-in: create needs -n NAME" >&2; exit 2; }
    python3 -m venv "/opt/miniconda3/envs/$name"
    echo "${python:-unspecified}" > "/opt/miniconda3/envs/$name/.requested-python"
    echo "conda stand-in: created $name with $(python3 -V) (requested python ${python:-unspecified})"
    "/opt/miniconda3/envs/$name/bin/python" -m pip install -q --upgrade pip setuptools wheel
    if [ ${#pkgs[@]} -gt 0 ]; then "/opt/miniconda3/envs/$name/bin/python" -m pip install "${pkgs[@]}"; fi ;;
  activate|deactivate) echo "conda stand-in: source /opt/miniconda3/bin/activate first" >&2; exit 2 ;;
  *) echo "conda stand-in: 'conda $cmd' needs the real Miniconda, which is not available offline" >&2; exit 2 ;;
esac
'''


def standin_files() -> dict[str, str]:
    """Build-context files (under STANDIN_DIR/) laid out as /opt/miniconda3."""
    return {
        f"{STANDIN_DIR}/bin/activate": _CONDA_FUNCTION,
        f"{STANDIN_DIR}/etc/profile.d/conda.sh": _CONDA_FUNCTION,
        f"{STANDIN_DIR}/bin/conda": _CONDA_COMMAND,
    }


def _instructions(dockerfile: str) -> list[str]:
    """Logical instructions: continuation lines joined, comments and blanks dropped."""
    out, current = [], ""
    for line in dockerfile.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current += line.rstrip()
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        out.append(current.strip())
        current = ""
    if current:
        out.append(current.strip())
    return out


def substitute_base_dockerfile(dockerfile: str, base: str) -> str:
    """swebench's base Dockerfile on `base`, with Miniconda replaced by the stand-in."""
    kept = []
    for ins in _instructions(dockerfile):
        if ins.upper().startswith("FROM "):
            kept.append(f"FROM {base}")
            # Debian names: what swebench's ubuntu steps rely on, plus venv for the stand-in.
            kept.append("RUN apt-get update && apt-get install -y --no-install-recommends adduser python3-venv "
                        "&& rm -rf /var/lib/apt/lists/*")
        elif re.search(r"conda", ins, re.I) and not ins.upper().startswith("ENV "):
            continue  # the Miniconda download, `conda init`, `conda config`
        else:
            kept.append(ins)
    kept += [f"COPY {STANDIN_DIR}/ /opt/miniconda3/",
             "RUN chmod +x /opt/miniconda3/bin/conda && mkdir -p /opt/miniconda3/envs",
             'LABEL dev.horizon.swebench.substitute="conda-standin"']
    return "\n".join(kept) + "\n"
