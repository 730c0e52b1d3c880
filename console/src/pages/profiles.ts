// Profiles tab: the run's profiler sessions (open in XProf, share), and on-demand captures
// followed through their operation.

import { ApiError } from "../api";
import { formatBytes, formatDuration, formatTime } from "../format";
import { h, replace } from "../h";
import type { Scope } from "../scope";
import { sessionResource, shareButton } from "../share";
import { Throttle } from "../throttle";
import type { Operation, ProfilerSession, ProfilerTarget } from "../types";
import { empty, errorBox, facts, loading, phaseBadge } from "../ui";
import { runPath, tabHref, type RunView } from "./run";

const KIND_LABELS: Record<string, string> = {
  PROGRAMMATIC: "programmatic (SDK)",
  ON_DEMAND: "on demand",
  SNAPSHOT: "snapshot (event)",
};

export function profilesTab(view: RunView, scope: Scope, query: URLSearchParams): HTMLElement {
  const api = view.session.api;
  const table = h("div", {}, loading("loading sessions…"));
  const captureSlot = h("div", { class: "capture" });
  let sessions: ProfilerSession[] = [];
  let expanded = query.get("session");

  async function load(): Promise<void> {
    try {
      const answer = await api.get<{ profilerSessions: ProfilerSession[] }>(runPath(view.runId, "/profilerSessions"), { pageSize: 100 }, scope.signal);
      sessions = answer.profilerSessions;
      render();
    } catch (error) {
      if (!scope.disposed) replace(table, errorBox(error));
    }
  }

  function render(): void {
    if (sessions.length === 0) {
      replace(table, empty("No profiles yet. Trace with mldiag.xprof() in the workload, or capture one here."));
      return;
    }
    replace(
      table,
      h(
        "div",
        { class: "table-wrap" },
        h(
        "table",
        { class: "table profiles-table", testid: "profiles-table" },
        h(
          "thead",
          {},
          h("tr", {}, h("th", {}, "Session"), h("th", {}, "Phase"), h("th", {}, "Trigger"), h("th", {}, "Hosts"), h("th", {}, "Duration"), h("th", {}, "Created"), h("th", {}, "Event"), h("th", {})),
        ),
        h(
          "tbody",
          {},
          sessions.flatMap((s) => {
            const row = h(
              "tr",
              {
                class: `clickable${s.sessionId === expanded ? " selected" : ""}`,
                dataset: { sessionId: s.sessionId, phase: s.phase },
                onclick: (event) => {
                  if ((event.target as HTMLElement).closest("a, button")) return;
                  expanded = expanded === s.sessionId ? null : s.sessionId;
                  render();
                },
              },
              h("td", {}, h("code", {}, s.sessionId)),
              h("td", {}, phaseBadge(s.phase)),
              h("td", {}, KIND_LABELS[s.kind] ?? s.kind, s.autoCaptured ? h("span", { class: "sub" }, "auto") : null),
              h("td", { title: s.hosts.map((host) => `${host.host}: ${host.phase}`).join("\n") }, hostsSummary(s)),
              h("td", {}, formatDuration(s.durationSeconds)),
              h("td", {}, formatTime(s.createTime)),
              h(
                "td",
                {},
                s.monitoredEvents.map((id) => h("a", { href: tabHref(view, "events", { event: id }), title: id }, id.slice(0, 8))),
              ),
              h(
                "td",
                { class: "actions" },
                s.dashboardUri && !view.session.shared ? xprofLink(s.dashboardUri, view.session.api.token) : null,
                shareButton(view.session, sessionResource(s.runId, s.sessionId), "profile session"),
              ),
            );
            return s.sessionId === expanded
              ? [row, h("tr", { class: "expanded" }, h("td", { colSpan: 8 }, sessionDetail(s)))]
              : [row];
          }),
        ),
        ),
      ),
    );
  }

  async function setUpCapture(): Promise<void> {
    if (view.session.shared || !view.session.can("profilerSessions.create")) return;
    let targets: ProfilerTarget[];
    try {
      const answer = await api.get<{ profilerTargets: ProfilerTarget[] }>(runPath(view.runId, "/profilerTargets"), {}, scope.signal);
      targets = answer.profilerTargets;
    } catch {
      return; // no targets to show: no capture
    }
    if (targets.length === 0 || scope.disposed) return;
    replace(captureSlot, captureControls(view, scope, targets, () => load()));
  }

  const refresher = new Throttle(load, 1000);
  scope.add(() => refresher.stop());
  refresher.trigger();
  void setUpCapture();
  view.onUpdate(scope, (update) => {
    if (!update || update.kind === "profiles") refresher.trigger();
  });

  return h("div", { class: "profiles-tab" }, captureSlot, table);
}

function hostsSummary(s: ProfilerSession): string {
  const failed = s.hosts.filter((host) => host.phase === "FAILED").length;
  const names = s.hosts.map((host) => host.host);
  const text = names.length <= 3 ? names.join(", ") : `${names.slice(0, 2).join(", ")} +${names.length - 2}`;
  return failed ? `${text} (${failed} failed)` : text || "—";
}

function captureControls(view: RunView, scope: Scope, targets: ProfilerTarget[], refresh: () => Promise<void>): HTMLElement {
  const duration = h("input", { type: "number", min: "100", max: "300000", step: "100", value: "2000", testid: "capture-duration", name: "durationMs" });
  const hosts = h("input", {
    type: "text",
    testid: "capture-hosts",
    name: "hosts",
    placeholder: `all: ${targets.map((t) => t.host).join(", ")}`,
  });
  const submit = h("button", { class: "button primary", type: "submit", testid: "capture-submit" }, "Start capture");
  const status = h("div", { class: "capture-status", testid: "capture-status" });
  const form = h(
    "form",
    {
      class: "capture-form",
      testid: "capture-form",
      onsubmit: (event) => {
        event.preventDefault();
        const ms = Number(duration.value);
        if (!Number.isFinite(ms) || ms <= 0) {
          duration.focus();
          return;
        }
        const chosen = hosts.value.split(/[\s,]+/).filter(Boolean);
        submit.disabled = true;
        void capture(view, scope, ms / 1000, chosen, status, refresh).finally(() => (submit.disabled = false));
      },
    },
    h("label", { class: "inline" }, "Duration (ms) ", duration),
    h("label", { class: "inline" }, "Hosts ", hosts),
    submit,
    h("button", { class: "button", type: "button", onclick: () => (form.hidden = true) }, "Cancel"),
  );
  form.hidden = true;
  const button = h(
    "button",
    {
      class: "button primary",
      testid: "capture-button",
      onclick: () => {
        form.hidden = !form.hidden;
        if (!form.hidden) duration.focus();
      },
    },
    "Capture profile",
  );
  return h(
    "div",
    { class: "toolbar capture-bar" },
    button,
    h("span", { class: "muted" }, `${targets.length} profiler target(s)`),
    form,
    status,
  );
}

function setStatus(el: HTMLElement, state: "PENDING" | "RUNNING" | "SUCCEEDED" | "FAILED", text: string): void {
  el.dataset["state"] = state;
  replace(el, h("span", { class: `badge op-${state.toLowerCase()}` }, state), " ", text);
}

async function capture(
  view: RunView,
  scope: Scope,
  durationSeconds: number,
  targets: string[],
  status: HTMLElement,
  refresh: () => Promise<void>,
): Promise<void> {
  const api = view.session.api;
  setStatus(status, "PENDING", "asking for a capture…");
  let operation: Operation;
  try {
    operation = await api.post<Operation>(runPath(view.runId, "/profilerSessions:capture"), { durationSeconds, targets }, scope.signal);
  } catch (error) {
    if (scope.disposed) return;
    setStatus(status, "FAILED", describe(error));
    return;
  }
  const session = operation.metadata.target.split("/").at(-1) ?? "";
  void refresh();
  while (!operation.done && !scope.disposed) {
    setStatus(status, "RUNNING", `capturing ${formatDuration(durationSeconds)} into ${session}…`);
    try {
      operation = await api.post<Operation>(`/v1/${operation.name}:wait`, { timeout: "10s" }, scope.signal);
    } catch (error) {
      if (scope.disposed) return;
      if (error instanceof ApiError && error.status >= 500) continue;
      setStatus(status, "FAILED", describe(error));
      return;
    }
    void refresh();
  }
  if (scope.disposed) return;
  if (operation.error) setStatus(status, "FAILED", `${operation.error.code}: ${operation.error.message}`);
  else setStatus(status, "SUCCEEDED", `session ${session}`);
  await refresh();
}

function describe(error: unknown): string {
  return error instanceof ApiError ? `${error.code}: ${error.message}` : String(error);
}

/** A session's parts: per-host phase, file and size (no XProf link: share viewers get none). */
export function sessionDetail(s: ProfilerSession): HTMLElement {
  return h(
    "div",
    { class: "session-detail", testid: "session-detail", dataset: { sessionId: s.sessionId } },
    facts([
      ["Session", h("code", {}, s.sessionId)],
      ["Phase", phaseBadge(s.phase)],
      ["Trigger", KIND_LABELS[s.kind] ?? s.kind],
      ["Duration", formatDuration(s.durationSeconds)],
      ["Created", formatTime(s.createTime)],
      ["Ended", formatTime(s.endTime)],
      ["Folder", s.storageFolderUri ? h("code", {}, s.storageFolderUri) : "—"],
      ["Pre-warmed", s.prewarmed ? "yes" : "no"],
    ]),
    h(
      "table",
      { class: "table compact", testid: "session-hosts" },
      h("thead", {}, h("tr", {}, h("th", {}, "Host"), h("th", {}, "Phase"), h("th", {}, "Started"), h("th", {}, "Ended"), h("th", {}, "File"), h("th", { class: "num" }, "Size"), h("th", {}, "Error"))),
      h(
        "tbody",
        {},
        s.hosts.map((host) =>
          h(
            "tr",
            { dataset: { host: host.host } },
            h("td", {}, host.host),
            h("td", {}, phaseBadge(host.phase)),
            h("td", {}, formatTime(host.startTime)),
            h("td", {}, formatTime(host.endTime)),
            h("td", {}, host.fileUri ? h("code", { class: "file" }, host.fileUri) : "—"),
            h("td", { class: "num" }, host.sizeBytes ? formatBytes(host.sizeBytes) : "—"),
            h("td", { class: "error-text" }, host.error || ""),
          ),
        ),
      ),
    ),
  );
}

/**
 * "Open in XProf": XProf is served by the xprof-provisioner on its own origin, which cannot
 * read this page's token, so the token rides along on the click only (`token=`, which the
 * provisioner turns into a cookie before redirecting to a clean address); the link shown
 * and copied never carries it.
 */
function xprofLink(dashboardUri: string, token: string): HTMLElement {
  const link = h(
    "a",
    { class: "button small", href: dashboardUri, target: "_blank", rel: "noopener", testid: "xprof-link" },
    "Open in XProf ↗",
  );
  const withToken = (): void => {
    const url = new URL(dashboardUri, location.href);
    url.searchParams.set("token", token);
    link.href = url.toString();
    setTimeout(() => (link.href = dashboardUri), 0);
  };
  link.addEventListener("click", withToken);
  link.addEventListener("auxclick", withToken);
  return link;
}
