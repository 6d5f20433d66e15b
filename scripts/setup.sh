#!/usr/bin/env bash
# One idempotent set-up for developers, CI and the demo. On a fresh Debian/Ubuntu machine as root it:
#   1. creates .venv at the repo root, installs torch==2.13.0 (CPU build) and the project with dev extras;
#   2. makes sure a Docker engine answers (installs docker.io and starts dockerd when root on Debian);
#   3. builds the Horizon base sandbox image if it is missing or its recipe changed.
# Re-running it with everything in place takes seconds: each step checks before it acts.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="$ROOT/.venv"
PY="$VENV/bin/python"
log() { printf '[setup] %s\n' "$*" >&2; }

is_root() { [ "$(id -u)" = 0 ]; }
is_debian() { [ -f /etc/debian_version ] && command -v apt-get >/dev/null; }
APT_UPDATED=0
apt_install() {
    # Install only the packages that are missing; one apt-get update per run at most.
    local missing=()
    for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
    [ ${#missing[@]} -eq 0 ] && return 0
    if ! is_root || ! is_debian; then
        log "missing system packages: ${missing[*]} (install them, or run this script as root on Debian/Ubuntu)"
        return 1
    fi
    if [ "$APT_UPDATED" = 0 ]; then apt-get update -qq; APT_UPDATED=1; fi
    log "apt-get install ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# --- 1. Python environment -------------------------------------------------------------------
if [ ! -x "$PY" ]; then
    log "creating $VENV"
    python3 -m venv "$VENV"
    "$PY" -m pip install -q --upgrade pip
fi
if ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.__version__.startswith("2.13.0") else 1)' 2>/dev/null; then
    # Pinned: the CPU build of 2.13.0 is what these machines carry; an unpinned torch pulls CUDA (GBs).
    log "installing torch==2.13.0"
    "$PY" -m pip install -q torch==2.13.0
fi
STAMP="$VENV/.horizon-install-stamp"
WANT="$( (cat pyproject.toml; find examples -name pyproject.toml -exec cat {} + 2>/dev/null) | sha256sum | cut -c1-16)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
    log "installing horizon-agent[dev] (editable)"
    "$PY" -m pip install -q -e ".[dev]"
    for plugin in examples/*/pyproject.toml; do
        [ -f "$plugin" ] && "$PY" -m pip install -q -e "$(dirname "$plugin")"
    done
    echo "$WANT" > "$STAMP"
fi

# --- 2. Host tools the tests and the base image build use ---------------------------------
if is_root && is_debian; then
    apt_install debootstrap tmux git ca-certificates iptables
    # Evals: a static bash and tmux's libraries form the toolbox mounted into task images that lack
    # them (evals/container_tools.py); busybox-static builds the tests' bash-less image; Debian's
    # `docker-compose` runs Harbor tasks with environment/docker-compose.yaml.
    apt_install bash-static busybox-static docker-compose
    # A C++ compiler and Python headers: torch.compile's CPU backend (decode graphs on a CPU) builds its kernels.
    apt_install g++ python3-dev
fi

# --- 3. Docker engine ---------------------------------------------------------------------------
docker_ok() { docker info >/dev/null 2>&1; }
if ! docker_ok; then
    if is_root && is_debian; then
        command -v dockerd >/dev/null || apt_install docker.io
        if ! pgrep -x dockerd >/dev/null; then
            log "starting dockerd in the background (log: /var/log/horizon-dockerd.log)"
            nohup dockerd >/var/log/horizon-dockerd.log 2>&1 &
        fi
        for _ in $(seq 60); do docker_ok && break; sleep 1; done
    fi
    if ! docker_ok; then
        log "no Docker engine answers. Start one (e.g. 'sudo systemctl start docker' or 'sudo dockerd &'),"
        log "make sure this user may use /var/run/docker.sock, then re-run scripts/setup.sh."
        log "Without Docker, only LocalSandbox (no isolation) is available."
        exit 1
    fi
fi

# --- 4. Base sandbox image (offline: debootstrap + docker import; reused while its recipe is unchanged)
"$VENV/bin/horizon" sandbox build --quiet
log "ready"
