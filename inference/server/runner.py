"""Build the server around a checkpoint and run it with uvicorn (in the foreground or a thread)."""

from __future__ import annotations

import logging
import socket
import threading
import time
from pathlib import Path
from typing import Optional

from inference.chat.template import detect_variant
from inference.server.app import ServerState, create_app
from inference.server.prompting import ServerDefaults
from inference.tokenizer import Tokenizer

log = logging.getLogger("horizon.server")


def build_state(model_path: str | Path, engine_config, served_model_name: Optional[str] = None,
                variant: Optional[str] = None, max_inflight: int = 256, default_max_tokens: int = 4096) -> ServerState:
    """Load the tokenizer and the engine (not started yet) for `model_path`."""
    from inference.engine.engine import Engine

    path = Path(model_path)
    tokenizer = Tokenizer.from_pretrained(path)
    missing = tokenizer.missing_glm_tokens()
    if missing:
        log.warning("tokenizer lacks GLM special tokens %s; chat output parsing may suffer", missing)
    chosen = variant or detect_variant(tokenizer.chat_template)
    engine = Engine(path, engine_config, detokenize=tokenizer.decode)
    return ServerState(
        engine=engine, tokenizer=tokenizer, model_name=served_model_name or path.name,
        max_context=engine.max_position, max_inflight=max_inflight,
        defaults=ServerDefaults(variant=chosen, max_tokens=default_max_tokens),
    )


def listen_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket; raises OSError (e.g. EADDRINUSE) when the address cannot be taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock


def serve(state: ServerState, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info",
          sock: Optional[socket.socket] = None) -> None:
    """Run until interrupted; the engine's step loop runs in its own thread meanwhile. `sock`: an
    already listening socket (from `listen_socket`), else one is opened on host:port."""
    import uvicorn

    sock = sock or listen_socket(host, port)
    config = uvicorn.Config(create_app(state), log_level=log_level, timeout_graceful_shutdown=5)
    with state.engine:
        engine = state.engine
        graphs = getattr(engine.runner, "graphs", None)  # (GLM-5.3-Flash's runner has none)
        decode = "" if graphs is None else f"; {graphs.describe()}"
        overlap = getattr(engine, "overlap", None)
        decode += "" if overlap is None else f"; {overlap.describe()}"
        print(f"horizon serve: {state.model_name} ({state.defaults.variant} template) on http://{host}:"
              f"{sock.getsockname()[1]}/v1 (KV cache {engine.config.kv_cache_dtype}: "
              f"{engine.cache_bytes_per_token:,} B/token; weights {engine.config.resolved_weight_format()}{decode})",
              flush=True)
        if engine.ranks is not None:
            print(f"horizon serve: {engine.model.load_stats.describe()}", flush=True)
        server = uvicorn.Server(config)
        # A dead or hung rank fails every request in flight; then the server exits (non-zero, cli_serve).
        engine.on_fatal.append(lambda exc: setattr(server, "should_exit", True))
        server.run(sockets=[sock])


class BackgroundServer:
    """The server in a thread on a free port (tests, the agent's local mode)."""

    def __init__(self, state: ServerState, host: str = "127.0.0.1", port: int = 0):
        import uvicorn

        self.state = state
        self._sock = listen_socket(host, port)
        self.host, self.port = host, self._sock.getsockname()[1]
        config = uvicorn.Config(create_app(state), log_level="warning", timeout_graceful_shutdown=2)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]},
                                        name="horizon-http", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def __enter__(self) -> "BackgroundServer":
        self.state.engine.start()
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the HTTP server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self.state.engine.shutdown()
        self._sock.close()
