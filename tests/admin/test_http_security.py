"""The HTTP endpoint over TLS with basic auth or a bearer token, on real
servers: the PEM key store of the Kafka listeners' kind, 401 with the
challenge without (or with wrong) credentials, and the start-up warning of a
secured server exposing the endpoint unauthenticated off loopback."""
from __future__ import annotations

import base64
import re
import ssl
import urllib.error
import urllib.request

import pytest

from tests.security.conftest import pki  # noqa: F401 (the fixture)
from tests.support import ServerProcess

pytestmark = [pytest.mark.clients, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

_URL = re.compile(r"http endpoint on (https?)://([\d.]+):(\d+)/")


def endpoint(server) -> tuple[str, int]:
    for line in server.log_lines:
        m = _URL.search(line)
        if m:
            return m.group(1), int(m.group(3))
    raise AssertionError(server.log_text())


def get(url: str, ctx, authorization: str | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(url)
    if authorization:
        req.add_header("Authorization", authorization)
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=30) as r:
            return r.status, dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers)


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_tls_and_basic_auth(pki, tmp_path):  # noqa: F811
    server = ServerProcess(tmp_path / "d", settings={
        "http.listen": "127.0.0.1:0", "http.ssl.keystore.type": "PEM",
        "http.ssl.keystore.location": str(pki.server_keystore),
        "http.auth.basic.users": "ops:s3cret,viewer:v1ew"}).start()
    try:
        scheme, port = endpoint(server)
        assert scheme == "https"
        ctx = ssl.create_default_context(cafile=str(pki.ca_file))
        url = f"https://localhost:{port}/metrics"
        status, headers = get(url, ctx)
        assert status == 401 and headers["WWW-Authenticate"] == 'Basic realm="kcoord"'
        assert get(url, ctx, basic("ops", "wrong"))[0] == 401
        assert get(url, ctx, basic("nobody", "s3cret"))[0] == 401
        assert get(url, ctx, basic("ops", "s3cret"))[0] == 200
        assert get(f"https://localhost:{port}/v3/kafka", ctx, basic("viewer", "v1ew"))[0] == 200
        with pytest.raises((urllib.error.URLError, ConnectionError)):  # plain HTTP, TLS port
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        assert not any("s3cret" in line for line in server.log_lines)
    finally:
        server.stop()


def test_bearer_token(tmp_path):
    server = ServerProcess(tmp_path / "d", settings={
        "http.listen": "127.0.0.1:0", "http.auth.bearer.token": "tok-123"}).start()
    try:
        _, port = endpoint(server)
        url = f"http://127.0.0.1:{port}/metrics"
        status, headers = get(url, None)
        assert status == 401 and headers["WWW-Authenticate"] == 'Bearer realm="kcoord"'
        assert get(url, None, "Bearer tok-12")[0] == 401
        assert get(url, None, basic("tok-123", "tok-123"))[0] == 401
        assert get(url, None, "Bearer tok-123")[0] == 200
    finally:
        server.stop()


def test_warning_for_an_open_endpoint_of_a_secured_server(pki, tmp_path):  # noqa: F811
    secured = {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
               "ssl.keystore.location": str(pki.server_keystore)}
    warning = "served without authentication on a non-loopback address"
    server = ServerProcess(tmp_path / "a", settings={**secured,
                                                     "http.listen": "0.0.0.0:0"}).start()
    try:
        assert warning in server.log_text()
    finally:
        server.stop()
    for extra in ({"http.listen": "127.0.0.1:0"},
                  {"http.listen": "0.0.0.0:0", "http.auth.bearer.token": "t"}):
        server = ServerProcess(tmp_path / "b", settings={**secured, **extra}).start()
        try:
            assert warning not in server.log_text()
        finally:
            server.stop()
