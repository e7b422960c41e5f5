// Test helpers: a manual clock with timers (for the debouncer and the session), and a way to let
// pending promise callbacks run.
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { Timers } from '../src/debounce';

export class FakeClock implements Timers {
  now = 0;
  private next = 1;
  private pending = new Map<number, { at: number; fn: () => void }>();

  set(fn: () => void, ms: number): unknown {
    const id = this.next++;
    this.pending.set(id, { at: this.now + ms, fn });
    return id;
  }

  clear(handle: unknown): void {
    this.pending.delete(handle as number);
  }

  get count(): number {
    return this.pending.size;
  }

  /** Moves time forward, firing due timers in order. */
  advance(ms: number): void {
    const until = this.now + ms;
    for (;;) {
      const due = [...this.pending].filter(([, t]) => t.at <= until).sort((a, b) => a[1].at - b[1].at)[0];
      if (due === undefined) {
        break;
      }
      this.pending.delete(due[0]);
      this.now = due[1].at;
      due[1].fn();
    }
    this.now = until;
  }
}

/** Lets every queued promise continuation run (a few macrotask turns). */
export async function settle(turns = 20): Promise<void> {
  for (let i = 0; i < turns; i++) {
    await new Promise((r) => setImmediate(r));
  }
}

/** A fresh private temporary folder. */
export function tempDir(): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), 'nki-ext-test-'));
}

/** An executable shell script in `dir`. */
export function script(dir: string, name: string, body: string): string {
  const p = path.join(dir, name);
  fs.writeFileSync(p, `#!/bin/sh\n${body}\n`);
  fs.chmodSync(p, 0o755);
  return p;
}
