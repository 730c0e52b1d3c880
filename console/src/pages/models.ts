// The model registry's models of a project and location: display name, default version, its
// aliases, last update. Models have no state to follow: the page loads once (and asks again
// every few seconds while the training API does not answer).

import { formatTime } from "../format";
import { h, replace } from "../h";
import { trainingUnavailable } from "../jobs";
import { type ListModelsResponse, type Model, modelIdOf, modelsPath, userAliases } from "../models";
import { modelHref, modelsHref, navigate, parentOf, type Parent, replaceHash } from "../router";
import type { Scope } from "../scope";
import type { Session } from "../session";
import { errorBox, labelChips } from "../ui";
import { Poller, unavailableNotice } from "./jobparts";

const PAGE_SIZE = 50;

export function aliasChips(aliases: string[]): HTMLElement {
  return h("span", { class: "chips", testid: "model-aliases" }, aliases.map((alias) => h("span", { class: "chip alias" }, alias)));
}

export function modelsPage(session: Session, scope: Scope, query: URLSearchParams): HTMLElement {
  let parent: Parent = parentOf(query);
  let tokens: string[] = [];
  let pageToken = "";
  let nextToken = "";

  const table = h("table", { class: "table models-table", testid: "models-table" });
  const body = h("div", { class: "table-wrap" }, table);
  const errorSlot = h("div");
  const status = h("div", { class: "table-status", testid: "models-status" });
  const prev = h("button", { class: "button", testid: "prev-page", onclick: () => go(-1) }, "‹ Prev");
  const next = h("button", { class: "button", testid: "next-page", onclick: () => go(1) }, "Next ›");
  const refresh = h("button", { class: "button", testid: "models-refresh", onclick: () => poller.now() }, "Refresh");

  const project = h("input", { type: "text", value: parent.project, name: "project", testid: "models-project", title: "Project" });
  const location = h("input", { type: "text", value: parent.location, name: "location", testid: "models-location", title: "Location" });
  for (const input of [project, location]) {
    input.addEventListener("change", () => {
      parent = { project: project.value.trim() || "default", location: location.value.trim() || "local" };
      tokens = [];
      pageToken = "";
      replaceHash(modelsHref(parent));
      poller.now();
    });
  }

  function go(direction: 1 | -1): void {
    if (direction === 1 && nextToken) {
      tokens.push(pageToken);
      pageToken = nextToken;
    } else if (direction === -1 && tokens.length) {
      pageToken = tokens.pop() ?? "";
    } else return;
    poller.now();
  }

  function render(models: Model[]): void {
    const rows = models.map((model) => {
      const modelId = modelIdOf(model);
      const href = modelHref(parent, modelId);
      return h(
        "tr",
        {
          class: "clickable",
          dataset: { modelId },
          onclick: (event) => {
            if ((event.target as HTMLElement).closest("a, button")) return;
            navigate(href);
          },
        },
        h("td", { class: "name" }, h("a", { href, testid: "model-link" }, model.displayName || modelId), h("span", { class: "sub" }, modelId)),
        h("td", { class: "num key", testid: "model-default-version" }, model.versionId || "—"),
        h("td", {}, aliasChips(userAliases(model))),
        h("td", { title: model.updateTime ?? "", testid: "model-updated" }, formatTime(model.updateTime ?? model.versionUpdateTime)),
        h("td", {}, labelChips(model.labels ?? {})),
        h("td", { class: "value" }, model.description || ""),
      );
    });
    replace(
      table,
      h("thead", {}, h("tr", {}, ["Model", "Default version", "Aliases", "Updated", "Labels", "Description"].map((label) => h("th", {}, label)))),
      h("tbody", {}, rows),
    );
    body.hidden = rows.length === 0;
  }

  async function load(): Promise<boolean> {
    try {
      const page = await session.api.get<ListModelsResponse>(modelsPath(parent), { pageSize: PAGE_SIZE, pageToken }, scope.signal);
      const models = [...(page.models ?? [])].sort((a, b) => (b.updateTime ?? "").localeCompare(a.updateTime ?? ""));
      errorSlot.replaceChildren();
      nextToken = page.nextPageToken ?? "";
      render(models);
      prev.disabled = tokens.length === 0;
      next.disabled = !nextToken;
      if (models.length === 0 && tokens.length === 0) {
        replace(
          errorSlot,
          h(
            "div",
            { class: "empty", testid: "models-empty" },
            `No models in projects/${parent.project}/locations/${parent.location} yet. `,
            "A training pipeline with a model to upload registers one, as does the Vertex AI SDK's ",
            h("code", {}, "Model.upload"),
            ".",
          ),
        );
      }
      status.textContent = `${models.length} model(s) on this page`;
      return false;
    } catch (error) {
      if (scope.disposed) return false;
      render([]);
      status.textContent = "";
      replace(errorSlot, trainingUnavailable(error) ? unavailableNotice(error) : errorBox(error));
      throw error;
    }
  }

  const poller = new Poller(scope, load);
  poller.now();

  return h(
    "div",
    { class: "page models-page" },
    h(
      "div",
      { class: "page-head" },
      h("h2", {}, "Models"),
      h("span", { class: "spacer" }),
      h("label", { class: "inline" }, "project ", project),
      h("label", { class: "inline" }, "location ", location),
      refresh,
    ),
    errorSlot,
    body,
    h("div", { class: "pager" }, status, h("span", { class: "spacer" }), prev, next),
  );
}
