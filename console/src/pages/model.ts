// A model: its default version's header, every version (id, aliases, created, artifact URI,
// serving image, lineage) and the picked version's details. A version's lineage links to the
// console's pages for its tuning job, custom job and run (training pipelines have none).

import { formatTime } from "../format";
import { h, replace } from "../h";
import {
  byVersionDesc,
  isDefaultVersion,
  type LineageLink,
  lineageLinks,
  type ListModelsResponse,
  type Model,
  modelPath,
  modelVersionPath,
  userAliases,
} from "../models";
import { jobHref, modelHref, modelsHref, parentOf, replaceHash, runHref, tuningJobHref } from "../router";
import type { Scope } from "../scope";
import type { Session } from "../session";
import { errorBox, facts, kv, labelChips } from "../ui";
import { Poller, trainingErrorNotice } from "./jobparts";
import { aliasChips } from "./models";

/** The most versions read (pages of 100). */
const MAX_VERSION_PAGES = 10;

const HREFS = { job: jobHref, tuningJob: (parent: Parameters<typeof jobHref>[0], id: string) => tuningJobHref(parent, id), run: (id: string) => runHref(id) };

export function lineageList(links: LineageLink[]): HTMLElement {
  return h(
    "span",
    { class: "lineage", testid: "version-lineage" },
    links.length
      ? links.map((link) =>
          h(
            "span",
            { class: "lineage-step", testid: "lineage-link", dataset: { kind: link.kind, id: link.id }, title: link.resource },
            h("span", { class: "muted" }, `${link.label} `),
            link.href ? h("a", { href: link.href }, link.id) : h("code", {}, link.id),
          ),
        )
      : h("span", { class: "muted" }, "uploaded (no lineage)"),
  );
}

export function modelPage(session: Session, scope: Scope, modelId: string, query: URLSearchParams): HTMLElement {
  const parent = parentOf(query);
  let picked = query.get("version") ?? "";
  let versions: Model[] = [];

  const header = h("header", { class: "run-header standalone job-header model-header", testid: "model-header" }, h("div", { class: "muted" }, "loading…"));
  const errorSlot = h("div");
  const versionsTable = h("table", { class: "table versions-table", testid: "versions-table" });
  const detail = h("section", { class: "card version-detail", testid: "version-detail" });
  const body = h("div", {}, h("section", { class: "card" }, h("h3", {}, "Versions"), h("div", { class: "table-wrap" }, versionsTable)), detail);
  body.hidden = true;

  function pick(versionId: string): void {
    picked = versionId;
    replaceHash(modelHref(parent, modelId, { version: versionId }));
    renderVersions();
    void renderDetail();
  }

  function renderHeader(model: Model): void {
    replace(
      header,
      h(
        "div",
        { class: "run-header-body", dataset: { modelId } },
        h("div", { class: "run-title" }, h("h2", { testid: "model-name" }, model.displayName || modelId), labelChips(model.labels ?? {})),
        facts([
          ["Model id", h("code", {}, modelId)],
          ["Default version", h("span", { testid: "default-version" }, model.versionId || "—")],
          ["Versions", String(versions.length)],
          ["Created", formatTime(model.createTime)],
          ["Updated", formatTime(model.updateTime)],
        ]),
        model.description ? h("p", { class: "muted" }, model.description) : null,
      ),
    );
  }

  function renderVersions(): void {
    const rows = versions.map((version) => {
      const versionId = version.versionId ?? "";
      return h(
        "tr",
        {
          class: `clickable${versionId === picked ? " selected" : ""}`,
          dataset: { versionId },
          title: "Show this version",
          onclick: (event) => {
            if ((event.target as HTMLElement).closest("a, button")) return;
            pick(versionId);
          },
        },
        h("td", { class: "key" }, versionId, isDefaultVersion(version) ? h("span", { class: "badge default-version", testid: "version-default" }, "default") : null),
        h("td", { testid: "version-aliases" }, aliasChips(userAliases(version))),
        h("td", { title: version.versionCreateTime ?? "" }, formatTime(version.versionCreateTime)),
        h("td", { class: "value", testid: "version-artifact" }, version.artifactUri ? h("code", {}, version.artifactUri) : "—"),
        h("td", { class: "value", testid: "version-image" }, version.containerSpec?.imageUri ? h("code", {}, version.containerSpec.imageUri) : "—"),
        h("td", {}, lineageList(lineageLinks(version, HREFS))),
      );
    });
    replace(
      versionsTable,
      h("thead", {}, h("tr", {}, ["Version", "Aliases", "Created", "Artifact URI", "Container image", "Lineage"].map((label) => h("th", {}, label)))),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colSpan: 6, class: "empty" }, "No versions."))),
    );
  }

  async function renderDetail(): Promise<void> {
    if (!picked) {
      replace(detail, h("h3", {}, "Version"), h("div", { class: "muted" }, "Pick a version to see its details."));
      return;
    }
    let version = versions.find((v) => v.versionId === picked) ?? null;
    if (!version) {
      // Not among the versions read (or named by a link): ask for it by id.
      try {
        version = await session.api.get<Model>(modelVersionPath(parent, modelId, picked), {}, scope.signal);
      } catch (error) {
        if (!scope.disposed) replace(detail, h("h3", {}, `Version ${picked}`), errorBox(error));
        return;
      }
    }
    const container = version.containerSpec;
    replace(
      detail,
      h("h3", {}, `Version ${version.versionId ?? picked}`, isDefaultVersion(version) ? h("span", { class: "badge default-version" }, "default") : null),
      kv([
        ["Aliases", aliasChips(version.versionAliases ?? [])],
        ["Description", version.versionDescription || null],
        ["Created", formatTime(version.versionCreateTime)],
        ["Updated", formatTime(version.versionUpdateTime)],
        ["Artifact URI", version.artifactUri ? h("code", {}, version.artifactUri) : null],
        ["Container image", container?.imageUri ? h("code", {}, container.imageUri) : null],
        ["Command", container?.command?.length ? h("code", {}, container.command.join(" ")) : null],
        ["Args", container?.args?.length ? h("code", {}, container.args.join(" ")) : null],
        ["Labels", Object.keys(version.labels ?? {}).length ? labelChips(version.labels ?? {}) : null],
        ["Lineage", lineageList(lineageLinks(version, HREFS))],
      ]),
    );
  }

  async function listVersions(): Promise<Model[]> {
    const out: Model[] = [];
    let pageToken = "";
    for (let page = 0; page < MAX_VERSION_PAGES; page++) {
      const answer = await session.api.get<ListModelsResponse>(modelPath(parent, modelId, ":listVersions"), { pageSize: 100, pageToken }, scope.signal);
      out.push(...(answer.models ?? []));
      pageToken = answer.nextPageToken ?? "";
      if (!pageToken) break;
    }
    return out.sort(byVersionDesc);
  }

  async function load(): Promise<boolean> {
    let model: Model;
    try {
      [model, versions] = await Promise.all([session.api.get<Model>(modelPath(parent, modelId), {}, scope.signal), listVersions()]);
    } catch (error) {
      if (scope.disposed) return false;
      header.hidden = true;
      replace(errorSlot, trainingErrorNotice(error), h("a", { href: modelsHref(parent) }, "← Models"));
      throw error;
    }
    if (scope.disposed) return false;
    replace(errorSlot);
    header.hidden = false;
    body.hidden = false;
    if (!picked) picked = model.versionId ?? versions[0]?.versionId ?? "";
    renderHeader(model);
    renderVersions();
    await renderDetail();
    return false;
  }

  new Poller(scope, load).now();

  return h(
    "div",
    { class: "page model-page", dataset: { modelId } },
    h("div", { class: "page-head" }, h("a", { href: modelsHref(parent) }, "← Models")),
    errorSlot,
    header,
    body,
  );
}
