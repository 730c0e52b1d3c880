// A small markdown renderer for the runbooks (docs/runbooks/*.md, served by the registry): the
// subset they use — headings, paragraphs, lists, tables, fenced code, quotes; inline code,
// bold, italics and links. Everything is HTML-escaped first, so the output holds only the tags
// written here. A link to another runbook (`hang.md`) opens its console page; other relative
// links (into docs/ outside the runbooks) stay as text: the console does not serve them.

export function escapeHtml(text: string): string {
  return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}

/** The console's route of a runbook link (`hang.md`, `hang.md#x`), or null for any other. */
export function runbookLink(target: string): string | null {
  const match = /^([A-Za-z0-9][A-Za-z0-9_-]*)\.md(?:#.*)?$/.exec(target);
  return match ? `#/runbooks/${match[1]}` : null;
}

function inline(text: string): string {
  // Code spans first, held aside so nothing inside them is read as markup.
  const codes: string[] = [];
  let out = text.replace(/`([^`]+)`/g, (_m, code: string) => {
    codes.push(`<code>${escapeHtml(code)}</code>`);
    return `\u0000${codes.length - 1}\u0000`;
  });
  out = escapeHtml(out);
  out = out.replace(/\[([^\]]+)\]\(([^)\s]+)\)/g, (_m, label: string, href: string) => {
    const raw = href.replace(/&amp;/g, "&");
    const route = runbookLink(raw);
    if (route) return `<a href="${route}">${label}</a>`;
    if (/^https?:\/\//.test(raw)) return `<a href="${escapeHtml(raw)}" target="_blank" rel="noopener noreferrer">${label}</a>`;
    return label;
  });
  out = out.replace(/\*\*([^*]+)\*\*/g, "<strong>$1</strong>");
  out = out.replace(/(^|[^\w*])\*([^*\s][^*]*)\*(?!\w)/g, "$1<em>$2</em>");
  out = out.replace(/(^|[^\w])_([^_\s][^_]*)_(?!\w)/g, "$1<em>$2</em>");
  return out.replace(/\u0000(\d+)\u0000/g, (_m, i: string) => codes[Number(i)] ?? "");
}

function cells(row: string): string[] {
  return row.trim().replace(/^\|/, "").replace(/\|$/, "").split("|").map((cell) => cell.trim());
}

const LIST_ITEM = /^(\s*)([-*+]|\d+[.)])\s+(.*)$/;

/** The markdown as HTML (block elements, no wrapper). */
export function renderMarkdown(markdown: string): string {
  const lines = markdown.replace(/\r\n?/g, "\n").split("\n");
  const html: string[] = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i] ?? "";
    if (line.trim() === "") {
      i++;
      continue;
    }
    const fence = /^(```|~~~)/.exec(line);
    if (fence) {
      const body: string[] = [];
      for (i++; i < lines.length && !(lines[i] ?? "").startsWith(fence[1] ?? "```"); i++) body.push(lines[i] ?? "");
      i++;
      html.push(`<pre><code>${escapeHtml(body.join("\n"))}</code></pre>`);
      continue;
    }
    const heading = /^(#{1,6})\s+(.*?)\s*#*$/.exec(line);
    if (heading) {
      const level = heading[1]?.length ?? 1;
      html.push(`<h${level}>${inline(heading[2] ?? "")}</h${level}>`);
      i++;
      continue;
    }
    if (line.trimStart().startsWith("|") && /^\s*\|?\s*:?-+/.test(lines[i + 1] ?? "")) {
      const head = cells(line);
      const rows: string[][] = [];
      for (i += 2; i < lines.length && (lines[i] ?? "").trimStart().startsWith("|"); i++) rows.push(cells(lines[i] ?? ""));
      html.push(
        `<table><thead><tr>${head.map((c) => `<th>${inline(c)}</th>`).join("")}</tr></thead><tbody>` +
          rows.map((row) => `<tr>${row.map((c) => `<td>${inline(c)}</td>`).join("")}</tr>`).join("") +
          "</tbody></table>",
      );
      continue;
    }
    if (line.startsWith(">")) {
      const quoted: string[] = [];
      for (; i < lines.length && (lines[i] ?? "").startsWith(">"); i++) quoted.push((lines[i] ?? "").replace(/^>\s?/, ""));
      html.push(`<blockquote>${renderMarkdown(quoted.join("\n"))}</blockquote>`);
      continue;
    }
    const item = LIST_ITEM.exec(line);
    if (item) {
      const ordered = /\d/.test(item[2] ?? "");
      const items: string[] = [];
      while (i < lines.length) {
        const next = LIST_ITEM.exec(lines[i] ?? "");
        if (next) {
          items.push(next[3] ?? "");
        } else if (/^\s+\S/.test(lines[i] ?? "") && items.length) {
          items[items.length - 1] += ` ${(lines[i] ?? "").trim()}`; // a wrapped item
        } else break;
        i++;
      }
      const tag = ordered ? "ol" : "ul";
      html.push(`<${tag}>${items.map((text) => `<li>${inline(text)}</li>`).join("")}</${tag}>`);
      continue;
    }
    const paragraph: string[] = [];
    for (; i < lines.length; i++) {
      const next = lines[i] ?? "";
      if (next.trim() === "" || /^(#{1,6}\s|```|~~~|>|\s*\|)/.test(next) || (paragraph.length && LIST_ITEM.test(next))) break;
      paragraph.push(next.trim());
    }
    html.push(`<p>${inline(paragraph.join(" "))}</p>`);
  }
  return html.join("\n");
}

/** A runbook's title: its first heading's text, without the "Runbook: " prefix the files share. */
export function markdownTitle(markdown: string): string {
  const heading = /^#\s+(.+)$/m.exec(markdown);
  return (heading?.[1] ?? "").replace(/^Runbook:\s*/i, "").trim();
}
