import { readFile } from 'node:fs/promises';
import { gunzipSync } from 'node:zlib';

/** RFC 4180 as PostgreSQL writes it: quoted fields may hold commas, newlines and doubled quotes. */
export function parseCsv(text: string): string[][] {
  const records: string[][] = [];
  let record: string[] = [];
  let field = '';
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') (field += '"'), i++;
      else if (c === '"') quoted = false;
      else field += c;
    } else if (c === '"') quoted = true;
    else if (c === ',') record.push(field), (field = '');
    else if (c === '\n') record.push(field), records.push(record), (record = []), (field = '');
    else field += c;
  }
  return records;
}

/** A retention archive (`<partition>.csv.gz`) read back: its bytes and the event ids of its rows, in file order. */
export async function readArchiveIds(path: string): Promise<{ file: Buffer; ids: string[] }> {
  const file = await readFile(path);
  const records = parseCsv(gunzipSync(file).toString('utf8'));
  const column = records[0]!.indexOf('event_id');
  return { file, ids: records.slice(1).map((r) => r[column]!) };
}
