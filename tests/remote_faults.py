"""A fault-injecting env server for the tests of ``ragen2/Remote-v0``: the real
:class:`ragen2_envs.remote_server.EnvServer` behind a request handler that asks a plan, per
request, whether to drop it, garble it, answer 500/503 or stall. It runs on a thread of the test's
own process, bound to port 0 (the OS gives the port to the socket that keeps it)."""

from __future__ import annotations

import json
import threading
import urllib.parse

import gymnasium as gym

import ragen2_envs  # noqa: F401  (registers the ids)
from ragen2_envs.remote_server import EnvServer, RequestHandler, make_http_server

LAKE = "ragen2/FrozenLake-v0"


class FaultyHandler(RequestHandler):
    """Asks the server's ``plan(path, body)`` what to do with each POST: None (answer), "drop"
    (close the connection unanswered), "garbage" (200 with a body that is not JSON), "html500",
    503, ("block", event) (wait for the event before handling: a slow server), or
    ("block_after", event) (handle, then wait before answering: a lost answer)."""

    def do_GET(self) -> None:  # noqa: N802
        self.server.seen.append((urllib.parse.urlsplit(self.path).path, None))
        super().do_GET()

    def do_POST(self) -> None:  # noqa: N802
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.loads(raw) if raw else {}
        path = urllib.parse.urlsplit(self.path).path
        self.server.seen.append((path, body))
        fault = self.server.plan(path, body)
        if fault == "drop":
            self.close_connection = True
            return
        if fault == "garbage":
            return self.send_bytes(200, b'{"observation": {"text": "half')
        if fault == "html500":
            return self.send_bytes(500, b"<html>Internal Server Error</html>")
        if fault == 503:
            return self.send_bytes(503, b'{"error": "busy"}')
        if isinstance(fault, tuple) and fault[0] == "block":
            fault[1].wait(120)
        status, doc = self.server.env_server.handle("POST", path, {}, body)
        if isinstance(fault, tuple) and fault[0] == "block_after":
            fault[1].wait(120)
        self.respond(status, doc)


class Server:
    """An env server on a thread of this test, with a fault plan and a log of what it saw."""

    def __init__(self, env_id: str = LAKE, handler=FaultyHandler, **kwargs) -> None:
        self.env_server = EnvServer(lambda: gym.make(env_id, **kwargs), env_id)
        self.http = make_http_server(self.env_server, "127.0.0.1", 0, handler=handler)
        self.http.seen, self.http.plan = [], lambda path, body: None
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        self.seeds: dict[str, int] = {}  # episode id -> seed, for plans keyed by seed
        self.released = threading.Event()
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def plan(self, fn) -> None:
        def with_seeds(path, body):
            if path == "/reset":
                self.seeds[body.get("episode_id")] = body.get("seed")
            return fn(path, self.seeds.get(body.get("episode_id")), body)
        self.http.plan = with_seeds

    def seen(self, path: str) -> int:
        return sum(p == path for p, _ in self.http.seen)

    def close(self) -> None:
        self.released.set()
        self.http.shutdown()
        self.http.server_close()
        self.env_server.close()
