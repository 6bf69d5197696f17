/**
 * A long log in a few lines: each distinct message once, with its level, count and last occurrence (so a rare
 * error is not scrolled away by a repeating warning), the last progress line, and the last raw output.
 * Pipeline.diagnose() prints one per live process when a scenario does not settle.
 */
export function digest(output: string): string {
  const messages = new Map<string, { level: number; count: number; last: string }>();
  let progress = '';
  for (const line of output.split('\n')) {
    if (!line.startsWith('{')) continue;
    try {
      const entry = JSON.parse(line) as { level?: number; msg?: string; 'consumer-progress'?: unknown };
      if (entry['consumer-progress']) progress = line;
      if (entry.msg === undefined) continue;
      const m = messages.get(entry.msg) ?? { level: entry.level ?? 0, count: 0, last: '' };
      m.count++;
      m.last = line;
      messages.set(entry.msg, m);
    } catch {
      // not a log line
    }
  }
  const out = [...messages.entries()]
    .filter(([, m]) => m.level >= 40)
    .sort((a, b) => b[1].level - a[1].level || b[1].count - a[1].count)
    .map(([msg, m]) => `  [${m.level}] ×${m.count} ${msg}: ${m.last.slice(0, 600)}`);
  if (progress) out.push(`  last progress: ${progress.slice(0, 1500)}`);
  out.push(`  last output:\n${output.slice(-1200)}`);
  return out.join('\n');
}
