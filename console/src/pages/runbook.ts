// A runbook (docs/runbooks/<name>.md, packaged with the console and served by the registry at
// /console/runbooks/<name>) rendered as a page: what the analyzers' recommended actions link to.
// It needs no sign-in: runbooks are documentation, the same for every caller.

import { ApiError, isAbort } from "../api";
import { h, replace } from "../h";
import { markdownTitle, renderMarkdown } from "../markdown";
import type { Scope } from "../scope";
import { errorBox, loading } from "../ui";

export function runbookPage(name: string, scope: Scope, onTitle: (title: string) => void): HTMLElement {
  const body = h("article", { class: "runbook-page markdown", testid: "runbook", dataset: { runbook: name } }, loading("loading the runbook…"));
  void (async () => {
    try {
      // Relative to /console/: the registry's route, beside the app.
      const response = await fetch(`runbooks/${encodeURIComponent(name)}`, { signal: scope.signal });
      const text = await response.text();
      if (!response.ok) {
        const error = (JSON.parse(text) as { error?: { code?: string; message?: string } }).error;
        throw new ApiError(response.status, error?.code ?? "error", error?.message ?? response.statusText);
      }
      if (scope.disposed) return;
      body.innerHTML = renderMarkdown(text); // escaped by the renderer: only its own tags
      onTitle(markdownTitle(text) || name);
    } catch (error) {
      if (isAbort(error) || scope.disposed) return;
      replace(body, errorBox(error));
    }
  })();
  return h("div", { class: "page" }, h("p", {}, h("a", { href: "#/runbooks/README" }, "All runbooks")), body);
}
