// A share link's view (#/share/<token>): the token is the bearer for this page only (never
// stored), and the page shows just what the link opens: a run, an event, or a profile session.

import { Api, ApiError, pathPart } from "../api";
import { formatTime } from "../format";
import { h, replace } from "../h";
import type { Route, Tab } from "../router";
import type { Scope } from "../scope";
import { Session } from "../session";
import type { Analysis, Caller, ProfilerSession, ShareLink, WorkloadEvent } from "../types";
import { errorBox, loading } from "../ui";
import { eventDetail } from "./events";
import { sessionDetail } from "./profiles";
import { runHeader, runPage, runPath } from "./run";

export interface SharedPage {
  el: HTMLElement;
  update: (route: Route) => boolean;
}

export function sharedPage(
  token: string,
  tab: Tab,
  query: URLSearchParams,
  scope: Scope,
  onCaller: (caller: Caller) => void,
): SharedPage {
  const el = h("div", { class: "page shared-page" }, loading("opening the shared link…"));
  let inner: { update: (route: Route) => boolean } | null = null;
  const api = new Api(token);

  void (async () => {
    let caller: Caller;
    try {
      caller = await api.get<Caller>("/v1/caller", {}, scope.signal);
      if (caller.role !== "shared" || !caller.share) {
        throw new ApiError(400, "not_a_share_link", "this address carries an API token, not a share link: sign in with it instead");
      }
    } catch (error) {
      if (!scope.disposed) replace(el, errorBox(error));
      return;
    }
    if (scope.disposed) return;
    onCaller(caller);
    const share = caller.share;
    const session = new Session(api, caller);
    const banner = h("div", { class: "shared-banner", testid: "shared-banner", dataset: { kind: share.kind } }, bannerText(share, share.runId));
    const base = `#/share/${encodeURIComponent(token)}`;
    switch (share.kind) {
      case "RUN": {
        const page = runPage(session, scope, share.runId, base, tab, query, (run) =>
          replace(banner, bannerText(share, run.displayName || run.runId)),
        );
        inner = page;
        replace(el, banner, page.el);
        break;
      }
      case "EVENT": {
        const header = runHeader(session, share.runId, scope, { details: false }, (run) => replace(banner, bannerText(share, run.displayName || run.runId)));
        const body = h("div", {}, loading("loading the event…"));
        header.el.classList.add("standalone");
        replace(el, banner, header.el, body);
        await showEvent(api, share, body, scope, session);
        break;
      }
      case "PROFILER_SESSION": {
        const body = h("div", {}, loading("loading the profile session…"));
        replace(el, banner, body);
        await showSession(api, share, body, scope);
        break;
      }
    }
  })();

  return {
    el,
    update: (route) => (route.page === "share" && route.token === token && inner ? inner.update(route) : false),
  };
}

function bannerText(share: ShareLink, runName: string): string {
  const what =
    share.kind === "RUN"
      ? `run ${runName}`
      : share.kind === "EVENT"
        ? `an event of run ${runName}`
        : `profile session ${share.sessionId ?? ""} of run ${runName}`;
  return `Shared read-only view of ${what}, expires ${formatTime(share.expireTime)}`;
}

async function showEvent(api: Api, share: ShareLink, body: HTMLElement, scope: Scope, session: Session): Promise<void> {
  const eventId = share.eventId ?? "";
  try {
    const [event, analyses] = await Promise.all([
      api.get<WorkloadEvent>(runPath(share.runId, `/monitoredEvents/${pathPart(eventId)}`), {}, scope.signal),
      api.get<{ analyses: Analysis[] }>(runPath(share.runId, "/analyses"), { event: eventId }, scope.signal).catch(() => ({ analyses: [] as Analysis[] })),
    ]);
    const analysis = analyses.analyses.find((a) => a.eventId === eventId) ?? null;
    replace(body, eventDetail(session, event, analysis));
  } catch (error) {
    if (!scope.disposed) replace(body, errorBox(error));
  }
}

async function showSession(api: Api, share: ShareLink, body: HTMLElement, scope: Scope): Promise<void> {
  try {
    const s = await api.get<ProfilerSession>(runPath(share.runId, `/profilerSessions/${pathPart(share.sessionId ?? "")}`), {}, scope.signal);
    replace(body, h("section", { class: "card" }, h("h3", {}, `Profile session ${s.sessionId}`), sessionDetail(s)));
  } catch (error) {
    if (!scope.disposed) replace(body, errorBox(error));
  }
}
