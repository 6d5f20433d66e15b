"""Docker sandboxes: a persistent shell in a locked-down container, and files in and out.

    from sandbox import Sandbox, SandboxConfig
    with Sandbox.start(SandboxConfig()) as sb:
        sb.exec("cd /tmp && export X=1")
        print(sb.exec("pwd; echo $X").output)
"""

from sandbox.config import Mount, SandboxConfig
from sandbox.constants import BASE_IMAGE, LABEL_KEY, RUN_LABEL_KEY
from sandbox.docker_sandbox import Sandbox
from sandbox.errors import (
    ContainerDied,
    DaemonUnavailable,
    ImageBuildError,
    ImageNotFound,
    SandboxClosed,
    SandboxError,
    SandboxTimeout,
)
from sandbox.local import LocalSandbox
from sandbox.result import ExecResult

__all__ = [
    "BASE_IMAGE", "LABEL_KEY", "RUN_LABEL_KEY", "ContainerDied", "DaemonUnavailable", "ExecResult",
    "ImageBuildError", "ImageNotFound", "LocalSandbox", "Mount", "Sandbox", "SandboxClosed", "SandboxConfig",
    "SandboxError", "SandboxTimeout",
]
