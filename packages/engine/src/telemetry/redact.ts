/**
 * Error texts leave the worker for the failure store, the retry ledger, blocked-aggregate rows, logs and spans.
 * A handler's error (or a database error raised by its statement) may quote the event's data; this takes every
 * string and number of the data that an error text contains out of it before the text goes anywhere. Short
 * values (under 4 characters: "ok", 12) are left, since they say nothing and would shred ordinary words.
 * Runs on failure paths only.
 */
const MIN_LENGTH = 4;
const MAX_VALUES = 1000;
export const REDACTED = '[redacted]';

export function scrubPayload(text: string, data: unknown): string {
  if (data === undefined || data === null || text.length === 0) return text;
  const values = leaves(data)
    .filter((v) => v.length >= MIN_LENGTH)
    .sort((a, b) => b.length - a.length); // longest first, so a value containing another is taken whole
  let out = text;
  for (const v of values) if (out.includes(v)) out = out.split(v).join(REDACTED);
  return out;
}

function leaves(data: unknown): string[] {
  const out: string[] = [];
  const stack: unknown[] = [data];
  while (stack.length > 0 && out.length < MAX_VALUES) {
    const v = stack.pop();
    if (typeof v === 'string') {
      out.push(v);
      // JSON-quoted too: an error that printed the data as JSON escapes quotes and backslashes.
      const quoted = JSON.stringify(v).slice(1, -1);
      if (quoted !== v) out.push(quoted);
    } else if (typeof v === 'number' || typeof v === 'bigint') out.push(String(v));
    else if (Array.isArray(v)) stack.push(...v);
    else if (v && typeof v === 'object') stack.push(...Object.values(v));
  }
  return out;
}
