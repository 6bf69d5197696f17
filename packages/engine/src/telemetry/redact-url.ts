/**
 * Connection strings are printed — the stack's status, a link check's error, a log line naming a server — and
 * their secrets must not be. `redactUrl` takes any text and masks every password it can tell is one, without
 * parsing the text as one URL (a multi-host `postgres://u:p@h1,h2/db`, a NATS list of URLs, a Kafka host list or
 * a string no URL parser takes would otherwise go out as it came in):
 *
 * - the password of a URL's user info, `scheme://user:password@…` → `scheme://user:***@…` (any scheme). The user
 *   info runs to the last `@` before the query, so a password with a raw `@` or `/` is masked whole. A user info
 *   without `:` is a user name, kept — except for `nats:` and `tls:`, where it is a token;
 * - `user:password@host` without a scheme (a Kafka or NATS host list: the hosts before the last go too);
 * - query or keyword parameters that carry a secret: `?password=`, `&sslpassword=`, `token=`, … (also
 *   PostgreSQL's `host=h password=p` form).
 *
 * Over-masking is preferred to a leak: a query whose value holds `@` may take the host with it. A password
 * written with whitespace, `?`, `#` or `://` in it is not a URL's (they must be percent-encoded) and is not
 * recognised.
 */
export const URL_MASK = '***';

const SCHEME = /[A-Za-z][A-Za-z0-9+.-]*:\/\//g;
const SECRET_PARAMETER =
  /(^|[?&;])((?:ssl)?password|pass|passwd|pwd|secret|token|access_token|auth_token|api_?key|sasl_password)=[^&#]*/gi;
const TOKEN_SCHEMES = new Set(['nats', 'tls']);

export function redactUrl(text: string): string {
  return text
    .split(/(\s+)/)
    .map((part) => (/^\s*$/.test(part) ? part : redactWord(part)))
    .join('');
}

/** One whitespace-free word: its parameters, then each URL in it (a list may hold several), or its host list. */
function redactWord(word: string): string {
  const masked = word.replace(SECRET_PARAMETER, (_m, lead: string, name: string) => `${lead}${name}=${URL_MASK}`);
  const starts = [...masked.matchAll(SCHEME)].map((m) => m.index);
  if (starts.length === 0) return maskBareUserinfo(masked);
  const parts = [masked.slice(0, starts[0])];
  for (const [i, start] of starts.entries()) parts.push(maskUrl(masked.slice(start, starts[i + 1])));
  return parts.join('');
}

/** `scheme://userinfo@rest`, the user info's secret masked. */
function maskUrl(url: string): string {
  const marker = url.indexOf('://');
  const scheme = url.slice(0, marker).toLowerCase();
  const rest = url.slice(marker + 3);
  const end = searchEnd(rest);
  const at = rest.lastIndexOf('@', end - 1);
  if (at < 0) return url;
  return `${url.slice(0, marker + 3)}${maskUserinfo(rest.slice(0, at), TOKEN_SCHEMES.has(scheme))}${rest.slice(at)}`;
}

/**
 * `user:password@host:port` without a scheme (a host list): from the first `:` to the last `@` before the query,
 * so that a raw `,` or `@` in a password is masked whole; in a list of several, the hosts before the last go too.
 */
function maskBareUserinfo(word: string): string {
  const at = word.lastIndexOf('@', searchEnd(word) - 1);
  const colon = word.indexOf(':');
  if (at < 0 || colon < 0 || colon > at) return word;
  return `${word.slice(0, colon)}:${URL_MASK}${word.slice(at)}`;
}

function maskUserinfo(userinfo: string, token: boolean): string {
  if (userinfo === '') return userinfo;
  const colon = userinfo.indexOf(':');
  if (colon >= 0) return `${userinfo.slice(0, colon)}:${URL_MASK}`;
  return token ? URL_MASK : userinfo;
}

/** Where the query or fragment begins (the user info lies before it). */
function searchEnd(text: string): number {
  const q = text.search(/[?#]/);
  return q < 0 ? text.length : q;
}
