"""The package registries, and nothing else, for a Harbor task's oracle.

Harbor's containers have the network, and many real tasks' solution/solve.sh
installs what it needs (`apt-get install`, `pip install`). Ours have none
(`--network none`; the engine runs without a bridge). A run that needs the
registries gets them through this proxy instead:

- The proxy runs in the harness's process, on the host, serving one Unix
  socket per container run (a fresh directory, bind-mounted read-only at
  PROXY_MOUNT). It forwards only to REGISTRY_HOSTS: `CONNECT host:443`
  (HTTPS: pip, npm) and plain `GET`/`HEAD http://host/...` (apt's mirrors),
  one request per connection. Anything else gets 403 and is recorded, so a
  failed oracle's reason names the host it could not reach.
- In the container, a static relay (registry_forward.c, built once here
  with the host's gcc) listens on 127.0.0.1:PROXY_PORT and passes each
  connection to the socket; PROXY_ENV points curl, pip, uv, npm and apt at
  it. The container still has no network interface but loopback, so
  nothing else on the host or beyond is reachable.
- `close()` ends the proxy: the socket is removed and nothing reaches the
  registries after it (the tests run offline, as before).

The registries are what the host itself reaches (the image builds fetch
from them too); a host not in the list is not reachable here anyway. The
proxy does not see inside a CONNECT tunnel: a client could name another
site in its TLS handshake to the registry's CDN (domain fronting, which
the large CDNs refuse). Such a site would still have to be one this
machine reaches.
"""

from __future__ import annotations

import hashlib
import os
import select
import shutil
import socket
import socketserver
import subprocess
import tempfile
import threading
from pathlib import Path

REGISTRY_HOSTS = frozenset({
    "deb.debian.org", "security.debian.org", "archive.ubuntu.com", "security.ubuntu.com",
    "pypi.org", "files.pythonhosted.org", "registry.npmjs.org",
})
PROXY_MOUNT = "/clawloop-registries"
PROXY_PORT = 3128
_PROXY_URL = f"http://127.0.0.1:{PROXY_PORT}"
PROXY_ENV = {name: _PROXY_URL for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY",
                                           "npm_config_proxy", "npm_config_https_proxy")}
PROXY_ENV.update(no_proxy="localhost,127.0.0.1,::1", NO_PROXY="localhost,127.0.0.1,::1")
# apt drops the variables under sudo and pipelines requests; this file
# (written for the oracle's run, removed after it) holds either way.
APT_PROXY_CONF = "/etc/apt/apt.conf.d/99clawloop-registry-proxy"
APT_PROXY_TEXT = (f'Acquire::http::Proxy "{_PROXY_URL}";\nAcquire::https::Proxy "{_PROXY_URL}";\n'
                  'Acquire::http::Pipeline-Depth "0";\n')
HEAD_LIMIT = 64 * 1024
HEAD_SECONDS = 30.0
IDLE_SECONDS = 300.0
REFUSED_KEPT = 20  # hosts named in a reason; a client asking for thousands does not grow the proxy
FORWARD_SOURCE = Path(__file__).with_name("registry_forward.c")


class RegistryProxyError(RuntimeError):
    """The proxy or its relay could not be set up here (no gcc, say)."""


def forwarder_binary() -> Path:
    """The relay, compiled static from FORWARD_SOURCE once per content
    (in the temporary directory, like the seccomp profile)."""
    source = FORWARD_SOURCE.read_bytes()
    path = Path(tempfile.gettempdir()) / f"clawloop-registry-forward-{hashlib.sha256(source).hexdigest()[:16]}"
    if path.is_file():
        return path
    gcc = shutil.which("gcc")
    if gcc is None:
        raise RegistryProxyError("the registry relay needs gcc to be built (Debian's build-essential)")
    partial = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
    done = subprocess.run([gcc, "-static", "-O2", "-o", str(partial), str(FORWARD_SOURCE)],
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RegistryProxyError(f"building {FORWARD_SOURCE} failed: {done.stderr.strip()[-400:]}")
    os.chmod(partial, 0o755)
    os.replace(partial, path)
    return path


def _read_head(conn: socket.socket) -> bytes | None:
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = conn.recv(4096)
        if not chunk or len(head) + len(chunk) > HEAD_LIMIT:
            return None
        head += chunk
    return head


def _relay(a: socket.socket, b: socket.socket) -> None:
    """Both directions until both have closed, or nothing moved for IDLE_SECONDS."""
    open_ends = {a: b, b: a}
    while open_ends:
        ready, _, _ = select.select(list(open_ends), [], [], IDLE_SECONDS)
        if not ready:
            return
        for source in ready:
            try:
                data = source.recv(65536)
            except OSError:
                data = b""
            target = open_ends[source]
            if not data:
                del open_ends[source]
                try:
                    target.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                continue
            try:
                target.sendall(data)
            except OSError:
                return


class _Handler(socketserver.BaseRequestHandler):
    server: _Server

    def handle(self) -> None:
        conn = self.request
        with self.server.lock:
            if self.server.closed:
                return
            self.server.connections.add(conn)
        try:
            self._handle(conn)
        finally:
            with self.server.lock:
                self.server.connections.discard(conn)

    def _handle(self, conn: socket.socket) -> None:
        conn.settimeout(HEAD_SECONDS)
        try:
            head = _read_head(conn)
        except OSError:
            return
        if head is None:
            return
        head, _, rest = head.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or any("\r" in line or "\n" in line for line in lines):
            return self._refuse(conn, 400, "malformed request head")
        method, target, _version = parts
        if method == "CONNECT":
            host, _, port = target.rpartition(":")
            path = None
            if port != "443":
                return self._refuse(conn, 403, f"{target}: only port 443", host)
        elif method in ("GET", "HEAD") and target.startswith("http://"):
            authority, _, path = target[len("http://"):].partition("/")
            host, _, port = authority.partition(":")
            if port not in ("", "80"):
                return self._refuse(conn, 403, f"{authority}: only port 80", host)
            if rest or any(line.lower().startswith(("content-length:", "transfer-encoding:")) for line in lines[1:]):
                return self._refuse(conn, 400, "a request body")
        else:
            return self._refuse(conn, 405, f"{method} {target[:100]}: only CONNECT and plain GET/HEAD")
        host = host.lower().rstrip(".")
        if host not in REGISTRY_HOSTS:
            return self._refuse(conn, 403, f"{host}: not a package registry this proxy serves", host)
        try:
            upstream = socket.create_connection((host, 443 if path is None else 80), timeout=HEAD_SECONDS)
        except OSError as exc:
            return self._refuse(conn, 502, f"{host}: {exc}")
        with upstream:
            upstream.settimeout(IDLE_SECONDS)
            conn.settimeout(IDLE_SECONDS)
            if path is None:
                conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                if rest:
                    upstream.sendall(rest)
            else:
                # The registry's own Host: a CDN routes by it, so the client's could name another site.
                headers = [line for line in lines[1:]
                           if not line.lower().startswith(("proxy-", "connection:", "host:"))]
                request = "\r\n".join([f"{method} /{path} HTTP/1.1", f"Host: {host}", *headers, "Connection: close",
                                        "", ""])
                upstream.sendall(request.encode("latin-1"))
                _response_only(conn, upstream)
                return
            _relay(conn, upstream)

    def _refuse(self, conn: socket.socket, status: int, why: str, host: str | None = None) -> None:
        if host:
            with self.server.lock:
                if len(self.server.refused) < REFUSED_KEPT:
                    self.server.refused.add(host.lower().rstrip(".")[:200])
        body = f"ClawLoop's registry proxy refused: {why}\n".encode()
        reason = {400: "Bad Request", 403: "Forbidden", 405: "Method Not Allowed", 502: "Bad Gateway"}[status]
        try:
            conn.sendall(f"HTTP/1.1 {status} {reason}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
                         .encode() + body)
        except OSError:
            pass


def _response_only(conn: socket.socket, upstream: socket.socket) -> None:
    """A plain-HTTP response, relayed until the server closes; nothing more
    the client sends is forwarded (one request per connection)."""
    try:
        while data := upstream.recv(65536):
            conn.sendall(data)
    except OSError:
        return


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def __init__(self, path: str) -> None:
        super().__init__(path, _Handler)
        self.lock = threading.Lock()
        self.refused: set[str] = set()
        self.connections: set[socket.socket] = set()
        self.closed = False


class RegistryProxy:
    """One proxy for one container run: `mount` is its `-v` spec, `start_relay`
    runs the relay in the container, `refused` the hosts it would not reach."""

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="clawloop-registries-"))
        os.chmod(self.directory, 0o755)
        shutil.copyfile(forwarder_binary(), self.directory / "registry-forward")
        os.chmod(self.directory / "registry-forward", 0o755)
        self.socket_path = self.directory / "proxy.sock"
        self.server = _Server(str(self.socket_path))
        os.chmod(self.socket_path, 0o666)  # the image's user, perhaps not root, connects
        self.thread = threading.Thread(target=self.server.serve_forever, name="registry-proxy", daemon=True)
        self.thread.start()

    @property
    def mount(self) -> str:
        return f"{self.directory}:{PROXY_MOUNT}:ro"

    @property
    def relay_argv(self) -> list[str]:
        return [f"{PROXY_MOUNT}/registry-forward", str(PROXY_PORT), f"{PROXY_MOUNT}/proxy.sock"]

    @property
    def refused(self) -> list[str]:
        with self.server.lock:
            return sorted(self.server.refused)

    def close(self) -> None:
        """Stop serving and cut every open tunnel: nothing reaches a registry after this."""
        self.server.shutdown()
        self.server.server_close()
        with self.server.lock:
            self.server.closed = True
            for conn in self.server.connections:
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> RegistryProxy:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def registries_text() -> str:
    return ", ".join(sorted(REGISTRY_HOSTS))


__all__ = ["APT_PROXY_CONF", "APT_PROXY_TEXT", "PROXY_ENV", "PROXY_MOUNT", "REGISTRY_HOSTS", "RegistryProxy",
           "RegistryProxyError", "forwarder_binary", "registries_text"]
