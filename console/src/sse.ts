// Live updates: the API's `:watch` streams (text/event-stream) read with fetch, because
// EventSource cannot send an Authorization header. Reconnects with backoff until stopped.

import type { Api } from "./api";
import type { Scope } from "./scope";
import type { RunUpdate } from "./types";

export interface WatchHandlers {
  onUpdate: (update: RunUpdate) => void;
  /** After a reconnect: updates may have been missed, refetch everything shown. */
  onResync?: () => void;
  onState?: (state: "live" | "connecting" | "offline") => void;
}

const MIN_BACKOFF_MS = 1000;
const MAX_BACKOFF_MS = 30_000;

export function watch(api: Api, path: string, scope: Scope, handlers: WatchHandlers): void {
  void (async () => {
    let backoff = MIN_BACKOFF_MS;
    let connectedBefore = false;
    while (!scope.disposed) {
      handlers.onState?.("connecting");
      let retryAfter = backoff;
      try {
        const response = await fetch(path, {
          headers: api.headers({ Accept: "text/event-stream" }),
          signal: scope.signal,
          cache: "no-store",
        });
        if (response.status === 401 || response.status === 403) {
          handlers.onState?.("offline");
          return; // the page's own calls report why
        }
        if (!response.ok || !response.body) {
          // 404: a registry without live updates yet; try again now and then.
          retryAfter = response.status === 404 ? MAX_BACKOFF_MS : backoff;
          throw new Error(`watch answered ${response.status}`);
        }
        handlers.onState?.("live");
        if (connectedBefore) handlers.onResync?.();
        connectedBefore = true;
        backoff = MIN_BACKOFF_MS;
        await readEvents(response.body, (event, data) => {
          if (event !== "update" && event !== "message") return;
          try {
            handlers.onUpdate(JSON.parse(data) as RunUpdate);
          } catch {
            // a malformed hint is dropped: hints are only hints
          }
        });
      } catch {
        if (scope.disposed) return;
      }
      handlers.onState?.("offline");
      await sleep(retryAfter + Math.random() * 250, scope.signal);
      backoff = Math.min(backoff * 2, MAX_BACKOFF_MS);
    }
  })();
}

/** Parse an event stream into (event, data) messages; comments (`: keep-alive`) are skipped. */
export async function readEvents(
  body: ReadableStream<Uint8Array>,
  onMessage: (event: string, data: string) => void,
): Promise<void> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  let event = "";
  let data: string[] = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let newline: number;
    while ((newline = buffer.search(/\r\n|\r|\n/)) >= 0) {
      const line = buffer.slice(0, newline);
      buffer = buffer.slice(newline + (buffer.startsWith("\r\n", newline) ? 2 : 1));
      if (line === "") {
        if (data.length) onMessage(event || "message", data.join("\n"));
        event = "";
        data = [];
      } else if (!line.startsWith(":")) {
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const text = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "event") event = text;
        else if (field === "data") data.push(text);
      }
    }
  }
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener(
      "abort",
      () => {
        clearTimeout(timer);
        resolve();
      },
      { once: true },
    );
  });
}
