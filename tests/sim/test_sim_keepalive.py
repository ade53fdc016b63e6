"""One kept-alive connection, as nginx's upstream keepalive holds them: an answer the simulator gives
without routing (a 404, a 405) still reads the request's body, so the next request on that
connection is parsed from where it starts (found by the H200 helper: a POST to a route it did not
serve left its body to be read as the next request, which got an HTML 400)."""

from __future__ import annotations

import http.client
import json

import pytest


@pytest.mark.parametrize(
    ("method", "path", "status"), [("POST", "/v1/nothing", 404), ("PUT", "/v1/models", 405)]
)
def test_the_next_request_on_a_kept_alive_connection_is_answered(
    sim, method: str, path: str, status: int
) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", sim.port, timeout=10)
    body = json.dumps({"model": "x", "prompt": "GET /v1/models HTTP/1.1\r\n" * 20})
    connection.request(method, path, body=body, headers={"Content-Type": "application/json"})
    first = connection.getresponse()
    first.read()
    assert first.status == status
    connection.request("GET", "/v1/models")
    second = connection.getresponse()
    assert second.status == 200 and json.loads(second.read())["object"] == "list"
    connection.close()
