// Early reads: the GETs the first page will make, started by a tiny script inlined in
// index.html (see prefetchboot.ts and build.mjs) while the app's bundle still downloads and
// compiles, then handed to the API client when it asks for the same URL.
//
// Only reads that a signed-in visit makes anyway are started (the caller, and the run and its
// metric list on a run's metrics tab): a stale or refused token costs the same requests the
// app would have made, and an answer nobody takes expires unused.

import type { Answer } from "./api";
import { runPath } from "./paths";
import { parseHash } from "./router";
import { storedToken } from "./token";

/** An answer taken later than this after its request went out is not used (refetched). */
export const PREFETCH_MAX_AGE_MS = 10_000;

interface Early {
  /** Read whole as soon as it comes, so whoever takes it has it at once. */
  answer: Promise<Answer>;
  token: string;
  startedAt: number;
}

/** Where the inline script leaves its requests for the app's bundle (another script). */
const SLOT = "__mldiagPrefetch";

type Slot = Map<string, Early>;

function slot(create: boolean): Slot | null {
  const holder = globalThis as unknown as Record<string, Slot | undefined>;
  const existing = holder[SLOT];
  if (existing || !create) return existing ?? null;
  const made: Slot = new Map();
  holder[SLOT] = made;
  return made;
}

/** The GETs the page at `hash` makes first, for a signed-in caller (none for a share link). */
export function firstReads(hash: string): string[] {
  const route = parseHash(hash);
  if (route.page === "share" || route.page === "runbook") return [];
  const reads = ["/v1/caller"];
  if (route.page === "run") {
    // the metric list first: it is what the first chart waits for
    if (route.tab === "metrics") reads.push(runPath(route.runId, "/metrics"));
    reads.push(runPath(route.runId));
  }
  return reads;
}

/** Start the first page's reads with the stored token; nothing without one. */
export function startPrefetch(hash: string = location.hash, now: () => number = () => performance.now()): void {
  const token = storedToken();
  if (!token) return;
  const early = slot(true);
  if (!early) return;
  for (const url of firstReads(hash)) {
    const answer = fetch(url, { headers: { Authorization: `Bearer ${token}` } }).then(async (response) => ({
      ok: response.ok,
      status: response.status,
      statusText: response.statusText,
      text: await response.text(),
    }));
    answer.catch(() => undefined); // a failure is seen (and reported) by whoever takes it
    early.set(url, { answer, token, startedAt: now() });
  }
}

/**
 * The early answer for `url` sent with `token`'s header, at most once; null when there is
 * none, it is too old, or it was sent with another token.
 */
export function takePrefetched(url: string, token: string, now: () => number = () => performance.now()): Promise<Answer> | null {
  const early = slot(false);
  const entry = early?.get(url);
  if (!early || !entry) return null;
  early.delete(url);
  if (now() - entry.startedAt > PREFETCH_MAX_AGE_MS || entry.token !== token) return null;
  return entry.answer;
}
