// Debounced restarts: a burst of triggers (several settings written at once, an interpreter switch
// that fires two events) becomes ONE call, `delayMs` after the last trigger, with every reason given.
// Timers are injected so tests drive a fake clock.

export interface Timers {
  set(fn: () => void, ms: number): unknown;
  clear(handle: unknown): void;
}

export const realTimers: Timers = {
  set: (fn, ms) => setTimeout(fn, ms),
  clear: (h) => clearTimeout(h as ReturnType<typeof setTimeout>),
};

export const RESTART_DELAY_MS = 1000;

export class Debouncer {
  private handle: unknown;
  private reasons: string[] = [];

  constructor(
    private readonly delayMs: number,
    private readonly fn: (reasons: string[]) => void,
    private readonly timers: Timers = realTimers,
  ) {}

  get pending(): boolean {
    return this.handle !== undefined;
  }

  trigger(reason: string): void {
    if (!this.reasons.includes(reason)) {
      this.reasons.push(reason);
    }
    if (this.handle !== undefined) {
      this.timers.clear(this.handle);
    }
    this.handle = this.timers.set(() => this.fire(), this.delayMs);
  }

  /** Runs a pending call now (e.g. the user's explicit Restart). */
  flush(): void {
    if (this.handle !== undefined) {
      this.timers.clear(this.handle);
      this.fire();
    }
  }

  cancel(): void {
    if (this.handle !== undefined) {
      this.timers.clear(this.handle);
    }
    this.handle = undefined;
    this.reasons = [];
  }

  private fire(): void {
    const reasons = this.reasons;
    this.handle = undefined;
    this.reasons = [];
    this.fn(reasons);
  }
}
