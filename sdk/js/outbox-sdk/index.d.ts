// Types of outbox-sdk (index.js).

export type PublishResult =
  | { tag: 'success' }
  | { tag: 'retryable'; val: { message: string; errorType?: string; retryAfterMs?: bigint } }
  | { tag: 'permanent'; val: { message: string; errorType?: string } }
  | { tag: 'unresolvable'; val: string };

export interface RawEnvelope {
  entryId: bigint;
  carrierId: string;
  aggregateType?: string;
  aggregateId?: string;
  eventType: string;
  destinationType: string;
  destination: string;
  payload: string;
  headers: Array<[string, string]>;
  metadata: string;
  scheduledAt?: bigint;
  attempt: number;
  maxAttempts: number;
  createdAt: bigint;
}

export class PayloadError extends Error {}
export class ConfigError extends Error {
  constructor(key: string);
}

/** One outbox row, with headers as an object and the payload parsed on first use. */
export class Envelope {
  constructor(raw: RawEnvelope);
  readonly entryId: bigint;
  /** The row's carrier id (a UUIDv7): a stable idempotency key for the destination. */
  readonly carrierId: string;
  readonly aggregateType?: string;
  readonly aggregateId?: string;
  readonly eventType: string;
  readonly destinationType: string;
  readonly destination: string;
  /** The payload as the JSON text the application wrote. */
  readonly payloadText: string;
  readonly headers: Record<string, string>;
  readonly metadataText: string;
  /** Unix milliseconds. */
  readonly scheduledAt?: bigint;
  /** Attempts made before this one (0 for the first). */
  readonly attempt: number;
  readonly maxAttempts: number;
  /** Unix milliseconds. */
  readonly createdAt: bigint;
  /** The parsed payload; throws PayloadError (a permanent failure) when it is not JSON. */
  readonly payload: unknown;
  readonly metadata: unknown;
  readonly isLastAttempt: boolean;
}

export interface PublishCompleted {
  entryId: bigint;
  destinationType: string;
  destination: string;
  attempt: number;
  maxAttempts: number;
  outcome: 'success' | 'retryable-failure' | 'permanent-failure' | 'unresolvable';
  disposition: 'published' | 'retry-scheduled' | 'dead-lettered' | 'deferred';
  dispositionRecorded: boolean;
  nextAttemptAt?: bigint;
  errorType?: string;
  elapsedMicros: bigint;
  completedAt: bigint;
}

export function success(): PublishResult;
/** `retryAfter`: seconds the destination asked to wait (the host keeps it within its backoff). */
export function retry(message: string, errorType?: string, retryAfter?: number): PublishResult;
export function fail(message: string, errorType?: string): PublishResult;
export function defer(reason: string): PublishResult;
export function resultOfError(error: unknown): PublishResult;

export interface HandlerSpec {
  /** `^[A-Za-z0-9_-]{1,32}$` */
  destinationType: string;
  /** Claim only these destinations of the type; all when absent. */
  destinations?: string[];
  handle(envelope: Envelope): PublishResult;
}
export interface HandlerExport {
  destinationType(): string;
  claimScope(): { tag: 'all' } | { tag: 'destinations'; val: string[] };
  publish(envelope: RawEnvelope): PublishResult;
}
export function defineHandler(spec: HandlerSpec): HandlerExport;

export interface ObserverSpec {
  completed(event: PublishCompleted, envelope: Envelope): void;
}
export function defineObserver(spec: ObserverSpec): {
  onPublishCompleted(event: PublishCompleted, envelope: RawEnvelope): void;
};

export function config(key: string): string | undefined;
export function config(key: string, fallback: string): string;
export function requireConfig(key: string): string;
export function trace(message: string): void;
export function debug(message: string): void;
export function info(message: string): void;
export function warn(message: string): void;
export function error(message: string): void;
