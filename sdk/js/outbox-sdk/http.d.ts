// Types of outbox-sdk/http (http.js).
import type { PublishResult } from './index.js';

export const DEFAULT_TIMEOUT: number;

export class HttpError extends Error {
  readonly kind: 'denied' | 'timeout' | 'connection' | 'invalid-request' | 'protocol';
  toResult(): PublishResult;
}

export interface RequestOptions {
  headers?: Record<string, string>;
  body?: string | Uint8Array;
  /** Seconds: to connect, to the first response byte, and between response bytes. */
  timeout?: number;
}

export interface Response {
  status: number;
  /** Names in lower case; the last value wins for a repeated name. */
  readonly headers: Record<string, string>;
  body: Uint8Array;
  ok: boolean;
  text(): string;
  /** Seconds the `Retry-After` header asks to wait (delta-seconds or an HTTP-date), if readable;
   * pass it on with `retry(message, errorType, response.retryAfter)`. */
  readonly retryAfter?: number;
}

export function request(method: string, url: string, options?: RequestOptions): Response;
export function get(url: string, options?: Omit<RequestOptions, 'body'>): Response;
export function post(url: string, body: string | Uint8Array, options?: Omit<RequestOptions, 'body'>): Response;
export function authority(url: string): string | undefined;
