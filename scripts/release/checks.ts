// What `npm run release` and `npm run release:version` check and change, as pure functions over the files' text, so the
// suite tests them without cutting a release.

export interface Manifest {
  name: string;
  version: string;
  private?: boolean;
  dependencies?: Record<string, string>;
  devDependencies?: Record<string, string>;
}

/** Problems with lockstep versions: one version everywhere, internal dependencies pinned to it exactly. */
export function versionProblems(manifests: Manifest[]): string[] {
  const problems: string[] = [];
  const versions = new Set(manifests.map((m) => m.version));
  if (versions.size !== 1)
    problems.push(`workspaces disagree on the version: ${manifests.map((m) => `${m.name}@${m.version}`).join(', ')}`);
  const internal = new Set(manifests.map((m) => m.name));
  for (const m of manifests)
    for (const [name, spec] of Object.entries({ ...m.dependencies, ...m.devDependencies }))
      if (internal.has(name) && spec !== m.version)
        problems.push(`${m.name} depends on ${name}@${spec}, not exactly ${m.version}`);
  return problems;
}

const SECTION = /^## \[(?<version>[^\]]+)\](?: - (?<date>\d{4}-\d{2}-\d{2}))?\s*$/;

/** The changelog's section for `version`: its date and entry lines; undefined when there is none. */
export function changelogSection(text: string, version: string): { date?: string; entries: string[] } | undefined {
  const lines = text.split('\n');
  const start = lines.findIndex((l) => SECTION.exec(l)?.groups?.version === version);
  if (start < 0) return undefined;
  const end = lines.findIndex((l, i) => i > start && SECTION.test(l));
  const body = lines.slice(start + 1, end < 0 ? undefined : end);
  const date = SECTION.exec(lines[start]!)?.groups?.date;
  return { ...(date ? { date } : {}), entries: body.filter((l) => /^- \S/.test(l)) };
}

/** Problems with the changelog for a release of `version`. */
export function changelogProblems(text: string, version: string): string[] {
  const section = changelogSection(text, version);
  if (!section)
    return [`CHANGELOG.md has no "## [${version}] - YYYY-MM-DD" section (npm run release:version -- ${version})`];
  const problems: string[] = [];
  if (!section.date) problems.push(`CHANGELOG.md's section ${version} has no date`);
  if (section.entries.length === 0) problems.push(`CHANGELOG.md's section ${version} lists no change`);
  return problems;
}

/** The changelog with its Unreleased entries moved under `## [version] - date`, and an empty Unreleased kept. */
export function releaseChangelog(text: string, version: string, date: string): string {
  if (changelogSection(text, version)) throw new Error(`CHANGELOG.md already has a section ${version}`);
  const unreleased = changelogSection(text, 'Unreleased');
  if (!unreleased || unreleased.entries.length === 0)
    throw new Error('CHANGELOG.md has nothing under "## [Unreleased]" to release');
  return text.replace(/^## \[Unreleased\]\s*$/m, `## [Unreleased]\n\n## [${version}] - ${date}`);
}

/** The manifest at `version`, its internal dependencies (names in `internal`) pinned to it. */
export function bumpManifest(manifest: Manifest, version: string, internal: Set<string>): Manifest {
  const pin = (deps?: Record<string, string>) =>
    deps && Object.fromEntries(Object.entries(deps).map(([n, s]) => [n, internal.has(n) ? version : s]));
  const next: Manifest = { ...manifest, version };
  if (manifest.dependencies) next.dependencies = pin(manifest.dependencies)!;
  if (manifest.devDependencies) next.devDependencies = pin(manifest.devDependencies)!;
  return next;
}

export const SEMVER = /^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$/;
