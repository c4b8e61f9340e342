"""Replay recorded BigQuery v2 REST exchanges through a real ``bigquery.Client``.

The client is built with ``AnonymousCredentials`` and a ``requests.Session`` whose transport is
``ReplayAdapter``: every HTTP request the library makes is checked against the next recorded
exchange (method and path) and answered with its recorded status and JSON body, so the
google-cloud-bigquery code paths (job resources, 409/404/5xx mapping) run for real.
"""

from __future__ import annotations

import json
from collections import deque
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import requests
from requests.adapters import BaseAdapter
from requests.structures import CaseInsensitiveDict

FIXTURES = Path(__file__).parent / "fixtures"
PROJECT = "twice-demo"


class ReplayAdapter(BaseAdapter):
    """Answers requests from a list of recorded exchanges, in order; records what was sent."""

    def __init__(self, exchanges: list[dict[str, Any]]) -> None:
        super().__init__()
        self.pending = deque(exchanges)
        self.sent: list[dict[str, Any]] = []

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        url = urlsplit(request.url or "")
        body = request.body
        if isinstance(body, bytes):
            body = body.decode()
        sent = {
            "method": request.method,
            "path": url.path,
            "query": {k: v[0] for k, v in parse_qs(url.query).items()},
            "json": json.loads(body) if body else None,
        }
        self.sent.append(sent)
        if not self.pending:
            raise AssertionError(f"unexpected request {request.method} {url.path}")
        exchange = self.pending.popleft()
        expected = exchange["request"]
        assert (request.method, url.path) == (expected["method"], expected["path"]), (
            f"expected {expected['method']} {expected['path']}, got {request.method} {url.path}"
        )
        fault = exchange.get("raise")
        if fault == "connection":
            raise requests.exceptions.ConnectionError("Connection reset by peer")
        if fault == "timeout":
            raise requests.exceptions.ReadTimeout("Read timed out")
        answer = exchange["response"]
        response = requests.Response()
        response.status_code = answer["status"]
        response._content = json.dumps(answer["body"]).encode()
        response.headers = CaseInsensitiveDict({"Content-Type": "application/json; charset=UTF-8"})
        response.encoding = "utf-8"
        response.url = request.url or ""
        response.request = request
        response.reason = answer.get("reason", "")
        return response

    def close(self) -> None:
        pass


def load(name: str) -> list[dict[str, Any]]:
    """The exchanges of fixture ``name`` (a JSON file in ``fixtures/``)."""
    return json.loads((FIXTURES / f"{name}.json").read_text())["exchanges"]


def replay_client(name: str, *, location: str | None = "EU") -> tuple[Any, ReplayAdapter]:
    """A real ``bigquery.Client`` answered by fixture ``name``, and its adapter."""
    return client_for(load(name), location=location)


def client_for(exchanges: list[dict[str, Any]], *,
               location: str | None = "EU") -> tuple[Any, ReplayAdapter]:
    """A real ``bigquery.Client`` answered by ``exchanges``, and its adapter."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import bigquery

    adapter = ReplayAdapter(exchanges)
    session = requests.Session()
    session.mount("https://", adapter)
    session.is_mtls = False  # type: ignore[attr-defined]  # google-cloud-core asks the session
    client = bigquery.Client(
        project=PROJECT, credentials=AnonymousCredentials(), _http=session, location=location
    )
    return client, adapter
