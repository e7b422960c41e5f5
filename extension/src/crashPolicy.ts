// The crash-loop policy: a server that dies is restarted, but after `maxCrashes` deaths within
// `windowMs` it is given up on — ONE message ("Show log" / "Restart"), no more restarts — until the
// user restarts it (reset). Pure: time comes from an injected clock.

export type CrashDecision = 'restart' | 'give-up' | 'ignore';

export const MAX_CRASHES = 5;
export const CRASH_WINDOW_MS = 3 * 60_000;

export class CrashPolicy {
  private crashes: number[] = [];
  private gaveUp = false;

  constructor(
    readonly maxCrashes = MAX_CRASHES,
    readonly windowMs = CRASH_WINDOW_MS,
    private readonly now: () => number = Date.now,
  ) {}

  /** One server death: 'restart' it, 'give-up' (the first time the limit is reached: show the message),
   *  or 'ignore' (already given up: no second message, no restart). */
  record(): CrashDecision {
    if (this.gaveUp) {
      return 'ignore';
    }
    const t = this.now();
    this.crashes = this.crashes.filter((c) => t - c < this.windowMs);
    this.crashes.push(t);
    if (this.crashes.length >= this.maxCrashes) {
      this.gaveUp = true;
      return 'give-up';
    }
    return 'restart';
  }

  /** Crashes counted in the current window. */
  get recent(): number {
    const t = this.now();
    return this.crashes.filter((c) => t - c < this.windowMs).length;
  }

  get givenUp(): boolean {
    return this.gaveUp;
  }

  /** The user asked for a restart: start counting afresh. */
  reset(): void {
    this.crashes = [];
    this.gaveUp = false;
  }
}
