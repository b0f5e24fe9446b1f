// HTTP requests to the hosts the manifest grants (`[http] allowed_hosts`), one host call each
// (`outbox:relay/http`'s `send-encoded`: the host's wasi:http transport, checks and limits, with
// each header section as one byte list, since the generated bindings spend about 7 µs on each
// header they lower or lift one by one).
//
// Redirects are never followed: a 3xx comes back as it is, so a granted host cannot bounce a
// request to one that is not granted. A request that gets no response throws HttpError; escaping
// `handle` it becomes the matching result (see HttpError#toResult).

import { sendEncoded } from 'outbox:relay/http@0.2.0';
import { fail, retry } from './index.js';

/** Seconds, applied to connecting, to the first response byte and between response bytes. */
export const DEFAULT_TIMEOUT = 10;

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

// The host's reasons are fixed names (`connection-refused`, `HTTP-response-body-size`), never a
// value of the request or the response, so they may be quoted.
function ofSendError(thrown) {
  const error = thrown && thrown.payload !== undefined ? thrown.payload : thrown;
  switch (error && error.tag) {
    case 'denied':
      return new HttpError('denied', "HTTP request denied: the host is not in the plugin's allowed hosts");
    case 'timeout':
      return new HttpError('timeout', 'HTTP request timed out');
    case 'connection':
      return new HttpError('connection', `HTTP connection failed: ${error.val}`);
    case 'invalid-request':
      return invalid(error.val);
    default:
      return new HttpError('protocol', `HTTP exchange failed: ${error && error.val ? error.val : 'unknown'}`);
  }
}

// The URL's `host[:port]`; what the host would refuse anyway is refused here with a clearer reason.
// The last URL's answer is kept: a handler mostly sends to one URL, and each split costs an
// interpreted guest about 7 µs.
let lastUrl;
let lastAuthority;
function split(url) {
  if (url === lastUrl) return lastAuthority;
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
  lastUrl = url;
  lastAuthority = authority;
  return authority;
}

/** The `host[:port]` of an http(s) URL: what an error message may name. */
export function authority(url) {
  try {
    return split(url);
  } catch {
    return undefined;
  }
}

/** Headers as `send-encoded` takes them: `name: value` lines, each ended by CRLF. Built with plain
 * concatenation and one line count, the cheapest form for an interpreted guest (template strings
 * and a regular expression per header cost it several µs). */
function section(headers) {
  let lines = '';
  let count = 0;
  // Own names only, as Object.entries gave them; an indexed loop, since an array iterator costs an
  // interpreted guest more than the rest of the loop.
  const names = Object.keys(headers);
  for (let i = 0; i < names.length; i++) {
    const name = names[i];
    if (!name || name.indexOf(':') >= 0) throw invalid('a header name is malformed');
    lines += name + ': ' + headers[name] + '\r\n';
    count++;
  }
  // A line break inside a name or value would end its line early and smuggle in a header.
  if (lines.split('\n').length !== count + 1) throw invalid('a header name or value holds a line break');
  return encoder.encode(lines);
}

const METHODS = new Set(['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'OPTIONS', 'PATCH']);

/**
 * Sends a request and reads the whole response, in one call to the host.
 * @param {string} method
 * @param {string} url
 * @param {{headers?: Record<string,string>, body?: string|Uint8Array, timeout?: number}} [options] timeout in seconds
 * @returns {{status: number, headers: Record<string,string>, body: Uint8Array, text: () => string, ok: boolean}}
 */
export function request(method, url, options = {}) {
  split(url);
  const upper = method.toUpperCase();
  const body = typeof options.body === 'string' ? encoder.encode(options.body) : options.body;
  const headers = section(options.headers || {});
  const timeoutMs = BigInt(Math.max(0, Math.round((options.timeout ?? DEFAULT_TIMEOUT) * 1000)));
  const hash = url.indexOf('#');
  let answer;
  try {
    answer = sendEncoded({
      method: METHODS.has(upper) ? upper : method,
      url: hash < 0 ? url : url.slice(0, hash),
      headers,
      body,
      timeoutMs,
    });
  } catch (thrown) {
    throw ofSendError(thrown);
  }
  return new Response(answer);
}

/** Any status, 3xx and errors included, is a response. Its headers are decoded on first use: most
 * handlers read only the status, and each decode costs an interpreted guest a few µs. */
class Response {
  constructor(answer) {
    this.status = answer.status;
    this.body = answer.body;
    this.ok = answer.status >= 200 && answer.status < 300;
    this._section = answer.headers;
    this._headers = undefined;
  }

  /** Header names in lower case; the last value wins for a repeated name. */
  get headers() {
    if (this._headers === undefined) {
      const headers = {};
      for (const line of decoder.decode(this._section).split('\r\n')) {
        const colon = line.indexOf(':');
        if (colon > 0) headers[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim();
      }
      this._headers = headers;
    }
    return this._headers;
  }

  get retryAfter() {
    return retryAfter(this.headers['retry-after'], Date.now());
  }

  text() {
    return decoder.decode(this.body);
  }
}

export function get(url, options = {}) {
  return request('GET', url, options);
}

export function post(url, body, options = {}) {
  return request('POST', url, { ...options, body });
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
