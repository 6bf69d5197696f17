/**
 * GraphQL names (RUNNING, OUTBOX_MISSING, DRY_RUN) for the engine's values (running, outbox-missing, dry_run).
 * Every value of the engine's union must be listed: one left out (a reason the engine gained) fails the typecheck,
 * not the query that meets it.
 */
export function upper<T extends string>() {
  return <const A extends readonly T[]>(
    values: A & ([Exclude<T, A[number]>] extends [never] ? unknown : Missing<T, A>),
  ) =>
    Object.fromEntries(values.map((v) => [v.toUpperCase().replaceAll('-', '_'), { value: v }])) as {
      [K in T as Uppercase<Snake<K>>]: { value: K };
    };
}

/** What the typecheck names when a value is left out. */
export type Missing<T extends string, A extends readonly T[]> = { 'values left out': Exclude<T, A[number]> };

type Snake<S extends string> = S extends `${infer A}-${infer B}` ? `${A}_${Snake<B>}` : S;
