// Write outbox-host plugins in JavaScript: a destination handler or a publish observer.
//
// A handler module exports `handler = defineHandler({ destinationType, handle(envelope) })`, where
// `handle` returns one of success(), retry(), fail() or defer(); an observer module exports
// `observer = defineObserver({ completed(event, envelope) })`. Build either with
// `sdk/js/build app.js -o app.wasm` (see sdk/README.md).
//
// The instance a plugin runs in is kept between calls (module state survives), retired after a
// while and never shared. Messages and error types you return end up in the host's log and
// dead-letter rows: name what failed (a status, a host), never the payload or a header value.

import { log as hostLog } from 'outbox:relay/log@0.2.0';
import { get as configGet } from 'outbox:relay/config@0.2.0';

/** The payload is not JSON: publishing it again cannot help, so it fails permanently. */
export class PayloadError extends Error {
  constructor() {
    super('the payload is not valid JSON');
    this.name = 'PayloadError';
  }
}

/** A required `[config]` key is missing from the plugin's manifest. */
export class ConfigError extends Error {
  constructor(key) {
    super(`the manifest's [config] has no \`${key}\``);
    this.name = 'ConfigError';
  }
}

/** One outbox row, with headers as an object and the payload parsed on first use. */
export class Envelope {
  constructor(raw) {
    this.entryId = raw.entryId;
    /** The row's carrier id (a UUIDv7): a stable idempotency key for the destination. */
    this.carrierId = raw.carrierId;
    this.aggregateType = raw.aggregateType;
    this.aggregateId = raw.aggregateId;
    this.eventType = raw.eventType;
    this.destinationType = raw.destinationType;
    this.destination = raw.destination;
    this.payloadText = raw.payload;
    /** Application headers; the last value wins for a repeated name. */
    this.headers = Object.fromEntries(raw.headers);
    this.metadataText = raw.metadata;
    this.scheduledAt = raw.scheduledAt;
    this.attempt = raw.attempt;
    this.maxAttempts = raw.maxAttempts;
    this.createdAt = raw.createdAt;
    this._parsed = false;
    this._payload = undefined;
  }

  /** The payload parsed from JSON; throws PayloadError when it is not JSON. */
  get payload() {
    if (!this._parsed) {
      try {
        this._payload = JSON.parse(this.payloadText);
      } catch {
        // The parser's message may quote the payload: say only what is wrong.
        throw new PayloadError();
      }
      this._parsed = true;
    }
    return this._payload;
  }

  get metadata() {
    return JSON.parse(this.metadataText);
  }

  get isLastAttempt() {
    return this.attempt + 1 >= this.maxAttempts;
  }
}

export function success() {
  return { tag: 'success' };
}

/** Try again later, with backoff; dead-lettered once the attempts run out. `retryAfter` (seconds)
 * is how long the destination asked to be left alone, an HTTP `Retry-After` say: the host waits at
 * least that long and at least its backoff, never longer than its backoff maximum, and the attempt
 * is spent as for any retry. */
export function retry(message, errorType, retryAfter) {
  return {
    tag: 'retryable',
    val: { message: String(message), errorType, retryAfterMs: millis(retryAfter) },
  };
}

const MAX_U64 = 2n ** 64n - 1n;

/** Seconds as the WIT's `retry-after-ms`: a u64 (a BigInt here), so never negative nor past
 * 2^64 - 1; a value that is not a number asks for nothing. */
function millis(seconds) {
  if (seconds === undefined || seconds === null) return undefined;
  const ms = Number(seconds) * 1000;
  if (Number.isNaN(ms)) return undefined;
  if (ms <= 0) return 0n;
  if (ms >= Number(MAX_U64)) return MAX_U64;
  return BigInt(Math.floor(ms));
}

/** Never retry: dead-lettered now. */
export function fail(message, errorType) {
  return { tag: 'permanent', val: { message: String(message), errorType } };
}

/** This node cannot deliver it now: deferred without spending an attempt. */
export function defer(reason) {
  return { tag: 'unresolvable', val: String(reason) };
}

const RESULT_TAGS = new Set(['success', 'retryable', 'permanent', 'unresolvable']);

/** What a thrown error becomes: SDK errors their own result, anything else a retry that names
 * only the error's class (its message may quote the payload). */
export function resultOfError(error) {
  if (error instanceof PayloadError) return fail(error.message, 'payload');
  if (error instanceof ConfigError) return fail(error.message, 'config');
  if (error && typeof error.toResult === 'function') return error.toResult();
  const name = (error && error.name) || typeof error;
  return retry(`the handler threw ${name}`, 'exception');
}

/**
 * The `handler` export of a destination-handler component.
 * @param {{destinationType: string, destinations?: string[], handle: (envelope: Envelope) => object}} spec
 */
export function defineHandler(spec) {
  if (typeof spec.handle !== 'function') throw new TypeError('defineHandler needs handle(envelope)');
  return {
    destinationType() {
      return spec.destinationType;
    },
    claimScope() {
      return spec.destinations ? { tag: 'destinations', val: [...spec.destinations] } : { tag: 'all' };
    },
    publish(raw) {
      let result;
      try {
        result = spec.handle(new Envelope(raw));
      } catch (error) {
        return resultOfError(error);
      }
      if (!result || !RESULT_TAGS.has(result.tag)) {
        return fail('handle() returned something other than an outbox-sdk result', 'plugin-bug');
      }
      return result;
    },
  };
}

/**
 * The `observer` export of a publish-observer component. `event.outcome` is one of
 * 'success', 'retryable-failure', 'permanent-failure', 'unresolvable'; `event.disposition` one of
 * 'published', 'retry-scheduled', 'dead-lettered', 'deferred'.
 * @param {{completed: (event: object, envelope: Envelope) => void}} spec
 */
export function defineObserver(spec) {
  if (typeof spec.completed !== 'function') throw new TypeError('defineObserver needs completed(event, envelope)');
  return {
    onPublishCompleted(event, raw) {
      spec.completed(event, new Envelope(raw));
    },
  };
}

// An instance's `[config]` never changes (a manifest edit reloads the plugin into new instances),
// so a key crosses to the host once: each crossing costs a JavaScript guest several µs. Keys may
// come from rows (`route.<event type>`), so only the first CONFIG_KEYS_KEPT are kept.
const CONFIG_KEYS_KEPT = 256;
const configKept = new Map();

function configValue(key) {
  let value = configKept.get(key);
  if (value === undefined && !configKept.has(key)) {
    value = configGet(key) ?? undefined;
    if (configKept.size < CONFIG_KEYS_KEPT) configKept.set(key, value);
  }
  return value;
}

/** A value from the manifest's `[config]` table, or `fallback`. */
export function config(key, fallback = undefined) {
  return configValue(key) ?? fallback;
}

export function requireConfig(key) {
  const value = configValue(key);
  if (value === undefined) throw new ConfigError(key);
  return value;
}

export function trace(message) {
  hostLog('trace', String(message));
}
export function debug(message) {
  hostLog('debug', String(message));
}
export function info(message) {
  hostLog('info', String(message));
}
export function warn(message) {
  hostLog('warn', String(message));
}
export function error(message) {
  hostLog('error', String(message));
}
