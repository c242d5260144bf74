"""The registry proxy (clawloop_assets/harbor/registry_proxy.py) serves the
package registries and nothing else, one request per connection, and
nothing after it closes."""

import socket
import ssl

import pytest

from clawloop_assets.harbor.registry_proxy import REGISTRY_HOSTS, RegistryProxy


def _ask(proxy: RegistryProxy, request: bytes) -> tuple[socket.socket, bytes]:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(30)
    conn.connect(str(proxy.socket_path))
    conn.sendall(request)
    reply = b""
    while b"\r\n\r\n" not in reply:
        chunk = conn.recv(4096)
        if not chunk:
            break
        reply += chunk
    return conn, reply


def _ends(tls: ssl.SSLSocket) -> bool:
    """Whether the connection ends (what was in flight may come first), rather than stay open."""
    tls.settimeout(5)
    try:
        while tls.recv(65536):
            pass
        return True
    except TimeoutError:
        return False
    except (OSError, ssl.SSLError):
        return True


@pytest.fixture
def proxy():
    with RegistryProxy() as serving:
        yield serving


@pytest.mark.parametrize(("request_bytes", "status", "refused"), [
    (b"CONNECT github.com:443 HTTP/1.1\r\n\r\n", b"403", ["github.com"]),
    (b"CONNECT pypi.org:22 HTTP/1.1\r\n\r\n", b"403", ["pypi.org"]),
    (b"GET http://169.254.169.254/latest/meta-data HTTP/1.1\r\nHost: x\r\n\r\n", b"403", ["169.254.169.254"]),
    (b"GET http://deb.debian.org.evil.example/ HTTP/1.1\r\n\r\n", b"403", ["deb.debian.org.evil.example"]),
    (b"POST http://pypi.org/legacy/ HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", b"405", []),
    (b"GET http://pypi.org/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", b"400", []),
    (b"GET /simple/ HTTP/1.1\r\nHost: pypi.org\r\n\r\n", b"405", []),
    (b"nonsense\r\n\r\n", b"400", []),
])
def test_what_is_not_a_registry_request_is_refused_and_recorded(proxy, request_bytes, status, refused):
    conn, reply = _ask(proxy, request_bytes)
    conn.close()
    assert reply.split(b" ")[1] == status, reply
    assert proxy.refused == refused


def test_a_tunnel_to_a_registry_works_until_the_proxy_closes(proxy):
    conn, reply = _ask(proxy, b"CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 200"), reply
    tls = ssl.create_default_context().wrap_socket(conn, server_hostname="pypi.org")
    tls.sendall(b"GET /simple/six/ HTTP/1.1\r\nHost: pypi.org\r\nAccept: text/html\r\n\r\n")
    assert tls.recv(100).startswith(b"HTTP/1.1 200")
    proxy.close()
    assert _ends(tls)  # the open tunnel is cut (pypi.org would keep it alive)
    with pytest.raises(OSError):  # and nothing more is served
        _ask(proxy, b"CONNECT pypi.org:443 HTTP/1.1\r\n\r\n")


def test_the_registries_are_package_registries():
    assert REGISTRY_HOSTS == {"deb.debian.org", "security.debian.org", "archive.ubuntu.com", "security.ubuntu.com",
                              "pypi.org", "files.pythonhosted.org", "registry.npmjs.org"}


def test_a_plain_request_goes_to_the_registry_it_names_whatever_host_header_it_carries(proxy):
    # deb.debian.org is a CDN that routes by Host: the client's header must not choose another site.
    conn, reply = _ask(proxy, b"HEAD http://deb.debian.org/debian/dists/bookworm/Release HTTP/1.1\r\n"
                              b"Host: example.org\r\nUser-Agent: test\r\n\r\n")
    conn.close()
    assert reply.startswith(b"HTTP/1.1 200"), reply
    conn, reply = _ask(proxy, b"GET http://pypi.org/ HTTP/1.1\r\nX: a\nHost: example.org\r\n\r\n")
    conn.close()
    assert reply.split(b" ")[1] == b"400", reply
