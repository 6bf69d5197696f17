import type { BenchOptions } from './options.ts';
import type { Report } from './report.ts';

/** What every scenario and baseline gets: the resolved options and the report it adds its figures to. */
export interface Bench {
  options: BenchOptions;
  report: Report;
}

/** A baseline, peer or scenario: measures, then writes its JSON under report.results and its rows. */
export type Step = (bench: Bench) => Promise<void>;
