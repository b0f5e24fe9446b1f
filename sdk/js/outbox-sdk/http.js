// HTTP requests over wasi:http, to the hosts the manifest grants (`[http] allowed_hosts`).
//
// Redirects are never followed: a 3xx comes back as it is, so a granted host cannot bounce a
// request to one that is not granted. A request that gets no response throws HttpError; escaping
// `handle` it becomes the matching result (see HttpError#toResult).

import { handle } from 'wasi:http/outgoing-handler@0.2.12';
import { Fields, OutgoingRequest, OutgoingBody, RequestOptions, httpErrorCode } from 'wasi:http/types@0.2.12';
import { fail, retry } from './index.js';

/** Seconds, applied to connecting, to the first response byte and between response bytes. */
export const DEFAULT_TIMEOUT = 10;

// `blocking-write-and-flush` takes at most 4096 bytes at a time.
const WRITE_CHUNK = 4096;
const READ_CHUNK = 64n * 1024n;
const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Why a request got no response: kind is 'denied', 'timeout', 'connection', 'invalid-request' or 'protocol'. */
export class HttpError extends Error {
  constructor(kind, message) {
    super(message);
    this.name = 'HttpError';
    this.kind = kind;
  }

  /** Denied and invalid requests need a person to act, so they are permanent; anything that may
   * pass on another try is retryable. */
  toResult() {
    if (this.kind === 'denied' || this.kind === 'invalid-request') return fail(this.message, this.kind);
    const errorType = { timeout: 'http-timeout', protocol: 'http-protocol' }[this.kind] || this.kind;
    return retry(this.message, errorType);
  }
}

const invalid = (reason) => new HttpError('invalid-request', `invalid HTTP request: ${reason}`);

const TIMEOUTS = new Set(['DNS-timeout', 'connection-timeout', 'connection-read-timeout', 'connection-write-timeout', 'HTTP-response-timeout']);
const CONNECTION = new Set([
  'DNS-error', 'destination-not-found', 'destination-unavailable', 'destination-IP-prohibited',
  'destination-IP-unroutable', 'connection-refused', 'connection-terminated', 'connection-limit-reached',
  'TLS-protocol-error', 'TLS-certificate-error', 'TLS-alert-received',
]);
const INVALID = new Set([
  'HTTP-request-length-required', 'HTTP-request-body-size', 'HTTP-request-method-invalid',
  'HTTP-request-URI-invalid', 'HTTP-request-URI-too-long', 'HTTP-request-header-section-size',
  'HTTP-request-header-size', 'HTTP-request-trailer-section-size', 'HTTP-request-trailer-size',
]);

function ofCode(code) {
  const tag = code && code.tag ? code.tag : String(code);
  if (tag === 'HTTP-request-denied') {
    return new HttpError('denied', "HTTP request denied: the host is not in the plugin's allowed hosts");
  }
  if (TIMEOUTS.has(tag)) return new HttpError('timeout', 'HTTP request timed out');
  if (CONNECTION.has(tag)) return new HttpError('connection', `HTTP connection failed: ${tag}`);
  if (INVALID.has(tag)) return invalid(tag);
  return new HttpError('protocol', `HTTP exchange failed: ${tag}`);
}

function ofStreamError(thrown) {
  const payload = thrown && thrown.payload !== undefined ? thrown.payload : thrown;
  if (payload && payload.tag === 'last-operation-failed') {
    const code = httpErrorCode(payload.val);
    if (code) return ofCode(code);
    return new HttpError('protocol', 'HTTP exchange failed: stream error');
  }
  return new HttpError('protocol', 'HTTP exchange failed: connection-terminated');
}

function isClosed(thrown) {
  const payload = thrown && thrown.payload !== undefined ? thrown.payload : thrown;
  return payload && payload.tag === 'closed';
}

function split(url) {
  const mark = url.indexOf('://');
  if (mark < 0) throw invalid('the URL has no scheme');
  const scheme = url.slice(0, mark).toLowerCase();
  if (scheme !== 'http' && scheme !== 'https') throw invalid('the URL scheme is not http or https');
  const rest = url.slice(mark + 3);
  let end = rest.length;
  for (const c of ['/', '?', '#']) {
    const i = rest.indexOf(c);
    if (i >= 0 && i < end) end = i;
  }
  const authority = rest.slice(0, end);
  if (!authority) throw invalid('the URL has no host');
  // Credentials in a URL would end up in error messages and logs; use a header instead.
  if (authority.includes('@')) throw invalid('the URL carries user info; send credentials in a header');
  let path = rest.slice(end).split('#')[0];
  if (!path.startsWith('/')) path = `/${path}`;
  return { scheme: scheme === 'https' ? { tag: 'HTTPS' } : { tag: 'HTTP' }, authority, path };
}

/** The `host[:port]` of an http(s) URL: what an error message may name. */
export function authority(url) {
  try {
    return split(url).authority;
  } catch {
    return undefined;
  }
}

const METHODS = new Set(['get', 'head', 'post', 'put', 'delete', 'connect', 'options', 'trace', 'patch']);

/**
 * Sends a request and reads the whole response.
 * @param {string} method
 * @param {string} url
 * @param {{headers?: Record<string,string>, body?: string|Uint8Array, timeout?: number}} [options] timeout in seconds
 * @returns {{status: number, headers: Record<string,string>, body: Uint8Array, text: () => string, ok: boolean}}
 */
export function request(method, url, options = {}) {
  const { scheme, authority: host, path } = split(url);
  const lower = method.toLowerCase();
  const witMethod = METHODS.has(lower) ? { tag: lower } : { tag: 'other', val: method };
  const body = typeof options.body === 'string' ? encoder.encode(options.body) : options.body;
  const entries = [];
  for (const [name, value] of Object.entries(options.headers || {})) {
    if (body !== undefined && name.toLowerCase() === 'content-length') continue;
    entries.push([name, encoder.encode(String(value))]);
  }
  if (body !== undefined) entries.push(['content-length', encoder.encode(String(body.length))]);
  let fields;
  try {
    fields = Fields.fromList(entries);
  } catch {
    throw invalid('a header is forbidden or malformed');
  }
  const outgoing = new OutgoingRequest(fields);
  try {
    outgoing.setMethod(witMethod);
    outgoing.setScheme(scheme);
    outgoing.setAuthority(host);
    outgoing.setPathWithQuery(path);
  } catch {
    throw invalid('the method or URL is not valid');
  }
  const nanos = BigInt(Math.round((options.timeout ?? DEFAULT_TIMEOUT) * 1e9));
  const requestOptions = new RequestOptions();
  try {
    requestOptions.setConnectTimeout(nanos);
    requestOptions.setFirstByteTimeout(nanos);
    requestOptions.setBetweenBytesTimeout(nanos);
  } catch {
    throw invalid('the host does not support request timeouts');
  }
  const outgoingBody = outgoing.body();
  let future;
  try {
    future = handle(outgoing, requestOptions);
  } catch (thrown) {
    throw ofCode(thrown && thrown.payload !== undefined ? thrown.payload : thrown);
  }
  const written = writeBody(outgoingBody, body || new Uint8Array());
  // When the exchange itself failed, the response says why better than the body write.
  const incoming = wait(future);
  if (written) throw written;
  return read(incoming);
}

export function get(url, options = {}) {
  return request('GET', url, options);
}

export function post(url, body, options = {}) {
  return request('POST', url, { ...options, body });
}

function writeBody(outgoingBody, bytes) {
  const stream = outgoingBody.write();
  try {
    for (let start = 0; start < bytes.length; start += WRITE_CHUNK) {
      stream.blockingWriteAndFlush(bytes.subarray(start, start + WRITE_CHUNK));
    }
  } catch (thrown) {
    return ofStreamError(thrown);
  } finally {
    // The stream is a child of the body: it must be gone before the body is finished.
    dispose(stream);
  }
  try {
    OutgoingBody.finish(outgoingBody, undefined);
  } catch (thrown) {
    return ofCode(thrown && thrown.payload !== undefined ? thrown.payload : thrown);
  }
  return undefined;
}

function wait(future) {
  let answer = future.get();
  while (answer === undefined) {
    const pollable = future.subscribe();
    pollable.block();
    dispose(pollable);
    answer = future.get();
  }
  dispose(future);
  // option<result<result<incoming-response, error-code>>>: the outer error means taken twice.
  if (answer.tag === 'err') throw new HttpError('protocol', 'HTTP exchange failed: the response was already taken');
  const inner = answer.val;
  if (inner.tag === 'err') throw ofCode(inner.val);
  return inner.val;
}

function read(incoming) {
  const status = incoming.status();
  const fields = incoming.headers();
  const headers = {};
  for (const [name, value] of fields.entries()) headers[name.toLowerCase()] = decoder.decode(value);
  dispose(fields);
  const incomingBody = incoming.consume();
  const stream = incomingBody.stream();
  const chunks = [];
  let length = 0;
  try {
    for (;;) {
      let chunk;
      try {
        chunk = stream.blockingRead(READ_CHUNK);
      } catch (thrown) {
        if (isClosed(thrown)) break;
        throw ofStreamError(thrown);
      }
      chunks.push(chunk);
      length += chunk.length;
    }
  } finally {
    // The stream is a child of the body, and the body of the response.
    dispose(stream);
    dispose(incomingBody);
    dispose(incoming);
  }
  const bytes = new Uint8Array(length);
  let at = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, at);
    at += chunk.length;
  }
  return {
    status,
    headers,
    body: bytes,
    ok: status >= 200 && status < 300,
    text: () => decoder.decode(bytes),
    retryAfter: retryAfter(headers['retry-after'], Date.now()),
  };
}

const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
const HTTP_DATE = new RegExp(
  `^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), ([0-9]{2}) (${MONTHS.join('|')}) ([0-9]{4}) ` +
    '([0-9]{2}):([0-9]{2}):([0-9]{2}) GMT$',
);

/** Seconds a `Retry-After` value asks to wait: delta-seconds, or an IMF-fixdate HTTP-date reckoned
 * from `now` (ms); anything else is the destination's nonsense, and undefined. */
function retryAfter(value, now) {
  if (value === undefined || value.length > 64) return undefined;
  const text = value.replace(/^[ \t]+|[ \t]+$/g, '');
  if (/^[0-9]+$/.test(text)) return Number(text);
  const match = HTTP_DATE.exec(text);
  if (!match) return undefined;
  const [, day, month, year, hour, minute, second] = match;
  const at = Date.UTC(Number(year), MONTHS.indexOf(month), Number(day), Number(hour), Number(minute), Number(second));
  if (new Date(at).getUTCDate() !== Number(day) || Number(hour) > 23 || Number(minute) > 59 || Number(second) > 60) {
    return undefined;
  }
  return Math.max(0, (at - now) / 1000);
}

function dispose(resource) {
  const drop = resource && resource[Symbol.dispose];
  if (typeof drop === 'function') drop.call(resource);
}
