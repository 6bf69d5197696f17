import { Kind } from 'graphql';
import { builder } from '../builder.ts';
import { invalid } from '../validate.ts';

builder.scalarType('DateTime', {
  description: 'An ISO-8601 instant, e.g. 2026-12-03T07:10:00.000Z',
  serialize: (d) => (d instanceof Date ? d.toISOString() : new Date(d as string).toISOString()),
  parseValue: (v) => parseDate(v),
  parseLiteral: (ast) => parseDate(ast.kind === Kind.STRING ? ast.value : null),
});

builder.scalarType('JSON', {
  description: 'A JSON value (audit records before/after)',
  serialize: (v) => v,
  parseValue: (v) => v,
});

function parseDate(v: unknown): Date {
  if (typeof v !== 'string' || v.length > 40) throw invalid('DateTime', 'must be an ISO-8601 string');
  const d = new Date(v);
  if (Number.isNaN(d.getTime())) throw invalid('DateTime', `"${v.slice(0, 40)}" is not an ISO-8601 instant`);
  return d;
}
