import { createHash } from 'node:crypto';
import type { GraphiQLOptions, Plugin } from 'graphql-yoga';

/**
 * GraphiQL served from this server alone. Yoga's default page loads its script, stylesheet and editor workers
 * from a public CDN, so it is blank offline and runs third-party script on an operator's authenticated page.
 * `@graphql-yoga/render-graphiql` ships the same build, but as one 9 MB page of inline script that no strict
 * policy admits; here its parts are served as files under {@link ASSET_PATH}, the page carries its options as
 * inert JSON, and every HTML response gets {@link GRAPHIQL_CSP}.
 */

/** Absolute, so the page works at both `/graphql` and `/graphql/`. */
const ASSET_PATH = '/graphiql/';

/**
 * Script, worker, style and fetch from this origin only; no inline or evaluated script, nothing framed or
 * posted anywhere. Styles keep 'unsafe-inline' because Monaco (GraphiQL's editor) writes style attributes
 * through innerHTML and creates `<style>` elements it gives no nonce (microsoft/monaco-editor#271); its
 * stylesheet embeds its icon font and images as data: URLs.
 */
export const GRAPHIQL_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "worker-src 'self'",
  "style-src 'self' 'unsafe-inline'",
  "img-src 'self' data:",
  "font-src 'self' data:",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

/**
 * The page's only code of its own, served as a file because the policy forbids inline script. Monaco asks for
 * a worker by label; an unknown label gets the generic editor worker, as Monaco's own default does.
 */
const START_SCRIPT = `'use strict';
(() => {
  const options = JSON.parse(document.getElementById('graphiql-options').textContent);
  const workers = {
    editorWorkerService: '${ASSET_PATH}editor.worker.js',
    json: '${ASSET_PATH}json.worker.js',
    graphql: '${ASSET_PATH}graphql.worker.js',
  };
  self.MonacoEnvironment = { globalAPI: false, getWorkerUrl: (_moduleId, label) => workers[label] ?? workers.editorWorkerService };
  YogaGraphiQL.renderYogaGraphiQL(document.getElementById('root'), options);
})();
`;

/** For `createYoga({ renderGraphiQL })`: the page shell; its options travel as JSON in a non-executed block. */
export function renderGraphiQL(options: GraphiQLOptions): string {
  const title = options.title ?? 'GraphiQL';
  // `<` escaped so no option value can close the JSON block early.
  const json = JSON.stringify(options).replace(/</g, '\\u003c');
  return `<!doctype html>
<html lang="en">
  <head>
    <meta charset="utf-8" />
    <title>${escapeHtml(title)}</title>
    <link rel="icon" href="${escapeHtml(options.favicon ?? `${ASSET_PATH}favicon.ico`)}" />
    <link rel="stylesheet" href="${ASSET_PATH}graphiql.css" />
  </head>
  <body id="body" class="no-focus-outline">
    <noscript>GraphiQL needs JavaScript.</noscript>
    <div id="root"></div>
    <script type="application/json" id="graphiql-options">${json}</script>
    <script src="${ASSET_PATH}graphiql.js"></script>
    <script src="${ASSET_PATH}start.js"></script>
  </body>
</html>
`;
}

/**
 * Serves GraphiQL's files (GET {@link ASSET_PATH}…; an ETag lets a reload skip the 9 MB) and puts the policy
 * on every HTML response, which in development is only the GraphiQL page. Add it only where GraphiQL is on.
 */
export function graphiqlAssets(): Plugin {
  return {
    onRequest({ request, url, fetchAPI, endResponse }) {
      if (request.method !== 'GET' || !url.pathname.startsWith(ASSET_PATH)) return;
      return loadAssets().then((files) => {
        const file = files.get(url.pathname.slice(ASSET_PATH.length));
        if (!file) return endResponse(new fetchAPI.Response(null, { status: 404 }));
        const headers = {
          'content-type': file.type,
          etag: file.etag,
          'cache-control': 'no-cache',
          'x-content-type-options': 'nosniff',
        };
        const fresh = request.headers.get('if-none-match') === file.etag;
        endResponse(new fetchAPI.Response(fresh ? null : file.body, { status: fresh ? 304 : 200, headers }));
      });
    },
    onResponse({ response }) {
      if (!response.headers.get('content-type')?.startsWith('text/html')) return;
      response.headers.set('content-security-policy', GRAPHIQL_CSP);
      response.headers.set('x-content-type-options', 'nosniff');
      response.headers.set('referrer-policy', 'no-referrer');
    },
  };
}

interface Asset {
  body: Uint8Array<ArrayBuffer>;
  type: string;
  etag: string;
}

let assets: Promise<Map<string, Asset>> | undefined;

/** Loaded on first use: production, which has no GraphiQL, never holds the 9 MB. */
function loadAssets(): Promise<Map<string, Asset>> {
  if (assets) return assets;
  assets = import('@graphql-yoga/render-graphiql/graphiql').then((g) => {
    const js = 'text/javascript; charset=utf-8';
    const files: Array<[string, string | Uint8Array<ArrayBuffer>, string]> = [
      ['graphiql.js', g.js, js],
      ['start.js', START_SCRIPT, js],
      ['editor.worker.js', g.editorWorkerService, js],
      ['json.worker.js', g.jsonWorker, js],
      ['graphql.worker.js', g.graphqlWorker, js],
      ['graphiql.css', g.css, 'text/css; charset=utf-8'],
      ['favicon.ico', Buffer.from(g.favicon.slice(g.favicon.indexOf(',') + 1), 'base64'), 'image/x-icon'],
    ];
    return new Map(
      files.map(([name, content, type]) => {
        const body = typeof content === 'string' ? Buffer.from(content, 'utf8') : content;
        return [name, { body, type, etag: `"${createHash('sha256').update(body).digest('base64url').slice(0, 27)}"` }];
      }),
    );
  });
  // A failed load is not cached: the next request tries again.
  assets.catch(() => {
    assets = undefined;
  });
  return assets;
}

function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}
