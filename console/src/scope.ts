// A page's lifetime: an abort signal for its fetches and the cleanups to run when it goes.

export class Scope {
  private readonly controller = new AbortController();
  private cleanups: (() => void)[] = [];

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  get disposed(): boolean {
    return this.controller.signal.aborted;
  }

  /** Run `cleanup` when the scope is disposed (at once if it already is). */
  add(cleanup: () => void): void {
    if (this.disposed) cleanup();
    else this.cleanups.push(cleanup);
  }

  /** A scope that ends with this one, or earlier. */
  child(): Scope {
    const child = new Scope();
    this.add(() => child.dispose());
    return child;
  }

  dispose(): void {
    if (this.disposed) return;
    this.controller.abort();
    const cleanups = this.cleanups.reverse();
    this.cleanups = [];
    for (const cleanup of cleanups) cleanup();
  }
}
