"""One CyberGym trial's grading service: the two builds, and the submission server the agent reaches.

How the agent reaches it without a network: the server listens on a unix socket in a fresh host
folder, and that folder is bind-mounted read-only at /run/cybergym in the agent's container, which
stays on `network_mode: none`. The agent's submit.sh runs `curl --unix-socket
/run/cybergym/submit.sock http://cybergym/submit-vul ...`; nothing else is reachable. (CyberGym's
own setup gives the agent a network path to the server; inspect_evals uses internal Docker
networks. A socket needs no network at all.) The price: the Docker engine must see the runner's
files, so CyberGym tasks need a local engine; a remote one is refused with that reason.

The builds are resolved in the trial's build phase (`prepare`): a prebuilt ARVO/OSS-Fuzz image
when the engine has or can pull it, else built from the task's sources.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path

from evals.cybergym.builds import resolve
from evals.cybergym.executor import PocRun, run_poc
from evals.cybergym.server import SocketServer, SubmissionStore, make_app
from evals.task import CyberGymVerifier, Task
from sandbox.config import Mount

MOUNT_DIR = "/run/cybergym"
SOCKET_NAME = "submit.sock"
SOCKET_PATH = f"{MOUNT_DIR}/{SOCKET_NAME}"


class RemoteEngine(RuntimeError):
    pass


class CyberGymService:
    def __init__(self, task: Task, engine, trial_dir: Path, labels: dict[str, str]):
        assert isinstance(task.verifier, CyberGymVerifier)
        self.task, self.verifier = task, task.verifier
        self.engine, self.trial_dir, self.labels = engine, trial_dir, labels
        self.images: dict[str, tuple[str, list[str]]] = {}
        self.store: SubmissionStore | None = None

    def prepare(self, timeout: float | None = None) -> list[str]:
        """Find or build the vul and fix images (the build phase); returns notes for the result."""
        notes: list[str] = []
        for side in ("vul", "fix"):
            build = getattr(self.verifier, side)
            tag, command, side_notes = resolve(build, self.engine.client, self.engine.builder,
                                               f"{self.task.id}-{side}", timeout=timeout,
                                               pull=self.engine.builder.policy.pull)
            self.images[side] = (tag, command)
            notes += side_notes
        return notes

    def run(self, side: str, poc: bytes) -> PocRun:
        tag, command = self.images[side]
        r = self.task.resources
        return run_poc(self.engine.client, tag, command, poc, self.verifier.run_timeout_sec,
                       self.verifier.container_timeout_sec, labels=self.labels,
                       memory=f"{r.memory_mb}m", pids_limit=r.pids_limit)

    @contextlib.contextmanager
    def serving(self):
        """Serve submissions while the agent runs; yields the mounts for the agent's container."""
        host = self.engine.docker_host
        if host and not host.startswith("unix://"):
            raise RemoteEngine(f"CyberGym's submission socket is bind-mounted into the agent's container, which the "
                               f"engine at {host} cannot see: run CyberGym tasks on a local engine")
        self.store = SubmissionStore(self.trial_dir / "cybergym")
        folder = Path(tempfile.mkdtemp(prefix="hzcg-"))  # short: a socket path has at most 107 bytes
        folder.chmod(0o755)
        app = make_app(self.store, self.verifier.agent_task_id, lambda poc: self.run("vul", poc))
        server = SocketServer(app, folder / SOCKET_NAME).start()
        try:
            yield [Mount(source=str(folder), target=MOUNT_DIR, read_only=True)]
        finally:
            server.stop()
            shutil.rmtree(folder, ignore_errors=True)
