"""The real `dagster-webserver` on a Dagster home, started and stopped for a
test: the tests that look at the UI (test_webserver.py, test_browser.py) share it."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WEBSERVER = Path(sys.executable).parent / "dagster-webserver"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _default_signals():
    # Started from a non-interactive shell the webserver inherits ignored
    # SIGINT; reset it so SIGINT to the group stops it cleanly.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


class Webserver:
    """`dagster-webserver -w workspace.yaml` on loopback, as a context manager:
    entering waits until it answers and its code location has loaded; leaving
    stops its whole process group (the code server is a child)."""

    def __init__(self, dagster_home: Path, log_path: Path, env: dict[str, str] | None = None, timeout: float = 120):
        self.dagster_home = Path(dagster_home)
        self.log_path = Path(log_path)
        self.env = {**os.environ, **(env or {}), "DAGSTER_HOME": str(self.dagster_home)}
        self.timeout = timeout
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""

    def graphql(self, query: str) -> dict:
        request = urllib.request.Request(f"{self.url}/graphql", data=json.dumps({"query": query}).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def asset_nodes(self) -> list[dict]:
        """The code location's asset nodes, polled until it has loaded (it
        loads after the server first answers)."""
        deadline = time.monotonic() + self.timeout
        while True:
            result = self.graphql("{ assetNodes { assetKey { path } groupName isPartitioned jobNames } }")
            nodes = (result.get("data") or {}).get("assetNodes") or []
            if nodes:
                return nodes
            assert time.monotonic() < deadline, f"no asset nodes within {self.timeout} s: {result}\n{self.log_tail()}"
            time.sleep(0.5)

    def __enter__(self) -> "Webserver":
        self._log = self.log_path.open("w")
        self.process = subprocess.Popen(
            [str(WEBSERVER), "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(self.port)],
            cwd=REPO, env=self.env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=_default_signals,
        )
        try:
            deadline = time.monotonic() + self.timeout
            while True:
                try:
                    urllib.request.urlopen(f"{self.url}/server_info", timeout=2)
                    break
                except OSError:
                    assert self.process.poll() is None, f"dagster-webserver exited:\n{self.log_tail()}"
                    assert time.monotonic() < deadline, f"dagster-webserver did not answer within {self.timeout} s"
                    time.sleep(0.5)
            self.asset_nodes()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        if self.process is not None:
            try:
                os.killpg(self.process.pid, signal.SIGINT)
                self.process.wait(timeout=15)
            except ProcessLookupError:
                pass  # the group is gone already
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self._log.close()
