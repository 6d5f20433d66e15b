"""Every sandbox failure is a SandboxError subclass whose message says what happened."""

from __future__ import annotations


class SandboxError(RuntimeError):
    """Base class of all sandbox failures."""


class DaemonUnavailable(SandboxError):
    """No Docker engine answers at the configured address."""


class ImageNotFound(SandboxError):
    """The requested image is not present locally (images are never pulled)."""


class ImageBuildError(SandboxError):
    """Building the base image or a task image failed; the message carries the build log tail."""


class ContainerDied(SandboxError):
    """The container stopped under a running sandbox: killed from outside, OOM-killed, or crashed."""


class SandboxTimeout(SandboxError):
    """A sandbox operation that is not a shell command (start, file copy) exceeded its time limit."""


class SandboxClosed(SandboxError):
    """The sandbox was used after close()."""
