"""Running as another user of a sandbox's container.

A sandbox's persistent shell runs as `config.user`. A harness that must act as a different user
in the same container (an eval's verifier after the agent, say) takes `sandbox.as_user(user)`:
one-off commands run as that user and files it writes are owned by that user; the shell, and
the container itself, are untouched.
"""

from __future__ import annotations

from collections.abc import Sequence

from sandbox import files
from sandbox.errors import SandboxError
from sandbox.result import ExecResult


class UnknownUser(SandboxError):
    """The user named for a sandbox (or a view of one) does not exist in its image."""

    def __init__(self, user: str, message: str):
        super().__init__(message)
        self.user = user


class SandboxAsUser:
    """The same container as `sandbox`, with exec_once and file writes as `user` (no persistent shell)."""

    def __init__(self, sandbox, user: str):
        self.sandbox = sandbox
        self.user = user
        ids = sandbox.exec_once(["sh", "-c", "id -u; id -g"], timeout=30, user=user)
        lines = ids.output.split()
        if ids.exit_code != 0 or len(lines) != 2 or not all(x.isdigit() for x in lines):
            raise UnknownUser(user, f"user: {user!r} does not exist in image {sandbox.config.image} "
                                    f"(expected a user of its /etc/passwd, or a numeric uid): {ids.output.strip()[:300]}")
        self.uid, self.gid = int(lines[0]), int(lines[1])

    @property
    def config(self):
        return self.sandbox.config

    @property
    def closed(self) -> bool:
        return self.sandbox.closed

    def exec_once(self, argv: Sequence[str] | str, timeout: float | None = None, *, user: str | None = None,
                  workdir: str | None = None, output_limit: int | None = None) -> ExecResult:
        return self.sandbox.exec_once(argv, timeout, user=user or self.user, workdir=workdir, output_limit=output_limit)

    def exec(self, *args, **kwargs) -> ExecResult:
        raise SandboxError(f"exec() runs in the sandbox's own shell (user {self.sandbox.config.user or 'of the image'}); "
                           f"use exec_once() to run as {self.user!r}")

    def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        path = self.sandbox._absolute(path)
        payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        self.sandbox._check_open()
        files.put_bytes(self.sandbox._files, path, payload, self.uid, self.gid, mode)

    def read_file(self, path: str) -> bytes:
        return self.sandbox.read_file(path)

    def copy_in(self, host_path, container_path: str) -> str:
        self.sandbox._check_open()
        return files.copy_in(self.sandbox._files, host_path, self.sandbox._absolute(container_path), self.uid, self.gid)

    def copy_out(self, container_path: str, host_path):
        return self.sandbox.copy_out(container_path, host_path)

    def __enter__(self) -> SandboxAsUser:
        return self

    def __exit__(self, *exc) -> None:
        pass  # a view: the sandbox belongs to whoever started it
