import { encodeCursor } from './validate.ts';

/**
 * A Relay connection page from a keyset query that fetched one row more than the page (newest first): the
 * extra row only says whether there is a next page.
 */
export function keysetPage<T>(rows: T[], size: number, after: number | null, kind: string, idOf: (row: T) => number) {
  const page = rows.slice(0, size);
  const cursor = (row: T | undefined) => (row === undefined ? null : encodeCursor(kind, idOf(row)));
  return {
    edges: page.map((node) => ({ cursor: encodeCursor(kind, idOf(node)), node })),
    pageInfo: {
      hasNextPage: rows.length > size,
      hasPreviousPage: after !== null,
      startCursor: cursor(page[0]),
      endCursor: cursor(page.at(-1)),
    },
  };
}
