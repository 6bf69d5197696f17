/**
 * Whether a migration is safe while processes of the previous version still run (expand), or must wait until
 * every process runs the new one (contract) — the expand / migrate / contract order of a rolling upgrade (seed
 * §20, docs/operations.md "Upgrades"). A file says so itself in a comment line, `-- postbox:expand <why>` or
 * `-- postbox:contract <why>`; otherwise its statements are read for what breaks old code: dropping or renaming
 * what it uses, changing a column's type, a new NOT NULL it does not write, a revoked privilege.
 */
export type UpgradeKind = 'expand' | 'contract';

export interface UpgradeVerdict {
  kind: UpgradeKind;
  /** Why: the file's own words, or each statement that makes it a contract. */
  reasons: string[];
}

const CONTRACT_STATEMENTS: ReadonlyArray<[RegExp, string]> = [
  [
    /\bDROP\s+(?:TABLE|VIEW|MATERIALIZED\s+VIEW|COLUMN|FUNCTION|PROCEDURE|TYPE|SCHEMA|SEQUENCE|TRIGGER)\b/i,
    'drops what old code may use',
  ],
  [/\bRENAME\b/i, 'renames what old code may use'],
  // COLUMN is optional in ALTER TABLE … ALTER [COLUMN] c [SET DATA] TYPE t.
  [/\bALTER\s+(?:COLUMN\s+)?(?!TABLE\b|TYPE\b|DOMAIN\b)\S+\s+(?:SET\s+DATA\s+)?TYPE\b/i, "changes a column's type"],
  [/\bDROP\s+DEFAULT\b/i, 'drops a default old writers may rely on'],
  [/\bSET\s+NOT\s+NULL\b/i, 'makes a column NOT NULL (old writers may leave it empty)'],
  [/\bREVOKE\b/i, 'revokes a privilege'],
];

const DECLARED = /^--\s*postbox:(expand|contract)\b\s*(.*)$/m;

/**
 * Verdicts of files shipped before the marker existed, whose statements read as a contract although old processes
 * go on working through them (their checksums are fixed: the text cannot change).
 */
const SHIPPED: Readonly<Record<number, UpgradeVerdict>> = {
  17: {
    kind: 'expand',
    reasons: [
      'online conversion: the renames and the view rebuild happen in one short transaction and leave every table and view under its old name',
    ],
  },
  20: { kind: 'expand', reasons: ['revokes EXECUTE only on the function it creates'] },
};

/** The verdict of one migration file of the `postbox` chain (version, text). */
export function upgradeKind(version: number, text: string, scope = 'postbox'): UpgradeVerdict {
  const shipped = scope === 'postbox' ? SHIPPED[version] : undefined;
  if (shipped) return shipped;
  const declared = DECLARED.exec(text);
  if (declared) return { kind: declared[1] as UpgradeKind, reasons: [declared[2]!.trim() || 'declared by the file'] };
  const code = statementsOnly(text);
  const reasons = CONTRACT_STATEMENTS.filter(([pattern]) => pattern.test(code)).map(([, why]) => why);
  if (addsRequiredColumn(code)) reasons.push('adds a NOT NULL column without a default (old writers leave it out)');
  return reasons.length > 0 ? { kind: 'contract', reasons } : { kind: 'expand', reasons: ['adds only'] };
}

/** An `ADD [COLUMN]` clause (not a constraint) that is NOT NULL and has no DEFAULT. */
function addsRequiredColumn(code: string): boolean {
  for (const m of code.matchAll(/\bADD\s+(?!CONSTRAINT\b|VALUE\b)(?:COLUMN\s+)?/gi)) {
    const clause = clauseAt(code, m.index + m[0].length);
    if (/\bNOT\s+NULL\b/i.test(clause) && !/\bDEFAULT\b|\bGENERATED\b/i.test(clause)) return true;
  }
  return false;
}

/** The text from `start` to the next comma or semicolon outside parentheses: `numeric(10, 2)` stays whole. */
function clauseAt(code: string, start: number): string {
  let depth = 0;
  for (let i = start; i < code.length; i++) {
    const c = code[i];
    if (c === '(') depth++;
    else if (c === ')') depth--;
    else if ((c === ',' || c === ';') && depth <= 0) return code.slice(start, i);
  }
  return code.slice(start);
}

/**
 * The statements a file runs: comments and function bodies (`AS $tag$ … $tag$`, run later and only when called)
 * left out; DO blocks stay, they run now.
 */
function statementsOnly(text: string): string {
  return text
    .replace(/\bAS\s+\$([A-Za-z_]*)\$[\s\S]*?\$\1\$/gi, 'AS ')
    .replace(/\/\*[\s\S]*?\*\//g, ' ')
    .replace(/--[^\n]*/g, ' ');
}
