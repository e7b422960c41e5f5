// The VS Code side of the agent fix's diff preview (fixPreview.ts holds the logic): the virtual
// documents of the current and the proposed text (scheme nki-agent-fix, read-only), `vscode.diff`
// between them, the Accept / Reject question, the context key that shows Accept / Reject in the diff's
// title bar, the edit applied as ONE WorkspaceEdit (one undo step), and closing the diff afterwards.
// The question is a progress notification, not a message: VS Code cannot close a message from code, so
// one answered from the diff's title bar or the palette would stay on screen; a progress notification
// ends when its task does. Its Accept / Reject are command links to the same commands as the title
// bar's buttons, and its Cancel rejects.
import * as vscode from 'vscode';
import { Decision, LspTextEdit, PreviewDocs, PreviewUi, Question } from './fixPreview';
import { COMMANDS, PREVIEW_CONTEXT, PREVIEW_SCHEME } from './ids';

export const ACCEPT = 'Accept';
export const REJECT = 'Reject';

/** The question's text: command links to Accept / Reject (the notification renders `[label](command:id)`). */
export function questionText(name: string): { title: string; message: string } {
  return {
    title: `NKI Agent: apply the agent's verified fix to ${name}?`,
    message: `[${ACCEPT}](command:${COMMANDS.acceptFix}) · [${REJECT}](command:${COMMANDS.rejectFix})`,
  };
}

/** The question as a progress notification, shown until `close()`; its Cancel button answers "reject". */
export function askInNotification(name: string): Question {
  let close: () => void = () => undefined;
  const closed = new Promise<void>((resolve) => { close = resolve; });
  const { title, message } = questionText(name);
  const answer = new Promise<Decision | undefined>((resolve) => {
    void vscode.window.withProgress({ location: vscode.ProgressLocation.Notification, title, cancellable: true },
      async (progress, token) => {
        progress.report({ message });
        token.onCancellationRequested(() => resolve('reject'));
        await closed;
        resolve(undefined);
      });
  });
  return { answer, close: () => close() };
}

export class PreviewContent implements vscode.TextDocumentContentProvider {
  private readonly texts = new Map<string, string>();
  private readonly emitter = new vscode.EventEmitter<vscode.Uri>();
  readonly onDidChange = this.emitter.event;

  set(uri: vscode.Uri, text: string): void {
    this.texts.set(uri.toString(), text);
    this.emitter.fire(uri);
  }

  clear(): void {
    this.texts.clear();
  }

  provideTextDocumentContent(uri: vscode.Uri): string {
    return this.texts.get(uri.toString()) ?? '';
  }
}

export interface VscodePreview { docs: PreviewDocs; ui: PreviewUi; isPreviewDiff(tab: vscode.Tab): boolean }

export function vscodePreview(content: PreviewContent): VscodePreview {
  let n = 0;
  let right: vscode.Uri | undefined;
  const isPreviewDiff = (tab: vscode.Tab) => right !== undefined && tab.input instanceof vscode.TabInputTextDiff &&
    tab.input.modified.toString() === right.toString();
  const docs: PreviewDocs = {
    find: (uri) => vscode.workspace.textDocuments.find((d) => d.uri.toString() === uri),
    apply: async (uri, edits: readonly LspTextEdit[]) => {
      const target = vscode.workspace.textDocuments.find((d) => d.uri.toString() === uri)?.uri ?? vscode.Uri.parse(uri);
      const edit = new vscode.WorkspaceEdit();
      for (const e of edits) {
        edit.replace(target, new vscode.Range(e.range.start.line, e.range.start.character, e.range.end.line, e.range.end.character),
          e.newText);
      }
      return vscode.workspace.applyEdit(edit);
    },
  };
  const ui: PreviewUi = {
    showDiff: async (_uri, original, proposed, name) => {
      n += 1;
      const left = vscode.Uri.from({ scheme: PREVIEW_SCHEME, path: `/${n}/current/${name}` });
      right = vscode.Uri.from({ scheme: PREVIEW_SCHEME, path: `/${n}/proposed/${name}` });
      content.set(left, original);
      content.set(right, proposed);
      await vscode.commands.executeCommand('setContext', PREVIEW_CONTEXT, true);
      await vscode.commands.executeCommand('vscode.diff', left, right, `${name}: current ↔ agent's fix (Accept / Reject)`,
        { preview: false });
    },
    ask: askInNotification,
    done: async () => {
      await vscode.commands.executeCommand('setContext', PREVIEW_CONTEXT, false);
      const tabs = vscode.window.tabGroups.all.flatMap((g) => g.tabs).filter(isPreviewDiff);
      right = undefined;
      if (tabs.length) {
        await vscode.window.tabGroups.close(tabs, true);
      }
      content.clear();
    },
  };
  return { docs, ui, isPreviewDiff };
}
