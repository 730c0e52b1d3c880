// A run's log lines, beside its events: a grep box, host/stream/severity selects, and a follow
// toggle while the run is active (asks again with the cursor every 2 s). Opened from an event
// (`?around=<event start>`), it starts a minute before the event.

import { pathPart } from "../api";
import { h, replace } from "../h";
import type { Scope } from "../scope";
import type { ListLogsResponse, LogEntry } from "../types";
import { errorBox } from "../ui";
import type { RunView } from "./run";

/** Lines kept on screen; older ones drop off the top while following. */
export const MAX_LINES = 5000;
const PAGE_SIZE = 1000;
const FOLLOW_MS = 2000;
const STREAMS = ["", "STDOUT", "STDERR", "OTLP", "SYSTEM"];
const SEVERITIES = ["", "INFO", "WARNING", "ERROR"];

export interface LogFilters {
  grep: string;
  host: string;
  stream: string;
  minSeverity: string;
  since: string;
}

/** When lines around an event start: a minute before it (`around` is its start time). */
export function sinceAround(around: string | null): string {
  if (!around) return "";
  const start = Date.parse(around);
  return Number.isNaN(start) ? "" : new Date(start - 60_000).toISOString();
}

/** The API's query for these filters and cursor (empty ones left out). */
export function logsQuery(filters: LogFilters, pageToken: string): Record<string, string> {
  const query: Record<string, string> = { pageSize: String(PAGE_SIZE) };
  for (const [key, value] of Object.entries({ ...filters, pageToken })) if (value) query[key] = value;
  return query;
}

/** The colour a line of this severity is shown in (none for plain lines). */
export function severityColour(severity: string): string {
  if (severity === "ERROR" || severity === "CRITICAL") return "var(--bad)";
  if (severity === "WARNING") return "var(--warn)";
  if (severity === "DEBUG") return "#64748b";
  return "";
}

/** A line as shown: `TIME HOST STREAM  text`. */
export function lineText(entry: LogEntry): string {
  return `${entry.time} ${entry.host || "-"} ${entry.stream.toLowerCase()}  ${entry.text}`;
}

/** The link that opens a run's events (on `eventId`, when given) with its lines from a
 *  minute before `startTime`. */
export function logsAroundHref(base: string, startTime: string, eventId?: string): string {
  const query = eventId ? { event: eventId, around: startTime } : { around: startTime };
  return `${base}/events?${new URLSearchParams(query).toString()}`;
}

function select(testid: string, title: string, values: string[], label: (value: string) => string): HTMLSelectElement {
  return h(
    "select",
    { testid, title, name: testid },
    values.map((value) => h("option", { value }, label(value))),
  );
}

export function logsPanel(view: RunView, scope: Scope, query: URLSearchParams): HTMLElement {
  const filters: LogFilters = { grep: "", host: "", stream: "", minSeverity: "", since: sinceAround(query.get("around")) };
  const hosts = new Set<string>();
  let token = "";
  let reading: Scope | null = null;
  let busy: Scope | null = null; // the scope whose read is running: one at a time

  const grep = h("input", { type: "search", testid: "logs-grep", placeholder: "grep (regular expression)", name: "grep" });
  const hostSelect = select("logs-host", "Host", [""], () => "all hosts");
  const streamSelect = select("logs-stream", "Stream", STREAMS, (v) => (v ? v.toLowerCase() : "all streams"));
  const severitySelect = select("logs-severity", "Severity", SEVERITIES, (v) => (v ? `${v.toLowerCase()} and worse` : "any severity"));
  const follow = h("input", { type: "checkbox", testid: "logs-follow", checked: true });
  const status = h("span", { class: "muted log-status", testid: "logs-status" });
  const lines = h("div", { class: "log-view", testid: "logs-lines" });
  const more = h("button", { type: "button", testid: "logs-more", style: "display:none" }, "more");

  function active(): boolean {
    return view.run()?.endTime == null;
  }

  function add(entries: LogEntry[]): void {
    const atBottom = lines.scrollTop + lines.clientHeight >= lines.scrollHeight - 24;
    for (const entry of entries) {
      const colour = severityColour(entry.severity);
      lines.append(h("div", { class: "log-line", style: colour ? `color:${colour}` : "", dataset: { severity: entry.severity } }, lineText(entry)));
      if (!hosts.has(entry.host)) {
        hosts.add(entry.host);
        hostSelect.append(h("option", { value: entry.host }, entry.host || "(no host)"));
      }
    }
    while (lines.childElementCount > MAX_LINES) lines.firstElementChild?.remove();
    lines.classList.toggle("blank", lines.childElementCount === 0);
    if (atBottom) lines.scrollTop = lines.scrollHeight;
  }

  async function page(own: Scope): Promise<ListLogsResponse> {
    return view.session.api.get<ListLogsResponse>(`/v1/machineLearningRuns/${pathPart(view.runId)}/logs`, logsQuery(filters, token), own.signal);
  }

  function sleep(ms: number, signal: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      signal.addEventListener("abort", () => (clearTimeout(timer), resolve()), { once: true });
    });
  }

  /** Read pages until caught up (or a full screen), then follow while asked to. */
  async function read(own: Scope, untilFull: boolean): Promise<void> {
    if (busy === own) return;
    busy = own;
    status.textContent = "loading…";
    try {
      for (;;) {
        const answer = await page(own);
        if (own.disposed) return;
        const entries = answer.entries ?? [];
        add(entries);
        const next = answer.nextPageToken ?? "";
        const caughtUp = !next || (entries.length === 0 && next === token);
        token = next;
        more.style.display = untilFull && entries.length === PAGE_SIZE ? "" : "none";
        if (untilFull && entries.length === PAGE_SIZE) {
          status.textContent = `${lines.childElementCount} lines`;
          return; // a screenful: the reader asks for more
        }
        if (!next) {
          status.textContent = `${lines.childElementCount} lines; the run has ended`;
          return;
        }
        if (caughtUp) {
          if (!follow.checked || !active()) {
            status.textContent = `${lines.childElementCount} lines`;
            return;
          }
          status.textContent = `● following (${lines.childElementCount} lines)`;
          await sleep(FOLLOW_MS, own.signal);
        }
        if (own.disposed) return;
      }
    } catch (error) {
      if (!own.disposed) replace(status, errorBox(error));
    } finally {
      if (busy === own) busy = null;
    }
  }

  function restart(): void {
    reading?.dispose();
    reading = scope.child();
    token = "";
    replace(lines);
    lines.classList.add("blank");
    void read(reading, true);
  }

  grep.addEventListener("keydown", (event) => {
    if (event.key === "Enter") {
      filters.grep = grep.value;
      restart();
    }
  });
  for (const [control, key] of [
    [hostSelect, "host"],
    [streamSelect, "stream"],
    [severitySelect, "minSeverity"],
  ] as const) {
    control.addEventListener("change", () => {
      filters[key] = control.value;
      restart();
    });
  }
  follow.addEventListener("change", () => {
    if (follow.checked && reading) void read(reading, false);
  });
  more.addEventListener("click", () => {
    if (reading) void read(reading, true);
  });

  restart();
  return h(
    "section",
    { class: "card logs-panel", testid: "logs-panel" },
    h("h3", {}, "Logs", filters.since ? h("span", { class: "muted" }, ` from ${filters.since}`) : null),
    h("div", { class: "toolbar" }, grep, hostSelect, streamSelect, severitySelect, h("label", {}, follow, " follow"), status),
    lines,
    more,
  );
}
