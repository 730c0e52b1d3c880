// Coalesces refetches: at most one run per interval, never two at once, and a trigger that
// arrives while one runs (or too soon after) always gets one trailing run.

export class Throttle {
  private pending = false;
  private running = false;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private lastStart = -Infinity;
  private stopped = false;

  constructor(
    private readonly run: () => Promise<unknown> | unknown,
    private readonly intervalMs = 1000,
  ) {}

  trigger(): void {
    if (this.stopped) return;
    this.pending = true;
    this.pump();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  private pump(): void {
    if (!this.pending || this.running || this.timer !== undefined || this.stopped) return;
    const wait = this.lastStart + this.intervalMs - performance.now();
    if (wait > 0) {
      this.timer = setTimeout(() => {
        this.timer = undefined;
        this.pump();
      }, wait);
      return;
    }
    this.pending = false;
    this.running = true;
    this.lastStart = performance.now();
    void (async () => {
      try {
        await this.run();
      } catch {
        // the runner shows its own errors
      } finally {
        this.running = false;
        this.pump();
      }
    })();
  }
}
