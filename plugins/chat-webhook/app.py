"""Destination type `CHAT`: posts each row to a Slack-style chat webhook (the row's `destination`
is the webhook URL), as a message shaped by the event type.

408, 429 and 5xx answers are retried (a 429 or 503 after the delay its `Retry-After` asks for); any
other 4xx fails permanently (the message would be refused again). Failure messages name the status and the host, never the payload.
"""

import json
from typing import Any, Dict, List, Optional

import outbox_sdk as sdk
from outbox_sdk import http


def _field(payload: Any, key: str, default: str = "?") -> str:
    if isinstance(payload, dict) and key in payload:
        return str(payload[key])
    return default


def _summary(envelope: sdk.Envelope) -> str:
    payload = envelope.payload
    kind = envelope.event_type
    if kind == "order.created":
        return f":package: New order *{_field(payload, 'order_id')}* for {_field(payload, 'total', 'an unknown total')}"
    if kind == "order.cancelled":
        return f":x: Order *{_field(payload, 'order_id')}* was cancelled"
    if kind.endswith(".failed"):
        return f":rotating_light: {kind} on {envelope.aggregate_type or 'an aggregate'} {envelope.aggregate_id or ''}".rstrip()
    return f"{kind} on {envelope.aggregate_type or 'an aggregate'} {envelope.aggregate_id or ''}".rstrip()


def message(envelope: sdk.Envelope) -> Dict[str, Any]:
    """The Slack-style body: a plain `text` for notifications and one section block."""
    text = _summary(envelope)
    blocks: List[Dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": text}},
        {
            "type": "context",
            "elements": [{"type": "mrkdwn", "text": f"event `{envelope.event_type}` · entry {envelope.entry_id}"}],
        },
    ]
    body: Dict[str, Any] = {"text": text, "blocks": blocks}
    channel = sdk.config("channel")
    if channel:
        body["channel"] = channel
    username = sdk.config("username")
    if username:
        body["username"] = username
    return body


def result_of_status(status: int, url: str, retry_after: Optional[float] = None) -> sdk.Result:
    """408 and 429 ask the client to come back later and a 5xx may pass on another try; any other
    status fails the same way every time (a 3xx too, since redirects are not followed). A 429 or
    503 may say when to come back (`Retry-After`)."""
    if 200 <= status < 300:
        return sdk.success()
    text = f"{http.authority(url) or 'the chat webhook'} answered HTTP {status}"
    if status in (429, 503) and retry_after is not None:
        return sdk.retry(text, "http-status", retry_after=retry_after)
    if status in (408, 429) or 500 <= status <= 599:
        return sdk.retry(text, "http-status")
    return sdk.fail(text, "http-status")


class Handler(sdk.DestinationHandler):
    destination = "CHAT"

    def handle(self, envelope: sdk.Envelope) -> sdk.Result:
        response = http.post(
            envelope.destination,
            json.dumps(message(envelope)),
            headers={
                "content-type": "application/json",
                "idempotency-key": envelope.carrier_id,
            },
            timeout=float(sdk.config("timeout_seconds", "10")),
        )
        return result_of_status(response.status, envelope.destination, response.retry_after)
