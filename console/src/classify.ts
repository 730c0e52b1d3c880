// Which section of the metrics tab a metric belongs to, by its name.

export type Section = "quality" | "performance" | "system" | "other";

export const SECTIONS: [Section, string][] = [
  ["quality", "Model quality"],
  ["performance", "Model performance"],
  ["system", "System"],
  ["other", "Other"],
];

const SYSTEM_PREFIX = /^(host|accelerator|system|sys|device|gpu|tpu|node)[_./]/;
const PERFORMANCE =
  /(step_?time|throughput|tokens?_per_s|samples?_per_s|examples?_per_s|sequences?_per_s|per_sec|_per_second|mfu|tflops|flops|latency|goodput|data_wait|input_wait|checkpoint_time|compil)/;
const SYSTEM = /(cpu|memory|mem_|hbm|duty_cycle|network|net_|disk|temperature|power_|clock|nvlink|pcie|utiliz|bandwidth)/;
const QUALITY =
  /(loss|acc|perplexity|ppl|(^|[/_.])eval|grad(ient)?_?norm|learning_rate|(^|[/_.])lr$|bleu|rouge|(^|[/_.])f1|auc|precision|recall|reward|kl_|entropy|score|error_rate|wer)/;

/**
 * The metrics tab's order of names (within a section): case-insensitive, then by code point.
 * The same for every locale, and no collator to load: `localeCompare`'s was ~15 ms of a first
 * visit, before the first chart.
 */
export function compareNames(a: string, b: string): number {
  const x = a.toLowerCase();
  const y = b.toLowerCase();
  if (x !== y) return x < y ? -1 : 1;
  return a < b ? -1 : a > b ? 1 : 0;
}

export function classify(name: string): Section {
  const lower = name.toLowerCase();
  if (SYSTEM_PREFIX.test(lower)) return "system";
  if (PERFORMANCE.test(lower)) return "performance";
  if (SYSTEM.test(lower)) return "system";
  if (QUALITY.test(lower)) return "quality";
  return "other";
}
