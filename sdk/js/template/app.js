import { defineHandler, requireConfig, info, success, retry, fail } from 'outbox-sdk';
import { post } from 'outbox-sdk/http';

export const handler = defineHandler({
  destinationType: 'AUDIT',
  handle(envelope) {
    info(`auditing entry ${envelope.entryId}`);
    const response = post(requireConfig('url'), envelope.payloadText, {
      headers: { 'content-type': 'application/json', 'idempotency-key': envelope.carrierId },
      timeout: 5,
    });
    if (response.ok) return success();
    if (response.status === 408 || response.status === 429 || response.status >= 500) {
      return retry(`HTTP ${response.status}`, 'http-status');
    }
    return fail(`HTTP ${response.status}`, 'http-status');
  },
});
