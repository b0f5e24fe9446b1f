import json

import outbox_sdk as sdk
from outbox_sdk import http


class Handler(sdk.DestinationHandler):
    destination = "ALERTS"

    def handle(self, envelope: sdk.Envelope) -> sdk.Result:
        order = envelope.payload.get("order_id", "?")
        url = sdk.require_config("url")
        sdk.info(f"alerting for entry {envelope.entry_id}")
        response = http.post(
            url,
            json.dumps({"title": f"{envelope.event_type}: {order}"}),
            headers={"content-type": "application/json", "idempotency-key": envelope.carrier_id},
            timeout=5.0,
        )
        if response.ok:
            return sdk.success()
        if response.status in (408, 429) or response.status >= 500:
            return sdk.retry(f"HTTP {response.status}", "http-status")
        return sdk.fail(f"HTTP {response.status}", "http-status")
