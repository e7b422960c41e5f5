// "NKI Agent: Show kernel report": one webview panel per document, drawn from the server's
// `nki/kernelReport` (reportHtml.ts renders it). Scripts, command URIs and local resources are all
// off in the webview; the page's CSP allows only its nonce'd style and data: images. The panel is
// redrawn when it becomes visible again and after each agent result or verification of its document;
// only the command (`show`) asks the server to estimate the engine timeline when no run has one (a
// sandboxed run), redraws reuse it.
import * as vscode from 'vscode';
import { fileName } from './fixPreview';
import { KernelReport, escapeHtml, makeNonce, renderReport } from './reportHtml';

/** The server's report of `uri` (`timeline`: estimate the engine timeline if no run has one), or why not. */
export type FetchReport = (uri: string, timeline: boolean) => Promise<KernelReport | string>;

export class KernelReportPanels implements vscode.Disposable {
  private readonly panels = new Map<string, vscode.WebviewPanel>();

  constructor(private readonly fetch: FetchReport) {}

  get open(): string[] {
    return [...this.panels.keys()];
  }

  async show(uri: string): Promise<void> {
    let panel = this.panels.get(uri);
    if (panel === undefined) {
      panel = vscode.window.createWebviewPanel('nkiAgent.kernelReport', `NKI report: ${fileName(uri)}`,
        { viewColumn: vscode.ViewColumn.Beside, preserveFocus: true },
        { enableScripts: false, enableCommandUris: false, enableForms: false, localResourceRoots: [] });
      this.panels.set(uri, panel);
      const p = panel;
      p.onDidDispose(() => { if (this.panels.get(uri) === p) this.panels.delete(uri); });
      p.onDidChangeViewState((e) => { if (e.webviewPanel.visible) void this.refresh(uri); });
    } else {
      panel.reveal(undefined, true);
    }
    await this.refresh(uri, true);
  }

  async refresh(uri: string, timeline = false): Promise<void> {
    const panel = this.panels.get(uri);
    if (panel === undefined) {
      return;
    }
    const report = await this.fetch(uri, timeline).catch((e: unknown) => (e instanceof Error ? e.message : String(e)));
    if (this.panels.get(uri) !== panel) {
      return; // closed meanwhile
    }
    const nonce = makeNonce();
    panel.webview.html = typeof report === 'string'
      ? renderReport({ uri, path: uri, version: 0, task: '', runs: [], timeline_svg: '', timeline_of: null, mismatch_of: null }, nonce)
        .replace('<h2>Verification history</h2>', `<p class="bad">The server could not make the report: ${escapeHtml(report)}</p><h2>Verification history</h2>`)
      : renderReport(report, nonce);
  }

  refreshAll(): void {
    for (const uri of this.panels.keys()) {
      void this.refresh(uri);
    }
  }

  dispose(): void {
    for (const p of [...this.panels.values()]) {
      p.dispose();
    }
    this.panels.clear();
  }
}
