// Share links: create a read-only link to a run, an event or a profiler session, copy it,
// list and revoke the links of that resource.

import { ApiError } from "./api";
import { formatTime } from "./format";
import { h, replace } from "./h";
import type { Session } from "./session";
import type { CreatedShareLink, ShareLink } from "./types";
import { errorBox, loading, modal } from "./ui";

const TTLS: [string, number][] = [
  ["1 hour", 3600],
  ["1 day", 86_400],
  ["7 days", 7 * 86_400],
  ["30 days", 30 * 86_400],
];

export function runResource(runId: string): string {
  return `machineLearningRuns/${runId}`;
}

export function eventResource(runId: string, eventId: string): string {
  return `machineLearningRuns/${runId}/monitoredEvents/${eventId}`;
}

export function sessionResource(runId: string, sessionId: string): string {
  return `machineLearningRuns/${runId}/profilerSessions/${sessionId}`;
}

/** The share button, or null when the caller may not create links. */
export function shareButton(session: Session, resource: string, what: string): HTMLButtonElement | null {
  if (session.shared || !session.can("shareLinks.create")) return null;
  return h(
    "button",
    { class: "button", testid: "share-button", title: `Share ${what} read-only`, onclick: () => openShareDialog(session, resource, what) },
    "Share",
  );
}

function absoluteUrl(created: CreatedShareLink): string {
  if (created.url) return new URL(created.url, location.href).toString();
  return new URL(`#/share/${encodeURIComponent(created.token)}`, location.href).toString();
}

export function openShareDialog(session: Session, resource: string, what: string): void {
  const ttl = h(
    "select",
    { testid: "share-ttl", name: "ttl" },
    TTLS.map(([label, seconds]) => h("option", { value: String(seconds), selected: seconds === 7 * 86_400 }, label)),
  );
  const result = h("div", { class: "share-result" });
  const list = h("div", { class: "share-links", testid: "share-links" });
  const create = h("button", { class: "button primary", testid: "share-create", type: "submit" }, "Create link");
  const form = h(
    "form",
    {
      class: "share-form",
      onsubmit: (event) => {
        event.preventDefault();
        void createLink();
      },
    },
    h("label", {}, "Expires after ", ttl),
    create,
  );

  async function createLink(): Promise<void> {
    create.disabled = true;
    try {
      const created = await session.api.post<CreatedShareLink>("/v1/shareLinks", {
        resource,
        ttlSeconds: Number(ttl.value),
      });
      const url = h("input", { class: "share-url", testid: "share-url", readOnly: true, value: absoluteUrl(created) });
      const copy = h(
        "button",
        {
          class: "button",
          testid: "share-copy",
          type: "button",
          onclick: () => {
            url.select();
            void copyText(url.value).then((ok) => {
              copy.textContent = ok ? "Copied" : "Press Ctrl+C";
              setTimeout(() => (copy.textContent = "Copy"), 1500);
            });
          },
        },
        "Copy",
      );
      replace(
        result,
        h("div", { class: "share-url-row" }, url, copy),
        h("p", { class: "muted" }, `Read-only; works until ${formatTime(created.shareLink.expireTime)} unless revoked.`),
      );
      url.select();
      await refreshList();
    } catch (error) {
      replace(result, errorBox(error));
    } finally {
      create.disabled = false;
    }
  }

  async function refreshList(): Promise<void> {
    if (!session.can("shareLinks.list")) return;
    try {
      const answer = await session.api.get<{ shareLinks: ShareLink[] }>("/v1/shareLinks", { resource });
      const links = answer.shareLinks ?? [];
      replace(
        list,
        h("h4", {}, `Links to this ${what}`),
        links.length === 0
          ? h("p", { class: "muted" }, "None yet.")
          : h(
              "table",
              { class: "table compact" },
              h("thead", {}, h("tr", {}, h("th", {}, "Link"), h("th", {}, "State"), h("th", {}, "Created"), h("th", {}, "Expires"), h("th", {}))),
              h("tbody", {}, links.map((link) => linkRow(link))),
            ),
      );
    } catch (error) {
      replace(list, errorBox(error));
    }
  }

  function linkRow(link: ShareLink): HTMLElement {
    const revoke =
      link.state === "ACTIVE" && session.can("shareLinks.delete")
        ? h(
            "button",
            {
              class: "button small danger",
              testid: "share-revoke",
              onclick: async () => {
                revoke!.disabled = true;
                try {
                  await session.api.delete(`/v1/shareLinks/${encodeURIComponent(link.linkId)}`);
                } catch (error) {
                  if (!(error instanceof ApiError && error.status === 404)) {
                    list.prepend(errorBox(error));
                    return;
                  }
                }
                await refreshList();
              },
            },
            "Revoke",
          )
        : null;
    return h(
      "tr",
      { testid: "share-link", dataset: { linkId: link.linkId, state: link.state } },
      h("td", {}, h("code", {}, link.linkId), link.displayName ? ` ${link.displayName}` : ""),
      h("td", {}, h("span", { class: `badge link-${link.state.toLowerCase()}` }, link.state)),
      h("td", {}, formatTime(link.createTime)),
      h("td", {}, formatTime(link.revokeTime ?? link.expireTime)),
      h("td", {}, revoke),
    );
  }

  const body = h(
    "div",
    { class: "share-dialog" },
    h("p", {}, `Anyone with the link can view this ${what} read-only, without signing in, until it expires or is revoked.`),
    form,
    result,
    list,
  );
  modal(`Share ${what}`, body, "share-dialog");
  if (session.can("shareLinks.list")) list.append(loading());
  void refreshList();
}

async function copyText(text: string): Promise<boolean> {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    return document.execCommand("copy");
  }
}
