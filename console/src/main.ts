// The console's shell: sign-in, the top bar, and the hash router that swaps pages.

import "uplot/dist/uPlot.min.css";
import "./styles.css";

import { ApiError } from "./api";
import { h, replace } from "./h";
import { alertsPage } from "./pages/alerts";
import { comparePage } from "./pages/compare";
import { jobPage } from "./pages/job";
import { jobsPage } from "./pages/jobs";
import { modelPage } from "./pages/model";
import { modelsPage } from "./pages/models";
import { runbookPage } from "./pages/runbook";
import { runPage } from "./pages/run";
import { runsPage } from "./pages/runs";
import { sharedPage } from "./pages/shared";
import { signInPage } from "./pages/signin";
import { studiesPage } from "./pages/studies";
import { studyPage } from "./pages/study";
import { navigate, parseHash, type Route } from "./router";
import { Scope } from "./scope";
import { openSession, type Session, storedToken, storeToken } from "./session";
import type { Caller } from "./types";
import { empty, loading } from "./ui";

interface Page {
  el: HTMLElement;
  update?: (route: Route) => boolean;
}

const root = document.getElementById("app") ?? document.body;
const topbar = h("header", { class: "topbar" });
const main = h("main", { class: "main" });
root.append(topbar, main);

let session: Session | null = null;
let signInMessage: unknown = null;
let scope: Scope | null = null;
let current: Page | null = null;
let routed = false;

function attach(next: Session): void {
  session = next;
  next.api.onUnauthenticated = (error) => {
    if (session === next) signOut(error);
  };
}

function signOut(message: unknown = null): void {
  storeToken(null);
  session = null;
  signInMessage = message;
  current = null; // the page in place must not take the route over
  route();
}

/** `caller` null: not known (yet); a registry without /v1/caller shows "unknown". */
function renderTopbar(caller: Caller | null, shared: boolean): void {
  const role = caller?.role ?? (session && !shared ? "unknown" : null);
  replace(
    topbar,
    h("a", { class: "brand", href: shared ? location.hash : "#/runs" }, h("span", { class: "brand-mark" }, "◆"), " mldiag"),
    !shared && session
      ? h(
          "nav",
          { class: "topnav" },
          h("a", { href: "#/runs" }, "Runs"),
          h("a", { href: "#/jobs", testid: "nav-jobs" }, "Jobs"),
          h("a", { href: "#/tuning", testid: "nav-tuning" }, "Tuning"),
          h("a", { href: "#/models", testid: "nav-models" }, "Models"),
          h("a", { href: "#/alerts", testid: "nav-alerts" }, "Alerts"),
        )
      : null,
    h("span", { class: "spacer" }),
    role ? h("span", { class: `role role-${role}`, testid: "caller-role", title: caller ? `token ${caller.tokenId}` : "" }, role) : null,
    !shared && session ? h("button", { class: "button small", testid: "sign-out", onclick: () => signOut() }, "Sign out") : null,
  );
}

function show(page: Page, title: string): void {
  current = page;
  replace(main, page.el);
  document.title = `${title} · mldiag`;
}

function route(): void {
  const next = parseHash(location.hash);
  if (current?.update?.(next)) return;
  scope?.dispose();
  scope = new Scope();
  current = null;

  if (next.page === "share") {
    renderTopbar(null, true);
    show(
      sharedPage(next.token, next.tab, next.query, scope, (caller) => renderTopbar(caller, true)),
      "Shared",
    );
    return;
  }
  if (next.page === "runbook") {
    // Documentation: no sign-in needed, so a link from a report or a notification just opens.
    renderTopbar(session?.caller ?? null, false);
    show({ el: runbookPage(next.name, scope, (title) => (document.title = `${title} · mldiag`)) }, "Runbook");
    return;
  }
  if (!session) {
    renderTopbar(null, false);
    show(
      {
        el: signInPage(signInMessage, (opened, token) => {
          storeToken(token);
          signInMessage = null;
          attach(opened);
          if (parseHash(location.hash).page === "signin") navigate("#/runs");
          else route();
        }),
      },
      "Sign in",
    );
    return;
  }
  renderTopbar(session.caller, false);
  if (!routed) {
    routed = true;
    performance.mark("mldiag:first-route");
  }
  switch (next.page) {
    case "signin":
      navigate("#/runs");
      return;
    case "runs":
      show({ el: runsPage(session, scope, next.query) }, "Runs");
      return;
    case "run":
      show(runPage(session, scope, next.runId, `#/runs/${encodeURIComponent(next.runId)}`, next.tab, next.query), next.runId);
      return;
    case "compare":
      show({ el: comparePage(session, scope, next.runs, next.query) }, "Compare");
      return;
    case "jobs":
      show({ el: jobsPage(session, scope, next.query) }, "Jobs");
      return;
    case "job":
      show({ el: jobPage(session, scope, next.jobId, next.query) }, `Job ${next.jobId}`);
      return;
    case "studies":
      show({ el: studiesPage(session, scope, next.query) }, "Tuning");
      return;
    case "study":
      show({ el: studyPage(session, scope, next.jobId, next.query) }, `Tuning ${next.jobId}`);
      return;
    case "models":
      show({ el: modelsPage(session, scope, next.query) }, "Models");
      return;
    case "model":
      show({ el: modelPage(session, scope, next.modelId, next.query) }, `Model ${next.modelId}`);
      return;
    case "alerts":
      show({ el: alertsPage(session, scope) }, "Alerts");
      return;
    case "notfound":
      show({ el: h("div", { class: "page" }, empty(`Nothing at #/${next.path}.`), h("a", { href: "#/runs" }, "← Runs")) }, "Not found");
      return;
  }
}

async function boot(): Promise<void> {
  performance.mark("mldiag:app-started"); // the bundle is compiled and run (benchmarks read it)
  window.addEventListener("hashchange", () => route());
  const token = storedToken();
  const next = parseHash(location.hash);
  if (token && next.page !== "share") {
    replace(main, loading("signing in…"));
    try {
      attach(await openSession(token));
      performance.mark("mldiag:signed-in");
    } catch (error) {
      // A refused token is forgotten; an API that did not answer keeps it for the next try.
      if (error instanceof ApiError && error.status === 401) storeToken(null);
      signInMessage = error;
    }
  } else if (token) {
    // A share view needs no sign-in; the console's session opens when the user leaves it.
    void openSession(token).then(attach, () => undefined);
  }
  route();
}

void boot();
