// A replica's log tail: followed (`follow=true`, read as a stream) while its job runs, read
// once when the job has ended. The training API's follow goes on through restarts (each new
// attempt announced by a `==> workerpool0-0 attempt 1 <==` line) until the job ends; one cut
// short (an edge restarting) reconnects after 2 s; an API that cannot follow is polled.

import { queryString } from "../api";
import { h, replace } from "../h";
import { jobPath, LogTail } from "../jobs";
import type { Parent } from "../router";
import type { Scope } from "../scope";
import type { Session } from "../session";
import { POLL_MS } from "./jobparts";

/** How much of each stream is read when the view opens (the view keeps as much). */
const TAIL_BYTES = 256 * 1024;

export type LogMode = "loading" | "following" | "polling" | "waiting" | "ended" | "error";

const STREAMS: [string, string][] = [
  ["both", "stdout + stderr"],
  ["stdout", "stdout"],
  ["stderr", "stderr"],
];

export interface LogViewer {
  el: HTMLElement;
  /** The replicas to choose from (the replicas list, or the spec's names before it has any). */
  setReplicas: (names: string[]) => void;
  /** Show this replica's log (a click on its row). */
  select: (replica: string) => void;
  /** The replica shown. */
  replica: () => string;
  /** The job reached a terminal state: stop following, read the whole tail once more. */
  jobEnded: () => void;
}

export function logViewer(
  session: Session,
  scope: Scope,
  parent: Parent,
  jobId: string,
  initialReplica: string,
  onReplica: (replica: string) => void,
): LogViewer {
  let replica = initialReplica;
  let stream = "both";
  let ended = false;
  let connection: Scope | null = null;
  const tail = new LogTail(TAIL_BYTES);

  const select = h("select", { testid: "log-replica", name: "replica", title: "Replica" });
  const streamSelect = h(
    "select",
    { testid: "log-stream", name: "stream", title: "Stream" },
    STREAMS.map(([value, label]) => h("option", { value, selected: value === stream }, label)),
  );
  const status = h("span", { class: "muted log-status", testid: "log-status" });
  const view = h("pre", { class: "log-view", testid: "log-view" });
  const cut = h("div", { class: "muted hint", testid: "log-truncated", style: "display:none" }, "earlier output not shown");

  select.addEventListener("change", () => choose(select.value));
  streamSelect.addEventListener("change", () => {
    stream = streamSelect.value;
    restart();
  });

  function choose(name: string): void {
    if (name === replica) return;
    replica = name;
    select.value = name;
    onReplica(name);
    restart();
  }

  function setMode(mode: LogMode, text: string): void {
    status.dataset["mode"] = mode;
    status.textContent = text;
  }

  function show(): void {
    // Stay at the bottom only if the reader was there (they may be reading further up).
    const atBottom = view.scrollTop + view.clientHeight >= view.scrollHeight - 24;
    view.textContent = tail.value;
    view.classList.toggle("blank", tail.value === "");
    view.dataset["length"] = String(tail.value.length);
    cut.style.display = tail.truncated ? "" : "none";
    if (atBottom) view.scrollTop = view.scrollHeight;
  }

  function url(follow: boolean): string {
    // A negative offset is a tail (of each stream): a long log never comes whole.
    return (
      jobPath(parent, jobId, "/logs") +
      queryString({ replica, stream, offset: -TAIL_BYTES, follow: follow ? "true" : undefined })
    );
  }

  function sleep(ms: number, signal: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      signal.addEventListener("abort", () => (clearTimeout(timer), resolve()), { once: true });
    });
  }

  /** Read the log once, whole; null when there is none yet (404). */
  async function readOnce(signal: AbortSignal): Promise<string | null> {
    const response = await fetch(url(false), { headers: session.api.headers({ Accept: "text/plain" }), signal, cache: "no-store" });
    if (response.status === 404) return null;
    if (!response.ok) throw new Error(`the logs answered ${response.status}: ${(await response.text()).slice(0, 200)}`);
    return response.text();
  }

  async function run(own: Scope): Promise<void> {
    const signal = own.signal;
    let canFollow = true;
    setMode("loading", "loading…");
    while (!own.disposed) {
      try {
        if (ended) {
          const text = await readOnce(signal);
          tail.reset(text ?? "");
          show();
          setMode("ended", text === null ? "no output (the job has ended)" : "the job has ended");
          return;
        }
        if (canFollow) {
          const response = await fetch(url(true), {
            headers: session.api.headers({ Accept: "text/plain" }),
            signal,
            cache: "no-store",
          });
          if (response.status === 404) {
            setMode("waiting", "no output yet");
          } else if (!response.ok || !response.body) {
            canFollow = false; // this training API does not follow: poll instead
            continue;
          } else {
            setMode("following", "● following");
            // A follow sends the log from its start, then what comes (like `tail -f` of a file).
            tail.reset();
            show();
            const reader = response.body.getReader();
            const decoder = new TextDecoder();
            for (;;) {
              const { value, done } = await reader.read();
              if (done) break;
              tail.append(decoder.decode(value, { stream: true }));
              show();
            }
            tail.append(decoder.decode());
            show();
            setMode("waiting", "waiting for the replica");
          }
        } else {
          const text = await readOnce(signal);
          if (text === null) setMode("waiting", "no output yet");
          else {
            tail.reset(text);
            show();
            setMode("polling", "● refreshing every 2 s");
          }
        }
      } catch (error) {
        if (own.disposed) return;
        setMode("error", `could not read the log (${error instanceof Error ? error.message : String(error)}); retrying`);
      }
      await sleep(POLL_MS, signal);
    }
  }

  function restart(): void {
    connection?.dispose();
    tail.reset();
    show();
    if (!replica) {
      setMode("waiting", "no replica yet");
      return;
    }
    const own = scope.child();
    connection = own;
    void run(own);
  }

  return {
    el: h(
      "section",
      { class: "card job-logs", testid: "job-logs" },
      h("div", { class: "card-head" }, h("h3", {}, "Logs"), select, streamSelect, h("span", { class: "spacer" }), status),
      cut,
      view,
    ),
    setReplicas: (names) => {
      const wanted = names.includes(replica) || !names.length ? replica : (names[0] ?? "");
      const current = [...select.options].map((option) => option.value);
      if (current.join() !== names.join()) {
        replace(select, names.map((name) => h("option", { value: name, selected: name === wanted }, name)));
      }
      if (wanted !== replica) choose(wanted);
      else if (connection === null) restart();
    },
    select: (name) => choose(name),
    replica: () => replica,
    jobEnded: () => {
      if (ended) return;
      ended = true;
      if (connection !== null) restart(); // drop the follow; read the whole tail once
    },
  };
}
