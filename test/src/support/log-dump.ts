import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const exec = promisify(execFile);

/** One record as the broker stored it: which producer (idempotent producer id) wrote it, and when. */
export interface StoredRecord {
  partition: number;
  offset: number;
  producerId: number;
  /** The producer's timestamp (CreateTime), ms. */
  createdAt: number;
  key: string;
}

/**
 * The records of a topic read straight from a private broker's log segments with Kafka's own DumpLogSegments,
 * not through a client: the log keeps the producer id of every batch, which tells which process wrote a record —
 * no header or client can claim otherwise. `dataDir` is the broker's log.dirs; partitions in offset order.
 */
export async function dumpTopic(dataDir: string, topic: string, partitions: number): Promise<StoredRecord[]> {
  const home = process.env.POSTBOX_HOME || fileURLToPath(new URL('../../../.postbox', import.meta.url));
  const libs = path.join(home, 'kafka', 'libs');
  const out: StoredRecord[] = [];
  for (let p = 0; p < partitions; p++) {
    const dir = path.join(dataDir, `${topic}-${p}`);
    const files = (await fs.readdir(dir)).filter((f) => f.endsWith('.log')).sort();
    if (files.length === 0) continue;
    const { stdout } = await exec(
      'java',
      [
        '-cp',
        `${libs}/*`,
        'kafka.tools.DumpLogSegments',
        '--print-data-log',
        '--files',
        files.map((f) => path.join(dir, f)).join(','),
      ],
      { encoding: 'utf8', maxBuffer: 512 * 1024 * 1024, timeout: 120_000 },
    );
    out.push(...parseDump(stdout, p));
  }
  return out;
}

/** DumpLogSegments' text: a batch line (`baseOffset: … producerId: N …`), then `| offset: …` per record. */
export function parseDump(text: string, partition: number): StoredRecord[] {
  const records: StoredRecord[] = [];
  let producerId: number | null = null;
  for (const line of text.split('\n')) {
    const batch = /^baseOffset: \d+ .*\bproducerId: (-?\d+)/.exec(line);
    if (batch) {
      producerId = Number(batch[1]);
      continue;
    }
    const record = /^\| offset: (\d+) CreateTime: (\d+) .*\bkey: (\S+)/.exec(line);
    if (!record) continue;
    if (producerId === null) throw new Error(`a record before any batch line in the dump: ${line}`);
    records.push({
      partition,
      offset: Number(record[1]),
      createdAt: Number(record[2]),
      key: record[3]!,
      producerId,
    });
  }
  return records;
}
