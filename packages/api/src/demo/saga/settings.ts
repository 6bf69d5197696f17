import { ConfigError, siblingModule } from '@postbox/engine';

/** What the demo saga's handler modules need to know; resolved once from the environment by the CLI. */
export interface FulfilmentSettings {
  /** Prefix of the saga's topics and consumer groups. @defaultValue 'demo' */
  prefix: string;
  /** Share of orders whose payment is declined (then the saga compensates). @defaultValue 0.1 */
  refusedPayments: number;
  /** Share of forward replies the orchestrator's side drops (then the saga asks: resolving). @defaultValue 0.05 */
  lostReplies: number;
}

/**
 * A handler module's URL carrying the settings as its query: consumers load handlers by URL (in worker threads or
 * inline), and only entry files read the environment, so the settings travel in the URL the module is loaded by.
 */
export function handlerUrl(file: string, settings: FulfilmentSettings): URL {
  const url = siblingModule(file, import.meta.url);
  url.search = new URLSearchParams({
    prefix: settings.prefix,
    refusedPayments: String(settings.refusedPayments),
    lostReplies: String(settings.lostReplies),
  }).toString();
  return url;
}

/** The settings a handler module was loaded with (its own `import.meta.url`); loud when they are missing. */
export function settingsOf(moduleUrl: string): FulfilmentSettings {
  const query = new URL(moduleUrl).searchParams;
  const share = (name: string) => {
    const value = Number(query.get(name) ?? Number.NaN);
    if (!(value >= 0 && value <= 1)) {
      throw new ConfigError(`${moduleUrl}: load it through handlerUrl() (demo/saga/settings.ts); ${name} is missing`);
    }
    return value;
  };
  const prefix = query.get('prefix');
  if (!prefix)
    throw new ConfigError(`${moduleUrl}: load it through handlerUrl() (demo/saga/settings.ts); prefix is missing`);
  return { prefix, refusedPayments: share('refusedPayments'), lostReplies: share('lostReplies') };
}
