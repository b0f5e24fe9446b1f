// Destination type `ROUTER`: forwards each row's payload to the URL that the manifest's [config]
// names for its event type (`route.<event type>`, else `route.default`), with the row's carrier
// id as the `Idempotency-Key` header so the receiver can drop repeats.
//
// A row whose event type has no route fails permanently (the manifest must change first); 408, 429
// and 5xx answers are retried (a 429 or 503 after the delay its `Retry-After` asks for), any other
// non-2xx fails permanently. Failure messages name the
// status and the host, never the payload.

import { defineHandler, config, success, retry, fail } from 'outbox-sdk';
import { post, authority } from 'outbox-sdk/http';

function routeFor(eventType) {
  return config(`route.${eventType}`) ?? config('route.default');
}

export const handler = defineHandler({
  destinationType: 'ROUTER',
  handle(envelope) {
    const url = routeFor(envelope.eventType);
    if (!url) return fail('no route in [config] for the event type', 'no-route');
    const response = post(url, envelope.payloadText, {
      headers: {
        ...envelope.headers,
        'content-type': 'application/json',
        'idempotency-key': envelope.carrierId,
        'x-event-type': envelope.eventType,
      },
      timeout: Number(config('timeout_seconds', '10')),
    });
    if (response.ok) return success();
    const message = `${authority(url) ?? 'the route'} answered HTTP ${response.status}`;
    if ((response.status === 429 || response.status === 503) && response.retryAfter !== undefined) {
      return retry(message, 'http-status', response.retryAfter);
    }
    if (response.status === 408 || response.status === 429 || response.status >= 500) {
      return retry(message, 'http-status');
    }
    return fail(message, 'http-status');
  },
});
