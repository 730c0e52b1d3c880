// The model registry's models of a project and location: display name, default version, its
// aliases, last update. Models have no state to follow: the page loads once (and asks again
// every few seconds while the training API does not answer).

import { formatTime } from "../format";
import { h } from "../h";
import { type ListModelsResponse, type Model, modelIdOf, modelsPath, userAliases } from "../models";
import { modelHref, modelsHref } from "../router";
import type { Scope } from "../scope";
import type { Session } from "../session";
import { labelChips } from "../ui";
import { clickableRow, trainingListPage } from "./trainlist";

export function aliasChips(aliases: string[]): HTMLElement {
  return h("span", { class: "chips", testid: "model-aliases" }, aliases.map((alias) => h("span", { class: "chip alias" }, alias)));
}

export function modelsPage(session: Session, scope: Scope, query: URLSearchParams): HTMLElement {
  return trainingListPage<Model, ListModelsResponse>(session, scope, query, {
    kind: "models",
    pageClass: "page models-page",
    tableClass: "table models-table",
    title: "Models",
    href: modelsHref,
    path: modelsPath,
    items: (page) => page.models ?? [],
    sortTime: (model) => model.updateTime,
    columns: ["Model", "Default version", "Aliases", "Updated", "Labels", "Description"],
    row: (model, parent) => {
      const modelId = modelIdOf(model);
      const href = modelHref(parent, modelId);
      return clickableRow(
        href,
        { modelId },
        h("td", { class: "name" }, h("a", { href, testid: "model-link" }, model.displayName || modelId), h("span", { class: "sub" }, modelId)),
        h("td", { class: "num key", testid: "model-default-version" }, model.versionId || "—"),
        h("td", {}, aliasChips(userAliases(model))),
        h("td", { title: model.updateTime ?? "", testid: "model-updated" }, formatTime(model.updateTime ?? model.versionUpdateTime)),
        h("td", {}, labelChips(model.labels ?? {})),
        h("td", { class: "value" }, model.description || ""),
      );
    },
    empty: () => ["A training pipeline with a model to upload registers one, as does the Vertex AI SDK's ", h("code", {}, "Model.upload"), "."],
    noun: "model(s)",
  });
}
