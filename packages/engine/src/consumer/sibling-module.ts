/**
 * The URL of a module next to `base` (usually `import.meta.url`), for files loaded at run time by URL: worker entry
 * files and consumer handlers. Inside the repository sources run as `.ts` under Node's type stripping; an installed
 * package runs compiled `.js` (Node refuses to strip types under node_modules), and a URL string literal is not
 * rewritten by the compiler the way import specifiers are. So a `.ts` path becomes `.js` when `base` is itself `.js`.
 * The pathname is tested, not the whole URL, because handler URLs may carry a query string.
 */
export function siblingModule(path: string, base: string | URL): URL {
  const url = new URL(path, base);
  if (new URL(base).pathname.endsWith('.js')) url.pathname = url.pathname.replace(/\.ts$/, '.js');
  return url;
}
