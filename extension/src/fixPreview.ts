// The agent fix's diff preview: the server's `workspace/applyEdit` labelled "NKI Agent: fix kernel" is
// intercepted (client.ts, the language client's `handleApplyEdit` middleware), shown as a diff of the
// current text against the proposed one (`vscode.diff` of two virtual documents, scheme nki-agent-fix),
// and applied only on Accept — as ONE WorkspaceEdit, so one undo restores the previous text.
// Before applying, the document's version AND a SHA-256 of its text must still be those the preview
// showed (VS Code can apply a versioned edit after the user typed, microsoft/vscode#317275); on a
// mismatch nothing is applied and the answer is "stale" (the server then offers Rerun, once). Reject
// answers `AGENT_FIX_REJECTED`, which the server tells apart from stale. Whichever way the decision comes
// (the question's own buttons, the commands and the diff's title buttons, closing the diff, a newer fix),
// the question is closed with the diff: it never outlives its preview. Pure logic here; the VS Code
// calls sit behind `PreviewUi` / `PreviewDocs` (extension.ts), so the unit tests drive it with fakes.
import { createHash } from 'crypto';
import { AGENT_FIX_LABEL, AGENT_FIX_REJECTED } from './ids';

export interface LspPosition { line: number; character: number }
export interface LspTextEdit { range: { start: LspPosition; end: LspPosition }; newText: string }

/** The agent's fix: edits of one document, pinned to the version the agent ran on (null: unpinned). */
export interface AgentFixEdit { uri: string; version: number | null; edits: LspTextEdit[] }

export interface ApplyResult { applied: boolean; failureReason?: string }

export type Decision = 'accept' | 'reject';

/** The agent's fix in a workspace/applyEdit request, or undefined for any other edit (applied as usual). */
export function agentFixEdit(params: unknown): AgentFixEdit | undefined {
  const p = params as { label?: unknown; edit?: { documentChanges?: unknown } } | undefined;
  if (p?.label !== AGENT_FIX_LABEL || !Array.isArray(p.edit?.documentChanges) || p.edit.documentChanges.length !== 1) {
    return undefined;
  }
  const change = p.edit.documentChanges[0] as { textDocument?: { uri?: unknown; version?: unknown }; edits?: unknown };
  if (typeof change?.textDocument?.uri !== 'string' || !Array.isArray(change.edits)) {
    return undefined;
  }
  const edits = change.edits.filter((e): e is LspTextEdit => typeof (e as LspTextEdit)?.newText === 'string' &&
    typeof (e as LspTextEdit).range?.start?.line === 'number' && typeof (e as LspTextEdit).range?.end?.line === 'number');
  if (edits.length !== change.edits.length) {
    return undefined; // annotated or snippet edits: not the agent's, leave them to the client
  }
  const v = change.textDocument.version;
  return { uri: change.textDocument.uri, version: typeof v === 'number' ? v : null, edits };
}

/** Offsets of each line's start (LSP line ends: \r\n, \r, \n). */
function lineStarts(text: string): number[] {
  const starts = [0];
  const re = /\r\n|\r|\n/g;
  for (let m = re.exec(text); m !== null; m = re.exec(text)) {
    starts.push(m.index + m[0].length);
  }
  return starts;
}

/** The offset of an LSP position (UTF-16 code units, as JS strings count them), clamped to its line. */
export function offsetAt(text: string, pos: LspPosition, starts = lineStarts(text)): number {
  if (pos.line >= starts.length) {
    return text.length;
  }
  const start = starts[Math.max(0, pos.line)];
  const next = pos.line + 1 < starts.length ? starts[pos.line + 1] : text.length;
  const content = text.slice(start, next).replace(/(\r\n|\r|\n)$/, '').length;
  return start + Math.min(Math.max(0, pos.character), content);
}

/** `text` with the (non-overlapping) edits applied, as an editor applies them. */
export function applyEdits(text: string, edits: readonly LspTextEdit[]): string {
  const starts = lineStarts(text);
  const spans = edits.map((e) => ({ s: offsetAt(text, e.range.start, starts), e: offsetAt(text, e.range.end, starts), t: e.newText }))
    .sort((a, b) => b.s - a.s || b.e - a.e);
  let out = text;
  for (const { s, e, t } of spans) {
    out = out.slice(0, s) + t + out.slice(e);
  }
  return out;
}

export function contentHash(text: string): string {
  return createHash('sha256').update(text, 'utf8').digest('hex');
}

export interface PreviewDoc { version: number; getText(): string }

export interface PreviewDocs {
  /** The open document, or undefined. */
  find(uri: string): PreviewDoc | undefined;
  /** Apply `edits` to the document as ONE WorkspaceEdit (one undo step); false when VS Code refuses. */
  apply(uri: string, edits: readonly LspTextEdit[]): Promise<boolean>;
}

/** The Accept / Reject question on screen: its own answer (undefined: none, the commands still decide), and
 *  how to take it off the screen once the decision is made elsewhere. */
export interface Question {
  answer: Thenable<Decision | undefined>;
  close(): void;
}

export interface PreviewUi {
  /** Open the diff editor: `original` (the current text) against `proposed`; `name` is the file's name. */
  showDiff(uri: string, original: string, proposed: string, name: string): Promise<void>;
  /** Show the Accept / Reject question (shown until `close`). */
  ask(name: string): Question;
  /** Close the diff editor and clear the context key. */
  done(): Promise<void>;
}

export class FixPreview {
  private pending: { uri: string; resolve(d: Decision): void } | undefined;

  constructor(private readonly docs: PreviewDocs, private readonly ui: PreviewUi,
    private readonly onPreview: (uri: string) => void = () => undefined) {}

  /** Is a preview waiting for Accept / Reject? */
  get open(): boolean {
    return this.pending !== undefined;
  }

  /** Accept or reject the open preview (commands, the message's buttons, the diff closed). */
  decide(decision: Decision, uri?: string): boolean {
    const p = this.pending;
    if (p === undefined || (uri !== undefined && uri !== p.uri)) {
      return false;
    }
    this.pending = undefined;
    p.resolve(decision);
    return true;
  }

  /** The answer to the server's applyEdit of the agent's fix. */
  async handle(fix: AgentFixEdit): Promise<ApplyResult> {
    const doc = this.docs.find(fix.uri);
    if (doc === undefined) {
      return stale('the document is not open');
    }
    if (fix.version !== null && doc.version !== fix.version) {
      return stale('the document changed while the agent ran');
    }
    const version = doc.version;
    const original = doc.getText();
    const hash = contentHash(original);
    const proposed = applyEdits(original, fix.edits);
    this.decide('reject'); // one preview at a time: a newer fix replaces an unanswered one
    this.onPreview(fix.uri);
    const name = fileName(fix.uri);
    const decision = new Promise<Decision>((resolve) => { this.pending = { uri: fix.uri, resolve }; });
    await this.ui.showDiff(fix.uri, original, proposed, name);
    const question = this.ui.ask(name);
    void Promise.resolve(question.answer).then((d) => { if (d !== undefined) this.decide(d, fix.uri); }, () => undefined);
    const chosen = await decision;
    question.close();
    await this.ui.done();
    if (chosen === 'reject') {
      return { applied: false, failureReason: AGENT_FIX_REJECTED };
    }
    const now = this.docs.find(fix.uri);
    if (now === undefined || now.version !== version || contentHash(now.getText()) !== hash) {
      return stale('the document changed during the preview');
    }
    return (await this.docs.apply(fix.uri, fix.edits)) ? { applied: true } : stale('VS Code refused the edit');
  }
}

/** The file name of a document URI, for titles and messages. */
export function fileName(uri: string): string {
  const last = uri.replace(/[?#].*$/, '').split('/').pop() || uri;
  try {
    return decodeURIComponent(last);
  } catch {
    return last;
  }
}

function stale(why: string): ApplyResult {
  return { applied: false, failureReason: `stale: ${why}` };
}
