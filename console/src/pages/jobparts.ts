// What the Jobs pages share: state badges, the "training is not here" notice, and the poller
// that refreshes a view every 2 s while something in it has not ended.

import { ApiError } from "../api";
import { h } from "../h";
import { jobStateName, trainingUnavailable } from "../jobs";
import type { Scope } from "../scope";
import { errorBox } from "../ui";

/** How often a view with a job that has not ended refetches (the training API has no stream). */
export const POLL_MS = 2000;
/** How long to wait before asking an unavailable training API again. */
export const RETRY_MS = 5000;

export function jobStateBadge(state: string): HTMLElement {
  const name = jobStateName(state);
  return h("span", { class: `badge job-${name.toLowerCase()}`, testid: "job-state", dataset: { state } }, name);
}

export function replicaStateBadge(state: string): HTMLElement {
  return h("span", { class: `badge replica-${state.toLowerCase()}`, testid: "replica-state", dataset: { state } }, state);
}

/** Why the page is empty when the training API did not answer: a sentence, then the error. */
export function unavailableNotice(error: unknown): HTMLElement {
  const missing = error instanceof ApiError && error.status === 404;
  return h(
    "div",
    { class: "notice", testid: "jobs-unavailable" },
    h("b", {}, "The training service is unavailable."),
    " ",
    missing
      ? "This address does not serve the training API (start the platform with `mldiag up`, which routes it, or check the ingress)."
      : "It did not answer; the page tries again every few seconds.",
    errorBox(error),
  );
}

/** What a training view shows when a load failed: {@link unavailableNotice} when the training API is absent or down, else the error. */
export function trainingErrorNotice(error: unknown): HTMLElement {
  return trainingUnavailable(error) ? unavailableNotice(error) : errorBox(error);
}

export type PollState = "polling" | "idle" | "retrying";

/**
 * The "● live" mark of a polled view and the {@link Poller} callback that keeps it current;
 * `idle` is what it reads once nothing shown is still going.
 */
export function liveMark(title: string, idle: string): { el: HTMLElement; onState: (state: PollState) => void } {
  const el = h("span", { class: "live", testid: "live", title });
  const onState = (state: PollState): void => {
    el.className = `live ${state === "polling" ? "live" : ""}`;
    el.dataset["state"] = state;
    el.textContent = state === "polling" ? "● live" : state === "retrying" ? "○ retrying" : idle;
  };
  return { el, onState };
}

/**
 * Runs `load` now, then again every {@link POLL_MS} while it answers true (something shown has
 * not ended); stops when it answers false. A load that throws an "unavailable" error is retried
 * after {@link RETRY_MS}; any other error stops (the view shows it). `now()` refreshes at once.
 */
export class Poller {
  private timer: ReturnType<typeof setTimeout> | undefined;
  private running = false;
  private again = false;

  constructor(
    private readonly scope: Scope,
    private readonly load: () => Promise<boolean>,
    private readonly onState: (state: PollState) => void = () => {},
  ) {
    scope.add(() => clearTimeout(this.timer));
  }

  now(): void {
    if (this.scope.disposed) return;
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.running) {
      this.again = true;
      return;
    }
    void this.tick();
  }

  private async tick(): Promise<void> {
    this.running = true;
    let wait: number | null;
    try {
      wait = (await this.load()) ? POLL_MS : null;
    } catch (error) {
      wait = trainingUnavailable(error) ? RETRY_MS : null;
    } finally {
      this.running = false;
    }
    if (this.scope.disposed) return;
    if (this.again) {
      this.again = false;
      void this.tick();
      return;
    }
    this.onState(wait === POLL_MS ? "polling" : wait === null ? "idle" : "retrying");
    if (wait !== null) this.timer = setTimeout(() => this.now(), wait);
  }
}
