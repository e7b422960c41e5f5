// The VS Code side of the agent fix's diff preview (fixPreview.ts holds the logic): the virtual
// documents of the current and the proposed text (scheme nki-agent-fix, read-only), `vscode.diff`
// between them, the Accept / Reject message, the context key that shows Accept / Reject in the diff's
// title bar, the edit applied as ONE WorkspaceEdit (one undo step), and closing the diff afterwards.
import * as vscode from 'vscode';
import { Decision, LspTextEdit, PreviewDocs, PreviewUi } from './fixPreview';
import { PREVIEW_CONTEXT, PREVIEW_SCHEME } from './ids';

export const ACCEPT = 'Accept';
export const REJECT = 'Reject';

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
    ask: (name) => vscode.window.showInformationMessage(`NKI Agent: apply the agent's verified fix to ${name}?`, ACCEPT, REJECT)
      .then((c): Decision | undefined => (c === ACCEPT ? 'accept' : c === REJECT ? 'reject' : undefined)),
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
