import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { redactUrl } from './redact-url.ts';

test('each scheme: the password is masked, the address kept', () => {
  const cases: Array<[string, string]> = [
    ['postgres://postbox:s3cret@db.internal:5432/postbox', 'postgres://postbox:***@db.internal:5432/postbox'],
    ['postgresql://u:s3cret@h/db?sslmode=verify-full', 'postgresql://u:***@h/db?sslmode=verify-full'],
    ['postgres://u:s3cret@h1:5432,h2:5433/db', 'postgres://u:***@h1:5432,h2:5433/db'],
    ['redis://:s3cret@cache:6379/0', 'redis://:***@cache:6379/0'],
    ['rediss://postbox:s3cret@cache:6380/?sslrootcert=/ca.pem', 'rediss://postbox:***@cache:6380/?sslrootcert=/ca.pem'],
    ['amqp://guest:s3cret@mq:5672/vhost', 'amqp://guest:***@mq:5672/vhost'],
    ['amqps://u:s3cret@mq:5671/?insecure', 'amqps://u:***@mq:5671/?insecure'],
    ['nats://u:s3cret@n1:4222,nats://u:s3cret@n2:4222', 'nats://u:***@n1:4222,nats://u:***@n2:4222'],
    ['tls://u:s3cret@localhost:14223', 'tls://u:***@localhost:14223'],
    ['nats://s3crettoken@n1:4222', 'nats://***@n1:4222'],
    ['u:s3cret@k1:9092,k2:9092', 'u:***@k1:9092,k2:9092'],
    ['kafka://u:s3cret@k1:9092', 'kafka://u:***@k1:9092'],
    ['postgres://h/db?user=u&password=s3cret&sslmode=require', 'postgres://h/db?user=u&password=***&sslmode=require'],
    ['redis://cache:6379?password=s3cret', 'redis://cache:6379?password=***'],
    ['host=db user=u password=s3cret dbname=x', 'host=db user=u password=*** dbname=x'],
    ['postgres://u:p@ss/w0rd@h/db', 'postgres://u:***@h/db'],
    ['postgres://u:s3cret@[::1', 'postgres://u:***@[::1'],
    ['at postgres://u:s3cret@h/db, then redis://:s3cret@r', 'at postgres://u:***@h/db, then redis://:***@r'],
  ];
  for (const [input, expected] of cases) assert.equal(redactUrl(input), expected, input);
});

test('what carries no secret passes through unchanged', () => {
  for (const text of [
    'postgres://postbox@127.0.0.1:15432/postbox',
    '127.0.0.1:19092,127.0.0.1:19093',
    'redis://127.0.0.1:16379',
    'not a url at all',
    '',
  ])
    assert.equal(redactUrl(text), text);
});

const SCHEMES = ['postgres', 'postgresql', 'redis', 'rediss', 'amqp', 'amqps', 'nats', 'tls', 'kafka'];
const host = fc.stringMatching(/^[a-y0-9][a-y0-9.-]{0,14}(:[0-9]{1,5})?$/);
const hosts = fc.array(host, { minLength: 1, maxLength: 3 }).map((h) => h.join(','));
const user = fc.stringMatching(/^[a-y0-9._-]{0,10}$/);
/** A secret as a URL holds it: percent-encoded, or raw with anything but whitespace, `?`, `#` and `://`. */
const secret = fc.oneof(
  fc.string({ minLength: 1, maxLength: 20 }).map((s) => `Zq${encodeURIComponent(s)}`),
  fc
    .stringMatching(/^[A-Za-z0-9!$%&'()*+,;=:@/~._\-[\]]{1,20}$/)
    .map((s) => `Zq${s}`)
    .filter((s) => !s.includes('://')),
);
const words = fc.string({ maxLength: 20 }).filter((s) => !s.includes('Zq'));

test('property: no text holding a secret in a URL, a host list or a parameter ever prints it', () => {
  fc.assert(
    fc.property(
      fc.constantFrom(...SCHEMES),
      user,
      secret,
      hosts,
      fc.stringMatching(/^(\/[a-z0-9]{0,8})?$/),
      fc.constantFrom('userinfo', 'list', 'bare', 'query', 'keyword', 'token'),
      words,
      words,
      (scheme, name, pass, where, path, shape, before, after) => {
        const url = {
          userinfo: `${scheme}://${name}:${pass}@${where}${path}`,
          list: `${scheme}://${name}:${pass}@${where},${scheme}://${name}:${pass}@${where}`,
          bare: `${name}:${pass}@${where}`,
          query: `${scheme}://${where}${path}?sslmode=require&password=${pass}&x=1`,
          keyword: `host=${where} password=${pass}`,
          // A token holds no raw `:` (with one it is a user and a password).
          token: `nats://${pass.replaceAll(':', '%3A')}@${where}`,
        }[shape];
        const secretText = shape === 'token' ? pass.replaceAll(':', '%3A') : pass;
        const out = redactUrl(`${before} ${url} ${after}`);
        assert.ok(!out.includes(secretText), `${secretText} in ${out}`);
      },
    ),
    { numRuns: 2000 },
  );
});
