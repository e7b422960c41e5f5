// Per-kind inlay toggles: `nkiAgent.inlayHints.<kind>` (booleans, default true) for each kind of hint the
// server emits (server/handlers/inlay_hints.py, built by diagnostics/views/inlay.py):
//   shapes     — `: (128, 512) float32 sbuf` after a tensor assignment (LSP kind Type),
//   tripCounts — ` ×N` after an `affine_range(N)`-style loop (LSP kind Parameter),
//   estimates  — `≈ 41 % · DMA` at the end of a loop header, the cost model's estimate (no LSP kind).
// The language client's `provideInlayHints` middleware (client.ts) drops the hints of disabled kinds; a
// change of these settings refreshes the hints at once, without a restart (extension.ts).
import * as vscode from 'vscode';
import { SECTION } from './ids';

export const INLAY_KINDS = ['shapes', 'tripCounts', 'estimates'] as const;
export type InlayKind = (typeof INLAY_KINDS)[number];

/** The setting key (under `nkiAgent`) of a kind. */
export const inlaySetting = (kind: InlayKind): string => `inlayHints.${kind}`;

/** The server's own kind names (`diagnostics.views.inlay.Hint.kind`), if it sends one in `data.kind`. */
const SERVER_KINDS: Record<string, InlayKind> = { type: 'shapes', parameter: 'tripCounts', cost: 'estimates' };

/** The kind of one hint: the server's `data.kind` when present, else its LSP kind (Type: shapes,
 *  Parameter: trip counts; no kind: the cost model's estimate). */
export function inlayKind(hint: { kind?: number; data?: unknown }): InlayKind {
  const data = hint.data as { kind?: unknown } | undefined;
  if (data !== null && typeof data === 'object' && typeof data.kind === 'string' && data.kind in SERVER_KINDS) {
    return SERVER_KINDS[data.kind];
  }
  return hint.kind === 1 ? 'shapes' : hint.kind === 2 ? 'tripCounts' : 'estimates';
}

/** The kinds switched on: `get(key)` reads a setting under `nkiAgent`; anything but `false` is on. */
export function enabledKinds(get: (key: string) => unknown): Set<InlayKind> {
  return new Set(INLAY_KINDS.filter((k) => get(inlaySetting(k)) !== false));
}

/** `hints` without those of disabled kinds (the same array when every kind is on). */
export function filterHints<H extends { kind?: number; data?: unknown }>(hints: H[] | null | undefined,
  enabled: Set<InlayKind>): H[] | null | undefined {
  if (!hints || enabled.size === INLAY_KINDS.length) {
    return hints;
  }
  return hints.filter((h) => enabled.has(inlayKind(h)));
}

/** The kinds switched on in the current configuration. */
export function configuredKinds(): Set<InlayKind> {
  const cfg = vscode.workspace.getConfiguration(SECTION);
  return enabledKinds((key) => cfg.get(key));
}

/** Does a configuration change touch a toggle? */
export function inlayTogglesChanged(affects: (setting: string) => boolean): boolean {
  return affects(`${SECTION}.inlayHints`);
}
