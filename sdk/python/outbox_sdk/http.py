"""HTTP requests over ``wasi:http``, to the hosts the manifest grants (``[http] allowed_hosts``).

Redirects are never followed: a 3xx comes back as it is, so a granted host cannot bounce a request
to one that is not granted. A request that gets no response raises :class:`HttpError`; escaping
``handle`` it becomes the matching result (see :meth:`HttpError.result`).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Dict, List, Mapping, Optional, Tuple, Union

from componentize_py_types import Err
from wit_world.imports import outgoing_handler
from wit_world.imports import streams
from wit_world.imports import wasi_http_types as wt

from . import Result, fail, retry

__all__ = ["Response", "HttpError", "request", "get", "post", "authority", "DEFAULT_TIMEOUT"]

#: Seconds, applied to connecting, to the first response byte and between response bytes.
DEFAULT_TIMEOUT = 10.0

# `blocking-write-and-flush` takes at most 4096 bytes at a time.
_WRITE_CHUNK = 4096
_READ_CHUNK = 64 * 1024

_METHODS = {
    "GET": wt.Method_Get(),
    "HEAD": wt.Method_Head(),
    "POST": wt.Method_Post(),
    "PUT": wt.Method_Put(),
    "DELETE": wt.Method_Delete(),
    "OPTIONS": wt.Method_Options(),
    "PATCH": wt.Method_Patch(),
}


@dataclass
class Response:
    """Any status, 3xx and errors included, is a response. No repr of the body: a destination may
    echo what it was sent."""

    status: int
    #: Header names in lower case; the last value wins for a repeated name.
    headers: Dict[str, str]
    body: bytes

    def __repr__(self) -> str:
        return f"Response(status={self.status})"

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    @property
    def retry_after(self) -> Optional[float]:
        """Seconds the ``Retry-After`` header asks to wait (delta-seconds, or an HTTP-date reckoned
        from now), or ``None`` without a readable one; pass it on with ``retry(..., retry_after=)``."""
        return _retry_after(self.headers.get("retry-after"), time.time())


_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_HTTP_DATE = re.compile(
    r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), ([0-9]{2}) (" + "|".join(_MONTHS) + r") ([0-9]{4}) "
    r"([0-9]{2}):([0-9]{2}):([0-9]{2}) GMT"
)


def _retry_after(value: Optional[str], now: float) -> Optional[float]:
    """A ``Retry-After`` value is the destination's: anything but delta-seconds or an IMF-fixdate
    HTTP-date is ``None``, and a date in the past asks for no wait."""
    if value is None or len(value) > 64:
        return None
    text = value.strip(" \t")
    if text.isascii() and text.isdigit():
        return float(int(text))
    match = _HTTP_DATE.fullmatch(text)
    if match is None:
        return None
    day, month, year, hour, minute, second = match.groups()
    try:
        at = datetime(
            int(year), _MONTHS.index(month) + 1, int(day), int(hour), int(minute), int(second),
            tzinfo=timezone.utc,
        ).timestamp()
    except ValueError:
        return None
    return max(0.0, at - now)


class HttpError(Exception):
    """Why a request got no response. ``kind`` is one of "denied", "timeout", "connection",
    "invalid-request" and "protocol"."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind

    def result(self) -> Result:
        """Denied and invalid requests need a person to act, so they are permanent; anything that
        may pass on another try is retryable."""
        if self.kind in ("denied", "invalid-request"):
            return fail(str(self), self.kind)
        error_type = "http-timeout" if self.kind == "timeout" else self.kind
        if self.kind == "protocol":
            error_type = "http-protocol"
        return retry(str(self), error_type)


def _invalid(reason: str) -> HttpError:
    return HttpError("invalid-request", f"invalid HTTP request: {reason}")


_TIMEOUTS = (
    wt.ErrorCode_DnsTimeout,
    wt.ErrorCode_ConnectionTimeout,
    wt.ErrorCode_ConnectionReadTimeout,
    wt.ErrorCode_ConnectionWriteTimeout,
    wt.ErrorCode_HttpResponseTimeout,
)
_CONNECTION = (
    wt.ErrorCode_DnsError,
    wt.ErrorCode_DestinationNotFound,
    wt.ErrorCode_DestinationUnavailable,
    wt.ErrorCode_DestinationIpProhibited,
    wt.ErrorCode_DestinationIpUnroutable,
    wt.ErrorCode_ConnectionRefused,
    wt.ErrorCode_ConnectionTerminated,
    wt.ErrorCode_ConnectionLimitReached,
    wt.ErrorCode_TlsProtocolError,
    wt.ErrorCode_TlsCertificateError,
    wt.ErrorCode_TlsAlertReceived,
)
_INVALID = (
    wt.ErrorCode_HttpRequestLengthRequired,
    wt.ErrorCode_HttpRequestBodySize,
    wt.ErrorCode_HttpRequestMethodInvalid,
    wt.ErrorCode_HttpRequestUriInvalid,
    wt.ErrorCode_HttpRequestUriTooLong,
    wt.ErrorCode_HttpRequestHeaderSectionSize,
    wt.ErrorCode_HttpRequestHeaderSize,
    wt.ErrorCode_HttpRequestTrailerSectionSize,
    wt.ErrorCode_HttpRequestTrailerSize,
)


def _code_name(code: object) -> str:
    return type(code).__name__.removeprefix("ErrorCode_")


def _of_code(code: object) -> HttpError:
    if isinstance(code, wt.ErrorCode_HttpRequestDenied):
        return HttpError(
            "denied", "HTTP request denied: the host is not in the plugin's allowed hosts"
        )
    if isinstance(code, _TIMEOUTS):
        return HttpError("timeout", "HTTP request timed out")
    if isinstance(code, _CONNECTION):
        return HttpError("connection", f"HTTP connection failed: {_code_name(code)}")
    if isinstance(code, _INVALID):
        return _invalid(_code_name(code))
    return HttpError("protocol", f"HTTP exchange failed: {_code_name(code)}")


def _of_stream_error(problem: object) -> HttpError:
    if isinstance(problem, streams.StreamError_LastOperationFailed):
        code = wt.http_error_code(problem.value)
        if code is not None:
            return _of_code(code)
        return HttpError("protocol", "HTTP exchange failed: stream error")
    return HttpError("protocol", "HTTP exchange failed: ConnectionTerminated")


def _split(url: str) -> Tuple[object, str, str]:
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise _invalid("the URL has no scheme")
    if scheme.lower() == "https":
        wit_scheme: object = wt.Scheme_Https()
    elif scheme.lower() == "http":
        wit_scheme = wt.Scheme_Http()
    else:
        raise _invalid("the URL scheme is not http or https")
    end = len(rest)
    for mark in "/?#":
        index = rest.find(mark)
        if index != -1:
            end = min(end, index)
    host, path = rest[:end], rest[end:]
    if not host:
        raise _invalid("the URL has no host")
    # Credentials in a URL would end up in error messages and logs; use a header instead.
    if "@" in host:
        raise _invalid("the URL carries user info; send credentials in a header")
    path = path.split("#", 1)[0]
    if not path.startswith("/"):
        path = "/" + path
    return wit_scheme, host, path


def authority(url: str) -> Optional[str]:
    """The ``host[:port]`` of an http(s) URL: what an error message may name."""
    try:
        return _split(url)[1]
    except HttpError:
        return None


def request(
    method: str,
    url: str,
    headers: Optional[Mapping[str, str]] = None,
    body: Union[bytes, str, None] = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> Response:
    """Sends a request and reads the whole response. ``timeout`` is in seconds."""
    scheme, host, path = _split(url)
    wit_method = _METHODS.get(method.upper()) or wt.Method_Other(method)
    data = body.encode("utf-8") if isinstance(body, str) else (body or b"")
    entries: List[Tuple[str, bytes]] = [
        (name, value.encode("utf-8")) for name, value in (headers or {}).items()
    ]
    if body is not None:
        entries = [(n, v) for n, v in entries if n.lower() != "content-length"]
        entries.append(("content-length", str(len(data)).encode()))
    try:
        fields = wt.Fields.from_list(entries)
    except Err:
        raise _invalid("a header is forbidden or malformed") from None
    outgoing = wt.OutgoingRequest(fields)
    try:
        outgoing.set_method(wit_method)
        outgoing.set_scheme(scheme)
        outgoing.set_authority(host)
        outgoing.set_path_with_query(path)
    except Err:
        raise _invalid("the method or URL is not valid") from None
    nanos = int(timeout * 1_000_000_000)
    options = wt.RequestOptions()
    try:
        options.set_connect_timeout(nanos)
        options.set_first_byte_timeout(nanos)
        options.set_between_bytes_timeout(nanos)
    except Err:
        raise _invalid("the host does not support request timeouts") from None
    outgoing_body = outgoing.body()
    try:
        future = outgoing_handler.handle(outgoing, options)
    except Err as problem:
        raise _of_code(problem.value) from None
    written = _write_body(outgoing_body, data)
    # When the exchange itself failed, the response says why better than the body write.
    incoming = _wait(future)
    if written is not None:
        raise written
    return _read(incoming)


def get(url: str, headers: Optional[Mapping[str, str]] = None, timeout: float = DEFAULT_TIMEOUT) -> Response:
    return request("GET", url, headers, None, timeout)


def post(
    url: str,
    body: Union[bytes, str],
    headers: Optional[Mapping[str, str]] = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> Response:
    return request("POST", url, headers, body, timeout)


def _write_body(body: wt.OutgoingBody, data: bytes) -> Optional[HttpError]:
    """Writes the whole body and finishes it (an empty one too, or the request counts as aborted)."""
    stream = body.write()
    try:
        for start in range(0, len(data), _WRITE_CHUNK):
            stream.blocking_write_and_flush(data[start : start + _WRITE_CHUNK])
    except Err as problem:
        return _of_stream_error(problem.value)
    finally:
        # The stream is a child of the body: it must be gone before the body is finished.
        stream.__exit__(None, None, None)
    try:
        wt.OutgoingBody.finish(body, None)
    except Err as problem:
        return _of_code(problem.value)
    return None


def _wait(future: wt.FutureIncomingResponse) -> wt.IncomingResponse:
    while True:
        answer = future.get()
        if answer is not None:
            break
        pollable = future.subscribe()
        pollable.block()
        pollable.__exit__(None, None, None)
    future.__exit__(None, None, None)
    outer = answer.value if hasattr(answer, "value") else answer
    if isinstance(answer, Err):
        raise HttpError("protocol", "HTTP exchange failed: the response was already taken")
    if isinstance(outer, Err):
        raise _of_code(outer.value)
    return outer.value


def _read(incoming: wt.IncomingResponse) -> Response:
    status = incoming.status()
    header_fields = incoming.headers()
    headers = {name.lower(): value.decode("latin-1") for name, value in header_fields.entries()}
    header_fields.__exit__(None, None, None)
    body = incoming.consume()
    stream = body.stream()
    chunks: List[bytes] = []
    try:
        while True:
            try:
                chunks.append(stream.blocking_read(_READ_CHUNK))
            except Err as problem:
                if isinstance(problem.value, streams.StreamError_Closed):
                    break
                raise _of_stream_error(problem.value) from None
    finally:
        # The stream is a child of the body, and the body of the response.
        stream.__exit__(None, None, None)
        body.__exit__(None, None, None)
        incoming.__exit__(None, None, None)
    return Response(status, headers, b"".join(chunks))
