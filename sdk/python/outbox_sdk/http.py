"""HTTP requests to the hosts the manifest grants (``[http] allowed_hosts``), one host call each
(``outbox:relay/http``: the host's ``wasi:http`` transport, checks and limits).

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
from wit_world.imports import http as relay_http

from . import Result, fail, retry

__all__ = ["Response", "HttpError", "request", "get", "post", "authority", "DEFAULT_TIMEOUT"]

#: Seconds, applied to connecting, to the first response byte and between response bytes.
DEFAULT_TIMEOUT = 10.0

_METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH")


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


def _of_send_error(error: object) -> HttpError:
    """The host's reasons are fixed names (``connection-refused``, ``HTTP-response-body-size``),
    never a value of the request or the response, so they may be quoted."""
    if isinstance(error, relay_http.SendError_Denied):
        return HttpError(
            "denied", "HTTP request denied: the host is not in the plugin's allowed hosts"
        )
    if isinstance(error, relay_http.SendError_Timeout):
        return HttpError("timeout", "HTTP request timed out")
    if isinstance(error, relay_http.SendError_Connection):
        return HttpError("connection", f"HTTP connection failed: {error.value}")
    if isinstance(error, relay_http.SendError_InvalidRequest):
        return _invalid(error.value)
    reason = getattr(error, "value", "unknown")
    return HttpError("protocol", f"HTTP exchange failed: {reason}")


_AUTHORITY_END = re.compile(r"[/?#]")


def _split(url: str) -> str:
    """The URL's ``host[:port]``; what the host would refuse anyway is refused here with a clearer
    reason."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise _invalid("the URL has no scheme")
    if scheme.lower() not in ("http", "https"):
        raise _invalid("the URL scheme is not http or https")
    host = _AUTHORITY_END.split(rest, 1)[0]
    if not host:
        raise _invalid("the URL has no host")
    # Credentials in a URL would end up in error messages and logs; use a header instead.
    if "@" in host:
        raise _invalid("the URL carries user info; send credentials in a header")
    return host


def authority(url: str) -> Optional[str]:
    """The ``host[:port]`` of an http(s) URL: what an error message may name."""
    try:
        return _split(url)
    except HttpError:
        return None


def request(
    method: str,
    url: str,
    headers: Optional[Mapping[str, str]] = None,
    body: Union[bytes, str, None] = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> Response:
    """Sends a request and reads the whole response, in one call to the host
    (``outbox:relay/http``). ``timeout`` is in seconds."""
    _split(url)
    upper = method.upper()
    data = body.encode("utf-8") if isinstance(body, str) else body
    entries: List[Tuple[str, bytes]] = [
        (name, value.encode("utf-8")) for name, value in (headers or {}).items()
    ]
    try:
        answer = relay_http.send(
            relay_http.Request(
                upper if upper in _METHODS else method,
                url.split("#", 1)[0],
                entries,
                data,
                max(0, int(timeout * 1000)),
            )
        )
    except Err as problem:
        raise _of_send_error(problem.value) from None
    return Response(
        answer.status,
        {name.lower(): value.decode("latin-1") for name, value in answer.headers},
        bytes(answer.body),
    )


def get(url: str, headers: Optional[Mapping[str, str]] = None, timeout: float = DEFAULT_TIMEOUT) -> Response:
    return request("GET", url, headers, None, timeout)


def post(
    url: str,
    body: Union[bytes, str],
    headers: Optional[Mapping[str, str]] = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> Response:
    return request("POST", url, headers, body, timeout)
