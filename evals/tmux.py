"""The agent's terminal for Terminal-Bench tasks: a tmux session inside the task container.

Mirrors the TB harness: a 160x40 session named "agent" with a 50,000-line history; keystrokes go in
through `tmux send-keys`; a blocking command gets `; tmux wait -S done` appended and the caller waits
on `tmux wait done` under a timeout; the screen comes back through `tmux capture-pane`. Every tmux
call is a separate process (`exec_once`), so a wedged program in the pane never blocks the harness.
"""

from __future__ import annotations

import time

WIDTH, HEIGHT, HISTORY = 160, 40, 50_000
# The image's bash as a login shell, as the TB harness opens it; a POSIX sh where there is no bash.
# The toolbox tmux's locale settings (evals/container_tools.py) are not the pane's.
LOGIN_SHELL = ('[ "$LOCPATH" = /opt/horizon-tools/locale ] && unset LOCPATH LC_ALL TERMINFO; '
               "if command -v bash >/dev/null 2>&1; then exec bash --login; else exec sh -l; fi")


class TerminalError(RuntimeError):
    pass


class TmuxSession:
    def __init__(self, sandbox, name: str = "agent", workdir: str | None = None):
        self.sandbox = sandbox
        self.name = name
        self.workdir = workdir

    def _tmux(self, *args: str, timeout: float = 30) -> str:
        result = self.sandbox.exec_once(["tmux", *args], timeout=timeout)
        if result.exit_code != 0:
            raise TerminalError(f"tmux {args[0]} failed ({result.exit_code}): {result.output.strip()[:500]}")
        return result.output

    def start(self) -> "TmuxSession":
        cwd = ["-c", self.workdir] if self.workdir else []
        self._tmux("new-session", "-d", "-s", self.name, "-x", str(WIDTH), "-y", str(HEIGHT), *cwd, LOGIN_SHELL)
        self._tmux("set-option", "-t", self.name, "history-limit", str(HISTORY))
        return self

    def send_keys(self, keys: str | list[str], *, block: bool = False, min_timeout_sec: float = 0.0,
                  max_timeout_sec: float = 180.0) -> bool:
        """Type `keys` (tmux key names such as "Enter" or "C-c" are allowed as list items).

        With `block`, the command line is ended with `; tmux wait -S done` and Enter, and this
        returns once the command finished (True) or `max_timeout_sec` passed (False).
        """
        keys = [keys] if isinstance(keys, str) else list(keys)
        if block:
            while keys and keys[-1] in ("Enter", "C-m", "KPEnter", "\n"):
                keys.pop()
            keys += ["; tmux wait -S done", "Enter"]
        self._tmux("send-keys", "-t", self.name, *keys)
        if not block:
            time.sleep(min_timeout_sec)
            return True
        wait = self.sandbox.exec_once(
            ["timeout", f"{max(1, int(max_timeout_sec))}s", "tmux", "wait", "done"], timeout=max_timeout_sec + 30
        )
        return wait.exit_code == 0

    def type_text(self, text: str, enter: bool = True) -> None:
        """Type `text` literally (no key-name interpretation), then Enter if asked."""
        if text:
            self._tmux("send-keys", "-t", self.name, "-l", text)
        if enter:
            self._tmux("send-keys", "-t", self.name, "Enter")

    def send_key_names(self, names: list[str]) -> None:
        """Send tmux key names such as C-c, Escape, Up or Tab."""
        if names:
            self._tmux("send-keys", "-t", self.name, *names)

    def capture(self, full_history: bool = False) -> str:
        args = ["capture-pane", "-p", "-t", self.name] + (["-S", "-"] if full_history else [])
        return self._tmux(*args)
