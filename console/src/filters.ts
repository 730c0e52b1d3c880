// The runs table's filters as an AIP-160 expression (the registry's filtering.py grammar).

export interface Filters {
  state: string;
  runSet: string;
  label: string;
  after: string;
  before: string;
  q: string;
  orderBy: string;
  pageSize: string;
}

function quote(text: string): string {
  return `"${text.replace(/\\/g, "\\\\").replace(/"/g, '\\"')}"`;
}

function localToIso(value: string): string | null {
  if (!value) return null;
  const date = new Date(value);
  return Number.isNaN(date.getTime()) ? null : date.toISOString();
}

/** The filters as an AIP-160 expression (see the registry's filtering.py). */
export function buildFilter(f: Filters): string {
  const parts: string[] = [];
  if (f.state) parts.push(`state = ${f.state}`);
  if (f.runSet.trim()) parts.push(`runSet = ${quote(f.runSet.trim())}`);
  for (const term of f.label.split(",").map((t) => t.trim()).filter(Boolean)) {
    const eq = term.indexOf("=");
    if (eq < 0) parts.push(`labels:${term}`);
    else parts.push(`labels.${term.slice(0, eq).trim()} = ${quote(term.slice(eq + 1).trim())}`);
  }
  const after = localToIso(f.after);
  if (after) parts.push(`createTime >= ${quote(after)}`);
  const before = localToIso(f.before);
  if (before) parts.push(`createTime <= ${quote(before)}`);
  if (f.q.trim()) parts.push(`displayName:${quote(f.q.trim())}`);
  return parts.join(" AND ");
}
