"""HTTP client of a DSpark server in profiling mode (httpx, keep-alive)."""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

import httpx

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_SECONDS = 600.0  # SGLang's DEFAULT_TIMEOUT, for every call


class ServerUnavailableError(RuntimeError):
    """The server cannot be reached or stopped answering."""


class ServerResponseError(RuntimeError):
    """The server answered with something a DSpark server would not send."""


class DsparkClient:
    """One keep-alive connection pool to the server; the load runs on its own client."""

    def __init__(self, base_url: str, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> None:
        if not base_url:
            raise ValueError(
                "pass --base-url of an already-running DSpark server (the profiler never "
                "launches one), e.g. http://localhost:30000"
            )
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"--base-url must start with http:// or https://, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout)
        # The load gets its own keep-alive client, created once: a new client per round
        # costs tens of ms, during which the GPU idles and its clocks may drop.
        self._load_http = httpx.Client(base_url=self.base_url, timeout=timeout)

    def close(self) -> None:
        self._http.close()
        self._load_http.close()

    def __enter__(self) -> DsparkClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise ServerUnavailableError(
                f"{self.base_url}{path}: {type(exc).__name__}: {exc or 'no response'}"
            ) from exc

    def _json(self, response: httpx.Response, what: str) -> Any:
        try:
            return response.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            snippet = response.text[:120].replace("\n", " ")
            raise ServerResponseError(
                f"{what} returned HTTP {response.status_code} with a body that is not JSON: "
                f"{snippet!r}"
            ) from exc

    def health(self) -> bool:
        try:
            return self._request("GET", "/health", timeout=5.0).status_code == 200
        except ServerUnavailableError:
            return False

    def wait_until_healthy(self, seconds: float, poll: float = 1.0) -> None:
        """Poll /health until 200 (the Job's profiler starts beside a server still loading)."""
        deadline = time.monotonic() + seconds
        while True:
            if self.health():
                return
            if time.monotonic() >= deadline:
                raise ServerUnavailableError(
                    f"{self.base_url}/health did not answer 200 within {seconds:.0f} s; is the "
                    "server up (model loading, CUDA graph capture) and the URL right?"
                )
            time.sleep(poll)

    def server_info(self) -> Any:
        response = self._request("GET", "/server_info")
        if response.status_code != 200:
            raise ServerResponseError(
                f"GET /server_info returned HTTP {response.status_code}: {response.text[:200]!r}"
            )
        return self._json(response, "GET /server_info")

    def set_internal_state(self, server_args: dict[str, Any]) -> tuple[bool, Any]:
        """(accepted on every rank, raw body). Accepts `[bool]` and `{"updated": bool}` forms."""
        response = self._request("POST", "/set_internal_state", json={"server_args": server_args})
        try:
            body = response.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return False, response.text[:200]
        if response.status_code != 200:
            return False, body
        outs = body if isinstance(body, list) else [body]

        def ok(out: Any) -> bool:
            return bool(out.get("updated")) if isinstance(out, dict) else bool(out)

        return bool(outs) and all(ok(o) for o in outs), body

    def flush_cache(self) -> None:
        try:
            self._request("POST", "/flush_cache")
        except ServerUnavailableError:
            raise
        except Exception as exc:  # the result is advisory, as in the reference
            logger.debug("flush_cache: %s", exc)

    def abort_all(self) -> None:
        response = self._request("POST", "/abort_request", json={"abort_all": True})
        if response.status_code >= 400:
            raise ServerResponseError(
                f"POST /abort_request returned HTTP {response.status_code}: {response.text[:200]!r}"
            )

    def start_load(self, payload: dict[str, Any]) -> LoadThread:
        """POST /generate in a thread (one load at a time shares the load client)."""
        thread = LoadThread(self._load_http, payload)
        thread.start()
        return thread


class LoadThread(threading.Thread):
    """One POST /generate carrying the whole batch; the answer is ignored, errors kept."""

    def __init__(self, http: httpx.Client, payload: dict[str, Any]) -> None:
        super().__init__(daemon=True, name="sps-load")
        self._http = http
        self._payload = payload
        self.error: str | None = None
        self.status_code: int | None = None

    def run(self) -> None:
        try:
            response = self._http.post("/generate", json=self._payload)
            self.status_code = response.status_code
        except Exception as exc:  # aborted batches may end with an error; only record it
            self.error = f"{type(exc).__name__}: {exc}"
