"""The request limits of ``pipi serve``: an ASGI middleware around MLflow's scoring app.

MLflow 3's scoring server (``mlflow.pyfunc.scoring_server``, a FastAPI app) reads an
``/invocations`` body whole (``await request.body()``) before anything can refuse it (a 264 MB
request used 5-7 GB and answered 504 after 60 s), puts the request itself into an error message
(``Failed to predict data '<the whole input>'``; a body that is not JSON is echoed back whole),
adds a stack trace to some answers, and turns an exception other than ``MlflowException`` in its
own parsing into a bare 500.

:class:`RequestGuard` wraps that app from outside (``pipi serve`` builds the app with it,
``pipi/tracking/scoring.py``); nothing of MLflow is patched, and the model knows nothing of it.
For a ``POST /invocations``:

* a body over ``max_bytes`` (``pipi serve --max-request-mb``, default 64 MiB) -> 413 before it is
  parsed and before it is read whole: a ``Content-Length`` over the limit is refused before one
  byte of the body is read, and a chunked body is read only up to the limit
  (:func:`read_limited`), so a worker never holds more than the limit;
* a JSON content type whose body is not JSON -> 400 "request body is not JSON (...)";
* JSON nested too deeply for Python's parser (a ``RecursionError``) -> 400 in one line;
* an error answer of the app -> the same status with a one-line message without the request
  data and without a stack trace; an exception in the server's own parsing (``ValueError``,
  ``TypeError``, ``KeyError``, ``RecursionError``) -> 400 in one line instead of a bare 500.

Every refusal is ``{"error_code": ..., "message": ...}``, the shape MLflow uses itself. Other
paths (``/ping``, ``/version``, ...) pass through untouched. Pure ASGI (no Starlette, no MLflow).
"""

from __future__ import annotations

import asyncio
import json
import logging

__all__ = ["DEFAULT_MAX_BYTES", "RequestGuard", "read_limited"]

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
_PREFIX = "Failed to predict data '"
_EXAMPLE = '{"dataframe_records": [{"image": "<base64 JPEG>"}]}'
_log = logging.getLogger(__name__)


class _Refused(bytes):
    """An empty body standing for one refused while it was read (``size``: bytes declared
    in Content-Length, or read before the limit was passed)."""

    size: int
    declared: bool


def _refused(size: int, *, declared: bool) -> _Refused:
    body = _Refused()
    body.size, body.declared = size, declared
    return body


async def read_limited(chunks, limit: int, *, content_length: str | None = None) -> bytes:
    """The body from the async iterator ``chunks``, or a refusal once it passes ``limit``.

    A declared ``content_length`` over the limit is refused before a chunk is read; otherwise
    the chunks are counted as they come and reading stops at the first one past the limit.
    """
    if content_length and content_length.strip().isdigit() and int(content_length) > limit:
        return _refused(int(content_length), declared=True)
    parts, size = [], 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            return _refused(size, declared=False)
        parts.append(chunk)
    return b"".join(parts)


def one_line(message: str) -> str:
    """The reason without the echoed request: MLflow prefixes predict errors with the data."""
    if message.startswith(_PREFIX) and "\nError: " in message:
        message = message.rsplit("\nError: ", 1)[1]
    if "\nInput: " in message:
        message = message.split("\nInput: ", 1)[0]
    line = " ".join(message.split())
    return line if len(line) <= 500 else line[:497] + "..."


def _json_problem(body: bytes) -> str | None:
    """Why ``body`` is not JSON that can be read (one line), or None."""
    try:
        json.loads(body)
    except RecursionError:
        return f"request body is JSON nested too deeply to read; send e.g. {_EXAMPLE}"
    except (ValueError, UnicodeDecodeError) as exc:
        where = f" at line {exc.lineno} column {exc.colno}" if hasattr(exc, "lineno") else ""
        return f"request body is not JSON{where}; send e.g. {_EXAMPLE}"
    return None


async def _answer(send, status: int, code: str, message: str, *, close: bool = False) -> None:
    """An error answer; ``close``: the connection ends with it (a body left unread cannot be
    followed by another request on it: uvicorn's h11 parser then logged a 25-line traceback
    for the rest of a refused chunked body)."""
    body = json.dumps({"error_code": code, "message": message}).encode()
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(body)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _cleaned(status: int, body: bytes) -> tuple[str, str]:
    """(error code, one-line message) of an error answer of the app."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("message"), str):
        code = str(doc.get("error_code") or "")
        message = doc["message"]
    else:
        code, message = "", body.decode("utf-8", "replace")
    default = "BAD_REQUEST" if status < 500 else "INTERNAL_ERROR"
    return code or default, one_line(message) or f"HTTP {status}"


class RequestGuard:
    """ASGI middleware: the checks of the module docstring around ``app``'s ``path``."""

    def __init__(self, app, *, max_bytes: int = DEFAULT_MAX_BYTES, path: str = "/invocations"):
        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be positive, not {max_bytes}")
        self.app, self.max_bytes, self.path = app, int(max_bytes), path

    async def __call__(self, scope, receive, send):
        if (scope["type"] != "http" or scope.get("path") != self.path
                or scope.get("method") != "POST"):
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", [])}
        disconnected = []

        async def chunks():
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    disconnected.append(message)
                    return
                yield message.get("body", b"")
                if not message.get("more_body", False):
                    return

        body = await read_limited(chunks(), self.max_bytes,
                                  content_length=headers.get("content-length"))
        if disconnected:  # the client is gone: nobody to answer
            return
        if isinstance(body, _Refused):
            what = "Content-Length" if body.declared else "refused after reading"
            return await _answer(send, 413, "BAD_REQUEST",
                                 f"request body is over the limit of {self.max_bytes} bytes "
                                 f"(pipi serve --max-request-mb; {what} {body.size} bytes); "
                                 "send fewer or smaller images", close=True)
        ctype = headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype == "application/json":
            problem = await asyncio.to_thread(_json_problem, body)  # a big body: off the loop
            if problem:
                return await _answer(send, 400, "BAD_REQUEST", problem)
        await self._forward(scope, body, receive, send)

    async def _forward(self, scope, body: bytes, receive, send) -> None:
        """Run the app on the body already read; hold an error answer back and clean it."""
        given = False

        async def replay():
            nonlocal given
            if not given:
                given = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: the client's disconnect

        held: dict = {}

        async def capture(message):
            if message["type"] == "http.response.start" and message["status"] >= 400:
                held.update(status=message["status"], parts=[], done=False)
            elif message["type"] == "http.response.body" and held:
                held["parts"].append(message.get("body", b""))
                held["done"] = not message.get("more_body", False)
            else:
                await send(message)

        try:
            await self.app(scope, replay, capture)
        except (ValueError, TypeError, KeyError, RecursionError) as exc:
            if not held:  # an answer is already on its way: nothing to replace
                raise
            _log.warning("refused a request the scoring server could not read: %s: %s",
                         type(exc).__name__, one_line(str(exc)))
            message = ("request is nested too deeply to read; send one level of images"
                       if isinstance(exc, RecursionError) else
                       one_line(f"cannot read the request ({type(exc).__name__}: {exc})"))
            return await _answer(send, 400, "BAD_REQUEST", message)
        if held:
            code, message = _cleaned(held["status"], b"".join(held["parts"]))
            await _answer(send, held["status"], code, message)
