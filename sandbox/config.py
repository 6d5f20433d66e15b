"""SandboxConfig and Mount: validated at the edge, so a bad value fails before any container exists."""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from sandbox.constants import BASE_IMAGE
from sandbox.egress_hosts import NetworkMode, parse_allowed_host

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.I)
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
MIN_MEMORY = 6 * 1024**2  # Docker refuses less than 6 MiB


def parse_size(value: int | str, field: str) -> int:
    """'512m', '1g', '1.5GiB' or a byte count -> bytes."""
    if isinstance(value, bool):
        raise ValueError(f"{field}: expected a size like '512m' or a byte count, got {value!r}")
    if isinstance(value, int):
        return value
    m = _SIZE.match(str(value))
    if not m:
        raise ValueError(f"{field}: expected a size like '512m', '1g' or a byte count, got {value!r}")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def format_size(n: int) -> str:
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= size:
            value = n / size
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{n} bytes"


def _absolute(value: str, field: str) -> str:
    if not value or not PurePosixPath(value).is_absolute():
        raise ValueError(f"{field}: expected an absolute path, got {value!r}")
    return value


class Mount(BaseModel):
    """A host path made visible in the sandbox. Nothing of the host is mounted unless listed."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    source: str
    target: str
    read_only: bool = False

    @field_validator("source")
    @classmethod
    def _source_absolute(cls, v: str) -> str:
        return _absolute(v, "source")

    @field_validator("target")
    @classmethod
    def _target_absolute(cls, v: str) -> str:
        return _absolute(v, "target")


class SandboxConfig(BaseModel):
    """How to start one sandbox. Defaults are the locked-down ones: no network, limits on."""

    model_config = ConfigDict(extra="forbid", validate_default=True)
    image: str = BASE_IMAGE
    workdir: str = "/workspace"
    env: dict[str, str] = Field(default_factory=dict)
    # "none", "full", or "allowlist" (egress only to `allowed_hosts`, through a proxy); True/False
    # mean "full"/"none". The value is falsy only for "none", so `if config.network:` still reads
    # "has some network".
    network: NetworkMode = NetworkMode.NONE
    allowed_hosts: list[str] = Field(default_factory=list)  # "host", "*.domain", "host:port", "10.0.0.5"
    egress_network: str = "bridge"  # the Docker network the allowlist proxy reaches the outside through
    memory: int | str = "1g"  # normalized to bytes
    cpus: float = 1.0
    pids_limit: int = 512
    # Commands, the shell and written files run as / belong to this user ("name", "uid" or "uid:gid");
    # None = the image's user. The container itself runs as the image's user.
    user: str | None = None
    # The bash the persistent shell runs when the image has none (e.g. a static bash mounted in
    # from the host); None: the image's own `bash` is required. Needs a POSIX `sh` in the image.
    bash_fallback: str | None = None
    # Join this existing Docker network (e.g. a compose project's, for its other services) instead of
    # the one `network` would create, reachable there under `network_aliases`.
    docker_network: str | None = None
    network_aliases: list[str] = Field(default_factory=list)
    gpus: int = Field(0, ge=0)  # NVIDIA GPUs reserved for the container (the engine needs the nvidia runtime)
    read_only_root: bool = False  # with a writable workdir and /tmp (tmpfs) unless a mount covers them
    mounts: list[Mount] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)
    docker_host: str | None = None  # None: docker.from_env(); else a base_url such as unix:///... or tcp://...
    output_limit: int = 100_000  # bytes of output kept per command (head + tail)
    command_timeout: float = 120.0  # seconds, when exec() is given no timeout
    start_timeout: float = 60.0  # seconds for the container and its shell to come up

    @field_validator("image")
    @classmethod
    def _image(cls, v: str) -> str:
        if not v or v.strip() != v or " " in v:
            raise ValueError(f"image: expected an image reference like {BASE_IMAGE!r}, got {v!r}")
        return v

    @field_validator("network", mode="before")
    @classmethod
    def _network(cls, v):
        if isinstance(v, bool):
            return NetworkMode.FULL if v else NetworkMode.NONE
        if isinstance(v, str) and v in NetworkMode._value2member_map_:
            return NetworkMode(v)
        if isinstance(v, NetworkMode):
            return v
        raise ValueError(f"network: expected 'none', 'full', 'allowlist' or a boolean, got {v!r}")

    @field_validator("allowed_hosts")
    @classmethod
    def _allowed_hosts(cls, v: list[str]) -> list[str]:
        for i, entry in enumerate(v):
            parse_allowed_host(entry, f"allowed_hosts[{i}]")
        return v

    @field_validator("egress_network")
    @classmethod
    def _egress_network(cls, v: str) -> str:
        if not v or v in ("none", "host") or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", v):
            raise ValueError(f"egress_network: expected the name of a Docker bridge network, got {v!r}")
        return v

    @model_validator(mode="after")
    def _allowlist_consistent(self):
        if self.network is NetworkMode.ALLOWLIST and not self.allowed_hosts:
            raise ValueError("allowed_hosts: network='allowlist' needs at least one host (use network='none' for none)")
        if self.network is not NetworkMode.ALLOWLIST and self.allowed_hosts:
            raise ValueError(f"allowed_hosts: only used with network='allowlist', got network={self.network.value!r}")
        return self

    @field_validator("workdir")
    @classmethod
    def _workdir(cls, v: str) -> str:
        return _absolute(v, "workdir")

    @field_validator("memory")
    @classmethod
    def _memory(cls, v: int | str) -> int:
        n = parse_size(v, "memory")
        if n < MIN_MEMORY:
            raise ValueError(f"memory: expected at least 6 MiB (Docker's minimum), got {v!r}")
        return n

    @field_validator("cpus")
    @classmethod
    def _cpus(cls, v: float) -> float:
        if not v > 0:
            raise ValueError(f"cpus: expected a positive number of CPUs, got {v!r}")
        return v

    @field_validator("pids_limit")
    @classmethod
    def _pids(cls, v: int) -> int:
        if v < 16:
            raise ValueError(f"pids_limit: expected at least 16 (the shell needs a few processes), got {v!r}")
        return v

    @field_validator("output_limit")
    @classmethod
    def _output_limit(cls, v: int) -> int:
        if v < 256:
            raise ValueError(f"output_limit: expected at least 256 bytes, got {v!r}")
        return v

    @field_validator("command_timeout", "start_timeout")
    @classmethod
    def _timeouts(cls, v: float, info) -> float:
        if not v > 0:
            raise ValueError(f"{info.field_name}: expected a positive number of seconds, got {v!r}")
        return v

    @field_validator("env", "labels")
    @classmethod
    def _names(cls, v: dict[str, str], info) -> dict[str, str]:
        for key in v:
            if not key or "=" in key or "\0" in key:
                raise ValueError(f"{info.field_name}: invalid name {key!r} (empty, or contains '=' or NUL)")
        return v

    @property
    def memory_bytes(self) -> int:
        return int(self.memory)
