import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type BrowserContext } from 'playwright-core';

/** Debian's package (`apt-get install chromium`): Playwright's own browser download cannot be reached here. */
export const CHROMIUM = '/usr/bin/chromium';

// Headless as root needs --no-sandbox; the rest keep the browser from calling home, so every request a test
// sees is one its page made.
const ARGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
];

export interface TestBrowser {
  /** A browser context on a fresh profile: no cookies, storage or cache from any earlier run. */
  context: BrowserContext;
  /** Closes the browser and removes its profile; idempotent. */
  close(): Promise<void>;
}

/**
 * Headless Chromium on a profile directory of its own. Playwright refuses `--user-data-dir` among the
 * arguments of `launch()`, so the profile is given to `launchPersistentContext`, which is the same flag.
 */
export async function launchBrowser(
  options: { viewport?: { width: number; height: number } } = {},
): Promise<TestBrowser> {
  const profile = await mkdtemp(join(tmpdir(), 'postbox-chromium-'));
  let context: BrowserContext;
  try {
    context = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      args: ARGS,
      viewport: options.viewport ?? { width: 1280, height: 800 },
    });
  } catch (cause) {
    await rm(profile, { recursive: true, force: true });
    throw new Error(`cannot start ${CHROMIUM} (apt-get install chromium)`, { cause });
  }
  let closing: Promise<void> | undefined;
  return {
    context,
    close() {
      closing ??= context.close().finally(() => rm(profile, { recursive: true, force: true }));
      return closing;
    },
  };
}
