import { randomBytes } from 'node:crypto';
import { ConfigError } from '../errors.ts';

/**
 * The key ring that encrypts what the failure store and the retry ledger keep of an event (its payload, headers
 * and envelope). Given as `id:base64key,…` (POSTBOX_PAYLOAD_KEYS): the first key encrypts every new row; the
 * others only decrypt rows written before a rotation. Each row names the key that sealed it (its `key_id`).
 */
export interface PayloadKeyRing {
  /** The key new rows are sealed with. */
  primary: string;
  /** Every key by id, primary included: 32 bytes each (AES-256). */
  keys: ReadonlyMap<string, Buffer>;
}

const KEY_ID = /^[A-Za-z0-9_.-]{1,32}$/;
const KEY_BYTES = 32;

/**
 * Parses a key ring. An empty or absent spec means no encryption (null). Every defect is refused with its
 * position, never the key's bytes (the message may reach a log).
 */
export function parsePayloadKeys(spec: string | undefined, source = 'POSTBOX_PAYLOAD_KEYS'): PayloadKeyRing | null {
  if (spec === undefined || spec.trim() === '') return null;
  const keys = new Map<string, Buffer>();
  const entries = spec.split(',').map((e) => e.trim());
  entries.forEach((entry, i) => {
    const where = `${source} entry ${i + 1}`;
    const colon = entry.indexOf(':');
    if (colon < 0) throw new ConfigError(`${where}: expected id:base64key, found no ':'`);
    const id = entry.slice(0, colon);
    const material = entry.slice(colon + 1);
    if (!KEY_ID.test(id)) throw new ConfigError(`${where}: key id "${id}" must be 1–32 of A–Z a–z 0–9 _ . -`);
    if (keys.has(id)) throw new ConfigError(`${where}: key id "${id}" appears twice`);
    if (!/^[A-Za-z0-9+/]+={0,2}$/.test(material))
      throw new ConfigError(`${where} (key "${id}"): the key is not base64`);
    const key = Buffer.from(material, 'base64');
    if (key.length !== KEY_BYTES)
      throw new ConfigError(`${where} (key "${id}"): the key is ${key.length} bytes, AES-256 needs ${KEY_BYTES}`);
    keys.set(id, key);
  });
  return { primary: entries[0]!.slice(0, entries[0]!.indexOf(':')), keys };
}

/** The ring as its spec again (primary first): how it crosses to a worker thread, which parses it back. */
export function formatPayloadKeys(ring: PayloadKeyRing): string {
  const ids = [ring.primary, ...[...ring.keys.keys()].filter((id) => id !== ring.primary)];
  return ids.map((id) => `${id}:${ring.keys.get(id)!.toString('base64')}`).join(',');
}

/** A new ring entry `id:base64key` from the system's CSPRNG (`postbox keys generate`). */
export function generatePayloadKey(id: string): string {
  if (!KEY_ID.test(id)) throw new ConfigError(`key id "${id}" must be 1–32 of A–Z a–z 0–9 _ . -`);
  return `${id}:${randomBytes(KEY_BYTES).toString('base64')}`;
}
