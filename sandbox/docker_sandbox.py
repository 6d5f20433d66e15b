"""Sandbox: one locked-down Docker container with a persistent shell, files in and out."""

from __future__ import annotations

import atexit
import posixpath
import secrets
import threading
import time
import weakref
from collections.abc import Sequence

from sandbox import files
from sandbox.attached import AttachedProcess, StreamClosed
from sandbox.capture import HeadTailBuffer, render_output
from sandbox.config import SandboxConfig, format_size
from sandbox.constants import LABEL_KEY, LABEL_VALUE, RUN_LABEL_KEY, run_id
from sandbox.docker_client import connect
from sandbox.egress import Egress
from sandbox.egress_hosts import NetworkMode
from sandbox.exec_tar import ExecTar
from sandbox.errors import ContainerDied, ImageNotFound, SandboxClosed, SandboxError, SandboxTimeout
from sandbox.result import ExecResult
from sandbox.shell import SHELL_ARGV, PersistentShell, RawResult, ShellDied
from sandbox.shell_protocol import SPOOL_DIR
from sandbox.users import SandboxAsUser, UnknownUser

# The few capabilities a root shell needs to manage files and its own processes.
CAPABILITIES = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "NET_BIND_SERVICE"]

START_ATTEMPTS = 3  # engine hiccups under parallel starts are common; bad configs fail at once

_open_sandboxes: weakref.WeakSet = weakref.WeakSet()


class _TransientStartError(SandboxError):
    """An engine-side (5xx) failure while creating or starting a container: worth a retry."""


@atexit.register
def _close_all_at_exit() -> None:
    for sb in list(_open_sandboxes):
        sb.close()


class Sandbox:
    """Use `Sandbox.start(config)` as a context manager; close() always removes the container."""

    def __init__(self, config: SandboxConfig, client, container, egress: Egress | None = None):
        self.config = config
        self.egress = egress  # the allowlist proxy and internal network, when network="allowlist"
        self._client = client
        self._container = container
        self.container_id: str = container.id
        self._lock = threading.RLock()
        self._shell: PersistentShell | None = None
        self._closed = False
        # Docker's archive API cannot write to a read-only root nor see its tmpfs workdir.
        self._files: files.ArchiveTransport = (
            ExecTar(client, container.id, config.user, config.command_timeout) if config.read_only_root
            else files.DockerArchiveAPI(client.api, container.id))
        _open_sandboxes.add(self)

    # -- lifecycle -----------------------------------------------------------------------------
    @classmethod
    def start(cls, config: SandboxConfig | None = None, **overrides) -> Sandbox:
        """Create and start a container and its shell; transient engine errors are retried."""
        if config is None or overrides:
            base = config.model_dump() if config is not None else {}
            config = SandboxConfig.model_validate({**base, **overrides})
        client = connect(config.docker_host)
        for attempt in range(START_ATTEMPTS):
            try:
                return cls._start_once(client, config)
            except _TransientStartError as exc:
                if attempt == START_ATTEMPTS - 1:
                    raise SandboxError(f"starting a sandbox from {config.image} failed "
                                       f"{START_ATTEMPTS} times; last error: {exc}") from None
                time.sleep(0.5 * (attempt + 1))  # stagger retries of parallel starts
        raise AssertionError("unreachable")

    @classmethod
    def _start_once(cls, client, config: SandboxConfig) -> Sandbox:
        egress = None
        try:
            if config.network is NetworkMode.ALLOWLIST:
                egress = Egress.start(client, config)
            container = _create_container(client, config, egress)
        except BaseException as exc:
            if egress is not None:
                egress.close()
            _raise_start_error(exc, config)
        sandbox = cls(config, client, container, egress)
        try:
            container.start()
            if config.user:
                sandbox._check_user()
            sandbox._shell = PersistentShell(sandbox._spawn_shell, start_timeout=config.start_timeout,
                                             put_file=sandbox._put_shell_file, adopt_orphans=True)
        except TimeoutError as exc:
            sandbox.close()
            raise SandboxTimeout(f"sandbox from {config.image} did not start within {config.start_timeout:.0f}s: {exc}") from exc
        except ShellDied as exc:
            died = sandbox._death_error()
            sandbox.close()
            raise (died or SandboxError(f"the sandbox shell exited at start (code {exc.exit_code}): {exc.stderr}")) from None
        except BaseException as exc:
            sandbox.close()
            _raise_start_error(exc, config)
        return sandbox

    def _check_user(self) -> None:
        """The container runs as the image's user (so a harness step run as root keeps root's
        capabilities); commands run as `config.user`, which must exist before the shell starts."""
        probe = self.exec_once(["id", "-u"], timeout=30)
        if probe.exit_code != 0 or not probe.output.strip().isdigit():
            raise UnknownUser(self.config.user, f"user: {self.config.user!r} does not exist in image {self.config.image} "
                                                f"(expected a user of its /etc/passwd, or a numeric uid)")

    def _spawn_shell(self) -> AttachedProcess:
        argv = SHELL_ARGV
        if self.config.bash_fallback:  # the image's bash when it has one, else the fallback
            argv = ["sh", "-c", 'command -v bash >/dev/null 2>&1 && exec bash "$@"; exec "$0" "$@"',
                    self.config.bash_fallback, *SHELL_ARGV[1:]]
        return AttachedProcess(self._client, self.container_id, argv, user=self.config.user,
                               workdir=self.config.workdir)

    def _put_shell_file(self, path: str, data: bytes) -> None:
        files.put_bytes(self._files, path, data, *self._owner(), mode=0o600)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Stop and remove the container (idempotent)."""
        if self._closed:
            return
        self._closed = True
        _open_sandboxes.discard(self)
        if self._shell is not None:
            self._shell.close()
        try:
            self._container.remove(force=True, v=True)
        except Exception:
            pass  # already gone; `horizon sandbox gc` catches anything a dead engine left behind
        if self.egress is not None:
            self.egress.close()
        try:
            self._client.close()  # each sandbox owns its client; long eval runs must not leak sockets
        except Exception:
            pass

    @property
    def closed(self) -> bool:
        return self._closed

    # -- commands ------------------------------------------------------------------------------
    def exec(self, command: str, timeout: float | None = None, stdin: str | bytes | None = None,
             output_limit: int | None = None, cancel: threading.Event | None = None) -> ExecResult:
        """Run `command` in the persistent shell (cwd, exports and functions carry over).

        `cancel` stops it like interrupt() does, whenever it is set: before the command starts (it
        is then not run at all) or while it runs; either way the result is interrupted, exit 130."""
        timeout = self.config.command_timeout if timeout is None else timeout
        limit = output_limit or self.config.output_limit
        with self._lock:
            self._check_open()
            start = time.monotonic()
            if cancel is not None and cancel.is_set():  # set while waiting for the lock, or before
                return RawResult.not_started().to_exec_result(timeout, start)
            stdin_path = "/dev/null"
            if stdin is not None:
                stdin_path = f"{SPOOL_DIR}/in-{secrets.token_hex(8)}"
                self.write_file(stdin_path, stdin)
            try:
                raw = self._shell.run(command, timeout=timeout, stdin_path=stdin_path,
                                      head=limit // 2, tail=limit - limit // 2, cancel=cancel)
            except (ShellDied, StreamClosed) as exc:
                return self._after_shell_death(exc, start, limit)
            return raw.to_exec_result(timeout, start, oom_note=(
                f"a process was killed by the out-of-memory killer (memory limit {format_size(self.config.memory_bytes)})"))

    def _after_shell_death(self, exc: Exception, start: float, limit: int) -> ExecResult:
        if self._closed:
            raise SandboxClosed(f"sandbox {self.container_id[:12]} was closed while the command ran") from None
        died = self._death_error()
        if died is None:
            code = exc.exit_code if isinstance(exc, ShellDied) else None
            try:
                self._shell.restart()
            except Exception as restart_exc:  # noqa: BLE001 - any failure here means the sandbox is unusable
                # The engine may report the container as running for a moment after it was killed.
                died = self._death_error(settle=5.0) or SandboxError(
                    f"the sandbox shell exited and could not be restarted: {restart_exc}")
            else:
                # What the command printed before the shell died (e.g. "unbound variable") is still spooled.
                left = self.exec_once(["sh", "-c", 'tail -c "$1" -- "$2" 2>/dev/null; rm -f -- "$2"', "sh",
                                       str(limit), self._shell.last_spool], timeout=30, output_limit=limit)
                note = (f"[the shell exited (code {code}); a new shell was started in {self.config.workdir}: "
                        "working directory, variables and functions were reset]\n")
                output = left.output + ("\n" if left.output and not left.output.endswith("\n") else "") + note
                return ExecResult(code if code is not None else 1, output, False, False, time.monotonic() - start)
        self.close()
        raise died from None

    def _death_error(self, settle: float = 0.0) -> ContainerDied | None:
        """A ContainerDied describing why the container stopped, or None while it still runs."""
        deadline = time.monotonic() + settle
        while True:
            try:
                self._container.reload()
            except Exception:
                return ContainerDied(f"container {self.container_id[:12]} is gone (removed from outside)")
            state = self._container.attrs.get("State", {})
            if not state.get("Running") or state.get("Restarting"):
                break
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.1)
        if state.get("OOMKilled"):
            return ContainerDied(f"container was OOM-killed (memory limit {format_size(self.config.memory_bytes)})")
        return ContainerDied(
            f"container {self.container_id[:12]} stopped (exit code {state.get('ExitCode')}"
            f"{', ' + state['Error'] if state.get('Error') else ''}): killed from outside or crashed"
        )

    def interrupt(self) -> bool:
        """Stop the command exec() is running in another thread, as Ctrl-C would: its processes are
        killed and exec() returns with interrupted=True (exit code 130); the shell keeps its state.
        Returns False when no command was running. A caller that may interrupt before exec() has
        begun (another thread starting it) passes `exec(cancel=event)` and sets the event instead:
        that stop is not lost however early it comes."""
        return not self._closed and self._shell is not None and self._shell.interrupt()

    def exec_once(self, argv: Sequence[str] | str, timeout: float | None = None, *, user: str | None = None,
                  workdir: str | None = None, output_limit: int | None = None) -> ExecResult:
        """Run one plain process (a `docker exec`), outside the persistent shell."""
        self._check_open()
        timeout = max(0.1, self.config.command_timeout if timeout is None else timeout)  # 0 would mean "none"
        argv = ["bash", "-c", argv] if isinstance(argv, str) else list(argv)
        wrapped = ["timeout", "-s", "KILL", f"{timeout:g}", *argv]
        buf = HeadTailBuffer(output_limit or self.config.output_limit)
        start = time.monotonic()
        try:
            proc = AttachedProcess(self._client, self.container_id, wrapped, user=user or self.config.user,
                                   workdir=workdir or self.config.workdir, stdout_sink=buf.feed, merge_stderr=True)
        except Exception as exc:  # noqa: BLE001 - reported with the container's state
            died = self._death_error()
            raise (died or SandboxError(f"exec_once {argv!r} failed: {exc}")) from None
        try:
            proc.drain(start + timeout + 5)
        finally:
            proc.close()
        duration = time.monotonic() - start
        code = proc.exit_code()
        if code is None and self._closed:
            raise SandboxClosed(f"sandbox {self.container_id[:12]} was closed while {argv!r} ran")
        timed_out = code is None or (code == 137 and duration >= timeout)
        output, truncated = render_output(*buf.parts(), buf.total)
        return ExecResult(124 if timed_out else int(code), output, timed_out, truncated, duration, False, buf.total)

    def as_user(self, user: str) -> SandboxAsUser:
        """This container, with exec_once and file writes as `user`; UnknownUser when it does not exist."""
        self._check_open()
        return SandboxAsUser(self, user)

    def disconnect_network(self) -> None:
        """Take the sandbox off every network it is on (loopback stays): for a later phase that must
        have none. There is no way back on; a "none" sandbox has nothing to take off."""
        self._check_open()
        self._container.reload()
        for name in (self._container.attrs.get("NetworkSettings") or {}).get("Networks") or {}:
            if name != "none":
                self._client.api.disconnect_container_from_network(self.container_id, name, force=True)

    def egress_log(self) -> list[dict]:
        """The allowlist proxy's decisions ({"event": "allow"|"deny"|"error", "host", "port", ...})."""
        return self.egress.log() if self.egress is not None else []

    # -- files ---------------------------------------------------------------------------------
    def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        self._check_open()
        path = self._absolute(path)
        payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        parent = posixpath.dirname(path)
        if self._files.kind(parent) is None:
            made = self.exec_once(["mkdir", "-p", parent], timeout=30)
            if made.exit_code != 0:
                raise SandboxError(f"write_file: cannot create {parent}: {made.output.strip()}")
        uid, gid = self._owner()
        files.put_bytes(self._files, path, payload, uid, gid, mode)

    def read_file(self, path: str) -> bytes:
        self._check_open()
        return files.get_bytes(self._files, self._absolute(path))

    def copy_in(self, host_path, container_path: str) -> str:
        self._check_open()
        return files.copy_in(self._files, host_path, self._absolute(container_path), *self._owner())

    def copy_out(self, container_path: str, host_path):
        self._check_open()
        return files.copy_out(self._files, self._absolute(container_path), host_path)

    # -- helpers -------------------------------------------------------------------------------
    def _absolute(self, path: str) -> str:
        return path if path.startswith("/") else posixpath.join(self.config.workdir, path)

    def _owner(self) -> tuple[int, int]:
        return (self._shell.uid, self._shell.gid) if self._shell else (0, 0)

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxClosed(f"sandbox {self.container_id[:12]} is closed")


def _raise_start_error(exc: BaseException, config: SandboxConfig):
    """Re-raise a failure of starting a sandbox as the SandboxError that says what to do about it."""
    import docker

    if isinstance(exc, SandboxError) or not isinstance(exc, docker.errors.APIError):
        raise exc
    message = exc.explanation or str(exc)
    if config.user and "unable to find user" in str(message).lower():
        raise UnknownUser(config.user, f"user: {config.user!r} does not exist in image {config.image} "
                                       f"(expected a user of its /etc/passwd, or a numeric uid): {message}") from exc
    if exc.is_server_error():
        raise _TransientStartError(message) from exc
    raise SandboxError(f"starting a sandbox from {config.image} failed: {message}") from exc


def _network_mode(config: SandboxConfig, egress: Egress | None) -> str:
    if config.docker_network:
        return config.docker_network
    if egress is not None:
        return egress.network_name
    return "bridge" if config.network is NetworkMode.FULL else "none"


def _network_kwargs(client, config: SandboxConfig, egress: Egress | None) -> dict:
    if config.docker_network:  # a network someone else made (a compose project's), under aliases
        return {"network": config.docker_network, "networking_config": {
            config.docker_network: client.api.create_endpoint_config(aliases=config.network_aliases or None)}}
    return {"network_mode": _network_mode(config, egress)}


def _create_container(client, config: SandboxConfig, egress: Egress | None = None):
    import docker
    from docker.types import Mount as DockerMount

    labels = {**config.labels, LABEL_KEY: LABEL_VALUE, RUN_LABEL_KEY: run_id()}
    env = {**config.env, **(egress.env() if egress is not None else {})}
    mounts = [DockerMount(m.target, m.source, type="bind", read_only=m.read_only) for m in config.mounts]
    tmpfs = {}
    if config.read_only_root:
        covered = {m.target.rstrip("/") for m in config.mounts}
        tmpfs = {p: "rw,exec,mode=1777" for p in ("/tmp", config.workdir) if p.rstrip("/") not in covered}
    try:
        return client.containers.create(
            config.image, command=["sleep", "infinity"], name=f"horizon-sb-{secrets.token_hex(6)}",
            init=True, detach=True, hostname="sandbox", working_dir=config.workdir, environment=env,
            labels=labels, mounts=mounts, tmpfs=tmpfs, read_only=config.read_only_root,
            **_network_kwargs(client, config, egress),
            # Names are resolved by the proxy; the internal network's resolver never answers for
            # outside names, so make a tool that asks it fail in ~2 s instead of 20.
            dns_opt=["timeout:1", "attempts:1"] if egress is not None else None,
            mem_limit=config.memory_bytes, memswap_limit=config.memory_bytes,
            nano_cpus=int(config.cpus * 1e9), pids_limit=config.pids_limit,
            cap_drop=["ALL"], cap_add=CAPABILITIES, security_opt=["no-new-privileges"],
            device_requests=[docker.types.DeviceRequest(driver="nvidia", count=config.gpus, capabilities=[["gpu"]])]
            if config.gpus else None,
        )
    except docker.errors.ImageNotFound as exc:
        hint = " (build it with `horizon sandbox build`)" if config.image.startswith("horizon/") else ""
        raise ImageNotFound(f"image {config.image!r} is not present locally and images are never pulled{hint}") from exc
    except docker.errors.APIError as exc:
        if exc.is_server_error():
            raise _TransientStartError(exc.explanation or str(exc)) from exc
        raise SandboxError(f"creating a sandbox from {config.image} failed: {exc.explanation or exc}") from exc
