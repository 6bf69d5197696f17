import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { PayloadKeyError } from '../errors.ts';
import type { PayloadKeyRing } from './payload-keys.ts';

/**
 * AES-256-GCM sealing of one row's sensitive fields. Layout: version byte (1) | 12-byte nonce | 16-byte tag |
 * ciphertext. The additional data binds the bytes to their row and key (`aad` names the row: table and
 * identity; `what` is its name in an error), so a sealed value copied to another row, or a key id edited in place, fails authentication instead
 * of decrypting into another event's data.
 */
const VERSION = 1;
const NONCE = 12;
const TAG = 16;

export interface Sealed {
  keyId: string;
  bytes: Buffer;
}

/** Seals `plain` under the ring's primary key. */
export function seal(ring: PayloadKeyRing, plain: Buffer, aad: string): Sealed {
  const keyId = ring.primary;
  const nonce = randomBytes(NONCE);
  const cipher = createCipheriv('aes-256-gcm', ring.keys.get(keyId)!, nonce);
  cipher.setAAD(additionalData(keyId, aad));
  const body = Buffer.concat([cipher.update(plain), cipher.final()]);
  return { keyId, bytes: Buffer.concat([Buffer.from([VERSION]), nonce, cipher.getAuthTag(), body]) };
}

/**
 * Opens a sealed value. A ring without its key, an unknown layout, or bytes that fail authentication (wrong key,
 * altered or moved row) is a `PayloadKeyError` naming the row and the key — never garbage.
 */
export function unseal(ring: PayloadKeyRing | null, sealed: Sealed, aad: string, what: string): Buffer {
  const key = ring?.keys.get(sealed.keyId);
  if (!key)
    throw new PayloadKeyError(
      'payload_key_missing',
      `${what} is encrypted with key "${sealed.keyId}", which ${ring ? `the key ring (${[...ring.keys.keys()].join(', ')}) does not hold` : 'cannot be read: POSTBOX_PAYLOAD_KEYS is not set'}`,
    );
  const b = sealed.bytes;
  if (b.length < 1 + NONCE + TAG || b[0] !== VERSION)
    throw new PayloadKeyError(
      'payload_sealed_invalid',
      `${what}: the sealed bytes are not in Postbox's format v${VERSION}`,
    );
  try {
    const decipher = createDecipheriv('aes-256-gcm', key, b.subarray(1, 1 + NONCE));
    decipher.setAAD(additionalData(sealed.keyId, aad));
    decipher.setAuthTag(b.subarray(1 + NONCE, 1 + NONCE + TAG));
    return Buffer.concat([decipher.update(b.subarray(1 + NONCE + TAG)), decipher.final()]);
  } catch (cause) {
    throw new PayloadKeyError(
      'payload_sealed_invalid',
      `${what} does not authenticate under key "${sealed.keyId}": the key's bytes differ from the ones that sealed it, or the row was altered`,
      { cause },
    );
  }
}

function additionalData(keyId: string, aad: string): Buffer {
  return Buffer.from(`postbox/v${VERSION}/${keyId}/${aad}`, 'utf8');
}
