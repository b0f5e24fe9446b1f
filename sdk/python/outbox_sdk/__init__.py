"""Write outbox-host plugins in Python: a destination handler or a publish observer.

A handler module defines ``class Handler(outbox_sdk.DestinationHandler)`` with a
``destination = "TYPE"`` attribute and a ``handle(envelope)`` method returning one of
:func:`success`, :func:`retry`, :func:`fail` or :func:`defer`. An observer module defines
``class Observer(outbox_sdk.PublishObserver)`` with ``completed(event, envelope)``. Build either
with ``sdk/python/build app.py -o app.wasm`` (see ``sdk/README.md``).

componentize-py makes a new ``Handler()`` for each call, so keep state at module level: the
instance it runs in is kept between calls, retired after a while, and never shared.

Messages and error types you return end up in the host's log and dead-letter rows: name what
failed (a status, a host), never the payload or a header value.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Union

from wit_world.imports import config as _config
from wit_world.imports import log as _log

try:
    # In the handler world wasi:http has a `types` interface too, so ours is renamed.
    from wit_world.imports import outbox_relay_types as _types
except ImportError:
    from wit_world.imports import types as _types  # type: ignore[no-redef]

__all__ = [
    "Envelope",
    "PayloadError",
    "Result",
    "Success",
    "Retry",
    "Fail",
    "Defer",
    "success",
    "retry",
    "fail",
    "defer",
    "Completed",
    "DestinationHandler",
    "PublishObserver",
    "config",
    "require_config",
    "ConfigError",
    "trace",
    "debug",
    "info",
    "warn",
    "error",
]


class PayloadError(ValueError):
    """The payload is not JSON. Publishing it again cannot help, so it fails permanently."""


@dataclass
class Envelope:
    """One outbox row, with its headers as a dict and its payload parsed on first use."""

    entry_id: int
    #: The row's carrier id (a UUIDv7): a stable idempotency key for the destination.
    carrier_id: str
    aggregate_type: Optional[str]
    aggregate_id: Optional[str]
    event_type: str
    destination_type: str
    destination: str
    #: The payload as the JSON text the application wrote.
    payload_text: str
    #: Application headers (no framework keys); the last value wins for a repeated name.
    headers: Dict[str, str]
    #: JSON text: {"context": ..., "delivery": {"outbox": {...}}}.
    metadata_text: str
    #: Unix milliseconds.
    scheduled_at: Optional[int]
    #: Attempts made before this one (0 for the first).
    attempt: int
    max_attempts: int
    #: Unix milliseconds.
    created_at: int
    _payload: Any = field(default=None, repr=False, compare=False)
    _parsed: bool = field(default=False, repr=False, compare=False)

    @classmethod
    def _of(cls, raw: _types.Envelope) -> "Envelope":
        return cls(
            entry_id=raw.entry_id,
            carrier_id=raw.carrier_id,
            aggregate_type=raw.aggregate_type,
            aggregate_id=raw.aggregate_id,
            event_type=raw.event_type,
            destination_type=raw.destination_type,
            destination=raw.destination,
            payload_text=raw.payload,
            headers=dict(raw.headers),
            metadata_text=raw.metadata,
            scheduled_at=raw.scheduled_at,
            attempt=raw.attempt,
            max_attempts=raw.max_attempts,
            created_at=raw.created_at,
        )

    @property
    def payload(self) -> Any:
        """The payload parsed from JSON; raises :class:`PayloadError` (a permanent failure when it
        escapes ``handle``) when it is not JSON."""
        if not self._parsed:
            try:
                self._payload = json.loads(self.payload_text)
            except ValueError:
                # The parser's message may quote the payload: say only what is wrong.
                raise PayloadError("the payload is not valid JSON") from None
            self._parsed = True
        return self._payload

    @property
    def metadata(self) -> Any:
        return json.loads(self.metadata_text)

    @property
    def is_last_attempt(self) -> bool:
        return self.attempt + 1 >= self.max_attempts


@dataclass(frozen=True)
class Success:
    pass


@dataclass(frozen=True)
class Retry:
    """Try again later, with backoff; dead-lettered once the attempts run out.

    ``retry_after`` (seconds) is how long the destination asked to be left alone, an HTTP
    ``Retry-After`` say: the host waits at least that long and at least its backoff, never longer
    than its backoff maximum, and the attempt is spent as for any retry."""

    message: str
    error_type: Optional[str] = None
    retry_after: Optional[float] = None


@dataclass(frozen=True)
class Fail:
    """Never retry: dead-lettered now."""

    message: str
    error_type: Optional[str] = None


@dataclass(frozen=True)
class Defer:
    """This node cannot deliver it now: deferred without spending an attempt."""

    reason: str


Result = Union[Success, Retry, Fail, Defer]


def success() -> Success:
    return Success()


def retry(
    message: str, error_type: Optional[str] = None, retry_after: Optional[float] = None
) -> Retry:
    return Retry(message, error_type, retry_after)


_MAX_U64 = 2**64 - 1


def _millis(seconds: Optional[float]) -> Optional[int]:
    """Seconds as the WIT's ``retry-after-ms``: a u64, so never negative nor past 2**64 - 1; a value
    that is not a number asks for nothing."""
    if seconds is None:
        return None
    try:
        ms = float(seconds) * 1000.0
    except (TypeError, ValueError, OverflowError):
        return None
    if ms != ms:  # NaN
        return None
    if ms <= 0:
        return 0
    if ms >= _MAX_U64:
        return _MAX_U64
    return int(ms)


def fail(message: str, error_type: Optional[str] = None) -> Fail:
    return Fail(message, error_type)


def defer(reason: str) -> Defer:
    return Defer(reason)


def _to_wit(result: Result) -> _types.PublishResult:
    if isinstance(result, Success):
        return _types.PublishResult_Success()
    if isinstance(result, Retry):
        return _types.PublishResult_Retryable(
            _types.RetryableFailure(result.message, result.error_type, _millis(result.retry_after))
        )
    if isinstance(result, Fail):
        return _types.PublishResult_Permanent(_types.Failure(result.message, result.error_type))
    if isinstance(result, Defer):
        return _types.PublishResult_Unresolvable(result.reason)
    return _types.PublishResult_Permanent(
        _types.Failure(
            f"handle() returned {type(result).__name__}, not a result of outbox_sdk",
            "plugin-bug",
        )
    )


class DestinationHandler:
    """Base of a module's ``Handler`` class: converts the host's types to and from the SDK's."""

    #: The destination type served: ``^[A-Za-z0-9_-]{1,32}$``.
    destination: str = ""
    #: Which destinations of the type to claim; ``None`` claims them all.
    destinations: Optional[Sequence[str]] = None

    def handle(self, envelope: Envelope) -> Result:
        raise NotImplementedError("a Handler defines handle(envelope)")

    # The host's interface (`outbox:relay/handler`), called by the component's glue.

    def destination_type(self) -> str:
        return self.destination

    def claim_scope(self) -> _types.Scope:
        if self.destinations is None:
            return _types.Scope_All()
        return _types.Scope_Destinations(list(self.destinations))

    def publish(self, envelope: _types.Envelope) -> _types.PublishResult:
        try:
            return _to_wit(self.handle(Envelope._of(envelope)))
        except Exception as problem:  # noqa: BLE001 - a bug must not trap the instance
            return _to_wit(_result_of(problem))


def _result_of(problem: Exception) -> Result:
    """What an exception escaping ``handle`` means for the row."""
    if isinstance(problem, PayloadError):
        return fail(str(problem), "payload")
    if isinstance(problem, ConfigError):
        return fail(str(problem), "config")
    # Only a handler that imported outbox_sdk.http can raise its errors; an observer's world has
    # no HTTP to import.
    http = sys.modules.get(f"{__name__}.http")
    if http is not None and isinstance(problem, http.HttpError):
        return problem.result()
    # The exception's text may quote the payload: name only its class.
    return retry(f"the handler raised {type(problem).__name__}", "exception")


@dataclass(frozen=True)
class Completed:
    """The facts of one publish attempt, after its state change has settled."""

    entry_id: int
    destination_type: str
    destination: str
    attempt: int
    max_attempts: int
    #: "success", "retryable-failure", "permanent-failure" or "unresolvable".
    outcome: str
    #: "published", "retry-scheduled", "dead-lettered" or "deferred".
    disposition: str
    disposition_recorded: bool
    next_attempt_at: Optional[int]
    error_type: Optional[str]
    elapsed_micros: int
    completed_at: int


def _enum_name(value: Any) -> str:
    return value.name.lower().replace("_", "-")


class PublishObserver:
    """Base of a module's ``Observer`` class."""

    def completed(self, event: Completed, envelope: Envelope) -> None:
        raise NotImplementedError("an Observer defines completed(event, envelope)")

    # The host's interface (`outbox:relay/observer`).

    def on_publish_completed(self, event: Any, envelope: _types.Envelope) -> None:
        self.completed(
            Completed(
                entry_id=event.entry_id,
                destination_type=event.destination_type,
                destination=event.destination,
                attempt=event.attempt,
                max_attempts=event.max_attempts,
                outcome=_enum_name(event.outcome),
                disposition=_enum_name(event.disposition),
                disposition_recorded=event.disposition_recorded,
                next_attempt_at=event.next_attempt_at,
                error_type=event.error_type,
                elapsed_micros=event.elapsed_micros,
                completed_at=event.completed_at,
            ),
            Envelope._of(envelope),
        )


class ConfigError(LookupError):
    """A required ``[config]`` key is missing from the plugin's manifest."""


#: The ``[config]`` values read so far. An instance never outlives its manifest (a reload makes new
#: instances), so each key is asked of the host once; at most this many are kept.
_CONFIG_KEYS_KEPT = 256
_config_kept: Dict[str, Optional[str]] = {}


def _config_value(key: str) -> Optional[str]:
    try:
        return _config_kept[key]
    except KeyError:
        value = _config.get(key)
        if len(_config_kept) < _CONFIG_KEYS_KEPT:
            _config_kept[key] = value
        return value


def config(key: str, default: Optional[str] = None) -> Optional[str]:
    """A value from the manifest's ``[config]`` table, or ``default``."""
    value = _config_value(key)
    return default if value is None else value


def require_config(key: str) -> str:
    value = _config_value(key)
    if value is None:
        raise ConfigError(f"the manifest's [config] has no `{key}`")
    return value


def trace(message: str) -> None:
    _log.log(_log.Level.TRACE, message)


def debug(message: str) -> None:
    _log.log(_log.Level.DEBUG, message)


def info(message: str) -> None:
    _log.log(_log.Level.INFO, message)


def warn(message: str) -> None:
    _log.log(_log.Level.WARN, message)


def error(message: str) -> None:
    _log.log(_log.Level.ERROR, message)
