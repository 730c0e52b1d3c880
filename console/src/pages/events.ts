// Events tab: a timeline (duty cycle or step time over time, events as spans coloured by
// severity), the list of events, and the selected event's detail with its analyzer reports.

import type uPlot from "uplot";

import { pathPart } from "../api";
import { type ChartLine, type LoadRequest, MetricChart } from "../chart";
import { formatDuration, formatJson, formatNumber, formatTime, secondsBetween } from "../format";
import { h, replace } from "../h";
import { runbookLink } from "../markdown";
import { replaceHash } from "../router";
import type { Scope } from "../scope";
import type { Session } from "../session";
import { eventResource, shareButton } from "../share";
import { Throttle } from "../throttle";
import type { Analysis, AnalyzerReport, DownsampleMetricResponse, MetricSummary, ProfilerSession, WorkloadEvent } from "../types";
import { empty, errorBox, facts, kv, loading, severityBadge } from "../ui";
import { eventDeliveries } from "./alerts";
import { logsAroundHref } from "./logs";
import { runPath, tabHref, type RunView } from "./run";

export const SEVERITY_COLORS: Record<string, string> = {
  INFO: "#2563eb",
  WARNING: "#d97706",
  CRITICAL: "#dc2626",
};

const TIMELINE_METRICS = ["duty_cycle", "step_time"];

function eventSpan(event: WorkloadEvent): [number, number] {
  const start = Date.parse(event.startTime) / 1000;
  const end = event.endTime ? Date.parse(event.endTime) / 1000 : Date.now() / 1000;
  return [start, Math.max(start, end)];
}

export function eventsTab(view: RunView, scope: Scope, query: URLSearchParams): HTMLElement {
  const api = view.session.api;
  let events: WorkloadEvent[] = [];
  let analyses = new Map<string, Analysis>();
  let sessions: ProfilerSession[] = [];
  let selected = query.get("event");
  let chart: MetricChart | null = null;
  let timelineMetric: string | null = null;

  const timeline = h("div", { class: "timeline" }, loading("loading timeline…"));
  const list = h("div", { class: "event-list-wrap" }, loading("loading events…"));
  const detail = h("div", { class: "event-detail-wrap" });
  const spans = h("div", { class: "event-spans" });

  function select(eventId: string | null): void {
    selected = eventId;
    replaceHash(tabHref(view, "events", eventId ? { event: eventId } : {}));
    renderList();
    renderDetail();
    chart?.redraw();
  }

  function drawSpans(u: uPlot): void {
    const ctx = u.ctx;
    const { left, top, width, height } = u.bbox;
    ctx.save();
    for (const event of events) {
      const [x0, x1] = eventSpan(event);
      const p0 = Math.max(left, u.valToPos(x0, "x", true));
      const p1 = Math.min(left + width, Math.max(u.valToPos(x1, "x", true), p0 + 2 * devicePixelRatio));
      if (p1 < left || p0 > left + width) continue;
      const color = SEVERITY_COLORS[event.severity] ?? "#6b7280";
      ctx.fillStyle = `${color}${event.eventId === selected ? "33" : "1a"}`;
      ctx.fillRect(p0, top, p1 - p0, height);
      ctx.fillStyle = color;
      ctx.fillRect(p0, top, p1 - p0, 3 * devicePixelRatio);
    }
    ctx.restore();
  }

  function placeSpans(u: uPlot): void {
    if (spans.parentElement !== u.over) u.over.append(spans);
    const width = u.over.clientWidth;
    replace(
      spans,
      events.map((event) => {
        const [x0, x1] = eventSpan(event);
        const left = Math.max(0, u.valToPos(x0, "x"));
        const right = Math.min(width, Math.max(u.valToPos(x1, "x"), left + 6));
        if (right < 0 || left > width) return null;
        return h("button", {
          class: `event-span${event.eventId === selected ? " selected" : ""}`,
          testid: "event-span",
          dataset: { eventId: event.eventId },
          title: `${event.severity} ${event.type}: ${event.displayName}`,
          style: `left:${left}px;width:${right - left}px;background:${SEVERITY_COLORS[event.severity] ?? "#6b7280"}`,
          onclick: (e) => {
            e.stopPropagation();
            select(event.eventId);
          },
        });
      }),
    );
  }

  function extent(): [number, number] | null {
    const run = view.run();
    const starts = events.map((e) => eventSpan(e)[0]);
    const ends = events.map((e) => eventSpan(e)[1]);
    if (run) {
      starts.push(Date.parse(run.createTime) / 1000);
      ends.push(run.endTime ? Date.parse(run.endTime) / 1000 : Date.now() / 1000);
    }
    return starts.length ? [Math.min(...starts), Math.max(...ends)] : null;
  }

  async function setUpTimeline(): Promise<void> {
    try {
      const answer = await api.get<{ metrics: MetricSummary[] }>(runPath(view.runId, "/metrics"), {}, scope.signal);
      const names = new Set(answer.metrics.map((m) => m.name));
      timelineMetric = TIMELINE_METRICS.find((name) => names.has(name)) ?? null;
    } catch (error) {
      if (scope.disposed) return;
      replace(timeline, errorBox(error));
      return;
    }
    if (!timelineMetric) {
      renderStrip();
      return;
    }
    const metric = timelineMetric;
    chart = new MetricChart({
      metric,
      title: `${metric} over time · events`,
      xMode: "time",
      lazy: false,
      height: 200,
      xExtent: extent,
      drawOverlay: drawSpans,
      onDraw: placeSpans,
      loader: async (request: LoadRequest): Promise<ChartLine[]> => {
        const data = await api.get<DownsampleMetricResponse>(
          runPath(view.runId, `/metrics/${pathPart(metric)}`),
          { buckets: request.buckets, groupBy: "none", withTimes: "true", startStep: request.range?.startStep, endStep: request.range?.endStep },
          request.signal,
        );
        return data.series.map((s) => ({ label: metric, color: "#475569", buckets: s.buckets }));
      },
    });
    scope.add(() => chart?.dispose());
    replace(timeline, chart.el);
  }

  /** Without a duty cycle or step time: the events on a bare time strip. */
  function renderStrip(): void {
    const range = extent();
    if (!range || events.length === 0) {
      replace(timeline, h("p", { class: "muted" }, "No duty_cycle or step_time metric to draw the timeline on."));
      return;
    }
    const [from, to] = range;
    const span = Math.max(1, to - from);
    replace(
      timeline,
      h(
        "div",
        { class: "strip" },
        events.map((event) => {
          const [x0, x1] = eventSpan(event);
          const left = ((x0 - from) / span) * 100;
          const width = Math.max(0.6, ((x1 - x0) / span) * 100);
          return h("button", {
            class: `event-span${event.eventId === selected ? " selected" : ""}`,
            testid: "event-span",
            dataset: { eventId: event.eventId },
            title: `${event.severity} ${event.type}: ${event.displayName}`,
            style: `left:${left}%;width:${width}%;background:${SEVERITY_COLORS[event.severity] ?? "#6b7280"}`,
            onclick: () => select(event.eventId),
          });
        }),
      ),
      h("div", { class: "strip-axis muted" }, h("span", {}, formatTime(new Date(from * 1000).toISOString())), h("span", {}, formatTime(new Date(to * 1000).toISOString()))),
    );
  }

  function renderList(): void {
    if (events.length === 0) {
      replace(list, empty("No events: nothing the monitors saw hurt this run."));
      return;
    }
    replace(
      list,
      h(
        "table",
        { class: "table events-table", testid: "events-table" },
        h(
          "thead",
          {},
          h("tr", {}, h("th", {}, "Severity"), h("th", {}, "Event"), h("th", {}, "State"), h("th", {}, "Started"), h("th", {}, "Duration"), h("th", {}, "Hosts"), h("th", { class: "num" }, "Time lost")),
        ),
        h(
          "tbody",
          {},
          events.map((event) =>
            h(
              "tr",
              {
                class: `clickable${event.eventId === selected ? " selected" : ""}`,
                testid: "event-marker",
                dataset: { eventId: event.eventId, severity: event.severity, state: event.state },
                onclick: () => select(event.eventId),
              },
              h("td", {}, h("i", { class: "swatch", style: `background:${SEVERITY_COLORS[event.severity] ?? "#6b7280"}` }), severityBadge(event.severity)),
              h("td", {}, h("div", { class: "event-type" }, event.type), h("div", { class: "sub" }, event.displayName)),
              h("td", {}, h("span", { class: `badge event-${event.state.toLowerCase()}` }, event.state)),
              h("td", {}, formatTime(event.startTime)),
              h("td", {}, formatDuration(secondsBetween(event.startTime, event.endTime)), event.endTime ? "" : h("span", { class: "sub" }, "open")),
              h("td", {}, event.hosts.join(", ") || "—"),
              h("td", { class: "num" }, formatDuration(timeLost(event, analyses.get(event.eventId)))),
            ),
          ),
        ),
      ),
    );
  }

  let notifications: { eventId: string; el: HTMLElement } | null = null;
  function notified(eventId: string): HTMLElement {
    if (notifications?.eventId !== eventId) notifications = { eventId, el: eventDeliveries(view.session, scope, eventId) };
    return notifications.el;
  }

  function renderDetail(): void {
    const event = events.find((e) => e.eventId === selected);
    if (!event) {
      replace(detail, events.length ? h("p", { class: "muted" }, "Pick an event to see its evidence and analysis.") : null);
      return;
    }
    replace(
      detail,
      eventDetail(view.session, event, analyses.get(event.eventId) ?? null, { sessions, profileHref: (session) => tabHref(view, "profiles", { session }) }),
      // The run's lines from a minute before the event, in the logs panel beside this tab.
      h("p", {}, h("a", { href: logsAroundHref(view.base, event.startTime, event.eventId), testid: "event-logs-link" }, "Log lines around this event")),
      // Who was told, and how that went (the notifier's delivery history): read once per
      // pick, not on every refresh of the events.
      notified(event.eventId),
    );
  }

  async function load(): Promise<void> {
    const [eventsAnswer, analysesAnswer, sessionsAnswer] = await Promise.allSettled([
      api.get<{ events: WorkloadEvent[] }>(runPath(view.runId, "/monitoredEvents"), { pageSize: 200 }, scope.signal),
      api.get<{ analyses: Analysis[] }>(runPath(view.runId, "/analyses"), {}, scope.signal),
      api.get<{ profilerSessions: ProfilerSession[] }>(runPath(view.runId, "/profilerSessions"), { pageSize: 100 }, scope.signal),
    ]);
    if (scope.disposed) return;
    if (eventsAnswer.status === "rejected") {
      replace(list, errorBox(eventsAnswer.reason));
      return;
    }
    events = eventsAnswer.value.events;
    if (analysesAnswer.status === "fulfilled") analyses = new Map(analysesAnswer.value.analyses.map((a) => [a.eventId, a]));
    if (sessionsAnswer.status === "fulfilled") sessions = sessionsAnswer.value.profilerSessions;
    renderList();
    renderDetail();
    if (chart) chart.redraw();
    else if (timelineMetric === null && !timeline.querySelector(".loading-text")) renderStrip();
  }

  const refresher = new Throttle(load, 1000);
  scope.add(() => refresher.stop());
  void (async () => {
    await load();
    await setUpTimeline();
  })();
  view.onUpdate(scope, (update) => {
    if (!update || update.kind === "events" || update.kind === "analyses" || update.kind === "profiles") refresher.trigger();
    if (!update || (update.kind === "metrics" && timelineMetric && (update.metrics ?? []).includes(timelineMetric))) chart?.refresh();
  });

  return h("div", { class: "events-tab" }, h("section", { class: "card" }, timeline), list, detail);
}

function timeLost(event: WorkloadEvent, analysis: Analysis | undefined): number {
  return Math.max(event.timeLostSeconds, analysis?.timeLostSeconds ?? 0);
}

function isUrl(text: string): boolean {
  return /^https?:\/\//.test(text);
}

export interface DetailOptions {
  sessions?: ProfilerSession[];
  /** Where a linked profile session opens (none in a share view of the event alone). */
  profileHref?: (sessionId: string) => string;
}

/** One event in full: facts, evidence, and the analyzers' reports with what to do. */
export function eventDetail(session: Session, event: WorkloadEvent, analysis: Analysis | null, options: DetailOptions = {}): HTMLElement {
  const reports = [...(event.analyzerReports.length ? event.analyzerReports : (analysis?.reports ?? []))];
  const detected = reports.filter((r) => r.detectionState === "DETECTED").sort((a, b) => b.score - a.score);
  const others = reports.filter((r) => r.detectionState !== "DETECTED");
  const probable = analysis?.probableCause || detected[0]?.analyzer || "";
  const evidence = event.evidence;
  const linked = (options.sessions ?? []).filter((s) => s.monitoredEvents.includes(event.eventId));
  const ruleFacts = Object.entries(evidence.facts ?? {});
  const thresholds = Object.entries(event.thresholds ?? {});
  return h(
    "section",
    { class: "card event-detail", testid: "event-detail", dataset: { eventId: event.eventId } },
    h(
      "div",
      { class: "event-detail-head" },
      severityBadge(event.severity),
      h("h3", {}, event.type),
      h("span", { class: `badge event-${event.state.toLowerCase()}` }, event.state),
      h("span", { class: "spacer" }),
      shareButton(session, eventResource(event.runId, event.eventId), "event"),
    ),
    h("p", { class: "event-title" }, event.displayName),
    facts([
      ["Type", event.type],
      ["Severity", event.severity],
      ["State", event.state],
      ["Started", formatTime(event.startTime)],
      ["Ended", event.endTime ? formatTime(event.endTime) : "open"],
      ["Duration", formatDuration(secondsBetween(event.startTime, event.endTime))],
      ["Hosts", event.hosts.join(", ") || "—"],
      ["Time lost", h("span", { testid: "time-lost" }, formatDuration(timeLost(event, analysis ?? undefined)))],
      ["Rule", h("code", {}, event.rule)],
      ["Probable cause", h("b", { testid: "probable-cause" }, probable || "none found")],
    ]),
    h("h4", {}, "Evidence"),
    h(
      "div",
      { class: "evidence", testid: "evidence" },
      kv([
        ["Signal", evidence.metric ? `${evidence.metric}${evidence.host ? ` on ${evidence.host}` : ""}` : "—"],
        ["First bad", evidence.firstBadStep === null ? "—" : `step ${evidence.firstBadStep}: ${formatNumber(evidence.firstBadValue)}`],
        ["Last good", evidence.lastGoodStep === null ? "—" : `step ${evidence.lastGoodStep}: ${formatNumber(evidence.lastGoodValue)}`],
      ]),
      evidence.windows.length
        ? h(
            "table",
            { class: "table compact" },
            h("thead", {}, h("tr", {}, h("th", {}, "Window"), h("th", {}, "Host"), h("th", {}, "Steps"), h("th", { class: "num" }, "Observed"), h("th", { class: "num" }, "Baseline"), h("th", { class: "num" }, "Points"))),
            h(
              "tbody",
              {},
              evidence.windows.map((w) =>
                h(
                  "tr",
                  {},
                  h("td", {}, w.metric),
                  h("td", {}, w.host || "all"),
                  h("td", {}, w.startStep === null ? "—" : `${w.startStep}–${w.endStep ?? ""}`),
                  h("td", { class: "num" }, formatNumber(w.observed)),
                  h("td", { class: "num" }, formatNumber(w.baseline)),
                  h("td", { class: "num" }, String(w.count)),
                ),
              ),
            ),
          )
        : null,
      ruleFacts.length || thresholds.length
        ? h(
            "div",
            { class: "facts-list" },
            ruleFacts.map(([key, value]) => h("span", { class: "chip" }, `${key}: ${formatJson(value)}`)),
            thresholds.map(([key, value]) => h("span", { class: "chip threshold" }, `${key} ≥ ${formatNumber(value)}`)),
          )
        : null,
    ),
    linked.length
      ? h(
          "p",
          { class: "linked-profiles" },
          "Profiles captured for it: ",
          linked.map((s) => (options.profileHref ? h("a", { href: options.profileHref(s.sessionId), class: "chip" }, s.sessionId) : h("span", { class: "chip" }, s.sessionId))),
        )
      : null,
    h("h4", {}, `Analysis${reports.length ? ` · ${detected.length} of ${reports.length} analyzers found a cause` : ""}`),
    reports.length === 0 ? h("p", { class: "muted" }, analysis ? "No reports." : "Not analysed yet.") : null,
    h("div", { class: "reports" }, detected.map((r) => reportCard(r))),
    others.length
      ? h("details", { class: "other-reports" }, h("summary", {}, `${others.length} analyzer(s) found nothing`), others.map((r) => reportCard(r)))
      : null,
  );
}

/**
 * A recommended action's runbook: a URL opens as it is (the analyzer's
 * MLDIAG_ANALYZER_RUNBOOK_BASE_URL made it one); a path naming a runbook file
 * (`docs/runbooks/hang.md`, the default) opens the console's page of it; anything else is shown.
 */
function runbookAnchor(reference: string): HTMLElement | null {
  if (!reference) return null;
  if (isUrl(reference)) return h("a", { class: "runbook", testid: "runbook-link", href: reference, target: "_blank", rel: "noopener noreferrer" }, " runbook ↗");
  const route = runbookLink(reference.split("/").pop() ?? "");
  if (route) return h("a", { class: "runbook", testid: "runbook-link", href: route, target: "_blank" }, " runbook ↗");
  return h("span", { class: "runbook muted" }, " runbook: ", h("code", {}, reference));
}

function reportCard(report: AnalyzerReport): HTMLElement {
  const found = report.detectionState === "DETECTED";
  return h(
    "article",
    { class: `report${found ? " detected" : ""}`, testid: "analyzer-report", dataset: { analyzer: report.analyzer, detection: report.detectionState } },
    h(
      "header",
      {},
      h("b", { class: "analyzer" }, report.analyzer),
      h("span", { class: "chip layer" }, report.layer),
      h("span", { class: `badge ${found ? "detected" : "not-detected"}` }, report.detectionState),
      h("span", { class: "spacer" }),
      h("span", { class: "score", title: "How probable this cause is" }, h("span", { class: "meter" }, h("i", { style: `width:${(report.score * 100).toFixed(0)}%` })), report.score.toFixed(2)),
    ),
    h("p", {}, report.details),
    report.hosts.length ? h("p", { class: "muted" }, `Hosts: ${report.hosts.join(", ")}`) : null,
    report.evidence.length ? h("ul", { class: "report-evidence" }, report.evidence.map((e) => h("li", {}, e))) : null,
    report.recommendedActions.length
      ? h(
          "ol",
          { class: "actions" },
          report.recommendedActions.map((action) =>
            h(
              "li",
              { testid: "recommended-action" },
              action.description,
              runbookAnchor(action.documentationUrl),
            ),
          ),
        )
      : null,
  );
}
