"""What ``mlflow models serve`` answers for a pipi model when a request is refused.

MLflow 3's scoring server (``mlflow.pyfunc.scoring_server``) maps an ``MlflowException``
raised while parsing or predicting to its error code's HTTP status (``BAD_REQUEST`` /
``INVALID_PARAMETER_VALUE`` -> 400), but it puts the request itself into the message
(``Failed to predict data '<the whole input>'``; a body that is not JSON is echoed back
whole), a non-MlflowException becomes a 400 carrying a stack trace, and a huge body is parsed
before anything can refuse it (a 264 MB request used 5-7 GB and answered 504 after 60 s).

:func:`guarded` wraps the server's ``invocations`` function (the one the FastAPI route calls
for every request); the registered model's ``install_guard`` (``pipi/tracking/pyfunc.py``)
installs it once per process, when a pipi model is loaded:

* a body over ``PIPI_SERVE_MAX_BYTES`` (default 64 MiB) -> 413 before it is parsed, and in
  the server process before it is read whole (:func:`install_body_limit`): a
  ``Content-Length`` over the limit is refused before one byte of the body is read, and a
  chunked body is read only up to the limit, so a worker never holds more than the limit;
* a JSON content type whose body is not JSON -> 400 "request body is not JSON (...)";
* JSON nested too deeply for Python's parser (a ``RecursionError``) -> 400 in one line;
* any ``error_type`` (MLflow's ``MlflowException``) -> the same status with a one-line message without the request
  data and without a stack trace.

Every answer is ``{"error_code": ..., "message": ...}``, the shape MLflow uses itself. No MLflow
import here (the exception type is passed in): the registered model ships this module.
"""

from __future__ import annotations

import json
import os

__all__ = ["DEFAULT_MAX_BYTES", "guarded", "install_body_limit", "max_request_bytes",
           "read_limited"]

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
_PREFIX = "Failed to predict data '"


def max_request_bytes() -> int:
    return int(os.environ.get("PIPI_SERVE_MAX_BYTES", DEFAULT_MAX_BYTES))


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


def install_body_limit() -> None:
    """Make the server read an ``/invocations`` body through :func:`read_limited`.

    MLflow's route reads ``await request.body()`` whole before anything of ours runs, and its
    app is built after the model is loaded, so the limit goes into Starlette's ``Request.body``
    for that one path of the scoring server's process (idempotent).
    """
    from contextlib import aclosing

    from starlette.requests import Request

    original = Request.body
    if getattr(original, "__pipi_limit__", False):
        return

    async def body(self) -> bytes:
        if hasattr(self, "_body") or self.scope.get("path") != "/invocations":
            return await original(self)
        async with aclosing(self.stream()) as stream:
            self._body = await read_limited(stream, max_request_bytes(),
                                            content_length=self.headers.get("content-length"))
        return self._body

    body.__pipi_limit__ = True
    Request.body = body


def _one_line(message: str) -> str:
    """The reason without the echoed request: MLflow prefixes predict errors with the data."""
    if message.startswith(_PREFIX) and "\nError: " in message:
        message = message.rsplit("\nError: ", 1)[1]
    if "\nInput: " in message:
        message = message.split("\nInput: ", 1)[0]
    line = " ".join(message.split())
    return line if len(line) <= 500 else line[:497] + "..."


def _answer(response_cls, status: int, code: str, message: str):
    body = json.dumps({"error_code": code, "message": message})
    return response_cls(response=body, status=status, mimetype="application/json")


def guarded(invocations, response_cls, *, error_type: type[Exception]):
    """``invocations`` with the checks of the module docstring around it; ``error_type``:
    the exception whose status, code and message become the answer (MLflow's
    ``MlflowException``: ``get_http_status_code()``, ``error_code``, ``message``)."""

    def pipi_invocations(data, content_type, model, input_schema):
        limit = max_request_bytes()
        if isinstance(data, _Refused):
            what = ("Content-Length" if data.declared else
                    "refused after reading")
            return _answer(response_cls, 413, "BAD_REQUEST",
                           f"request body is over the limit of {limit} bytes "
                           f"(PIPI_SERVE_MAX_BYTES; {what} {data.size} bytes); send fewer or "
                           "smaller images")
        if len(data) > limit:
            return _answer(response_cls, 413, "BAD_REQUEST",
                           f"request body of {len(data)} bytes is over the limit of {limit} "
                           "bytes (PIPI_SERVE_MAX_BYTES); send fewer or smaller images")
        if (content_type or "").split(";")[0].strip() == "application/json":
            try:
                json.loads(data)
            except RecursionError:
                return _answer(response_cls, 400, "BAD_REQUEST",
                               "request body is JSON nested too deeply to read; send e.g. "
                               '{"dataframe_records": [{"image": "<base64 JPEG>"}]}')
            except (ValueError, UnicodeDecodeError) as exc:
                where = f" at line {exc.lineno} column {exc.colno}" if hasattr(exc, "lineno") \
                    else ""
                return _answer(response_cls, 400, "BAD_REQUEST",
                               f"request body is not JSON{where}; send e.g. "
                               '{"dataframe_records": [{"image": "<base64 JPEG>"}]}')
        try:
            return invocations(data, content_type, model, input_schema)
        except error_type as exc:
            return _answer(response_cls, exc.get_http_status_code(), exc.error_code,
                           _one_line(exc.message))
        except RecursionError:  # nested too deeply for the server's own parsing
            return _answer(response_cls, 400, "BAD_REQUEST",
                           "request is nested too deeply to read; send one level of images")
        except (ValueError, TypeError, KeyError) as exc:  # the server's own parsing
            return _answer(response_cls, 400, "BAD_REQUEST",
                           _one_line(f"cannot read the request ({type(exc).__name__}: {exc})"))

    pipi_invocations.__pipi_guard__ = True
    return pipi_invocations
