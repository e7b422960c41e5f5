// "NKI Agent: Show kernel report": one webview panel per document, drawn from the server's
// `nki/kernelReport` (reportHtml.ts renders it). Scripts, command URIs and local resources are all
// off in the webview; the page's CSP allows only its nonce'd style and data: images. The panel is
// redrawn when it becomes visible again and after each agent result or verification of its document;
// only the command (`show`) asks the server to estimate the engine timeline when no run has one (a
// sandboxed run), redraws reuse it.
// The server knows only open documents (`nki/kernelReport` of a closed one is an error) and forgets a
// document's runs when it closes. So when the source is closed (its preview tab replaced, its tab closed)
// the page keeps its last content and says the source is closed, without asking the server; when the
// file is opened again the page is redrawn, and until the reopened file has runs of its own it keeps
// showing the earlier ones, saying so.
import * as vscode from 'vscode';
import { fileName } from './fixPreview';
import { KernelReport, ReportNotice, makeNonce, renderReport } from './reportHtml';

/** The server's report of `uri` (`timeline`: estimate the engine timeline if no run has one), or why not. */
export type FetchReport = (uri: string, timeline: boolean) => Promise<KernelReport | string>;
/** Is the document open in the editor (so the server has it)? */
export type IsOpen = (uri: string) => boolean;

export const CLOSED_NOTICE = 'The source file is closed: this is the report as it was last shown. ' +
  'Open the file again to refresh it.';
export const REOPENED_NOTICE = 'The source file was closed and opened again: the runs below are from before it was ' +
  'closed; the next simulation or verification starts a new history.';
/** The server's answer for a document it does not have open (server/handlers/kernel_report.py). */
const NOT_OPEN = /needs the URI of an open document/;
const REOPEN_RETRY_MS = 250;

const emptyReport = (uri: string): KernelReport =>
  ({ uri, path: uri, version: 0, task: '', runs: [], timeline_svg: '', timeline_of: null, mismatch_of: null });

export class KernelReportPanels implements vscode.Disposable {
  private readonly panels = new Map<string, vscode.WebviewPanel>();
  /** The last report each panel drew from the server. */
  private readonly last = new Map<string, KernelReport>();
  /** Panels whose source was closed since their last report (they keep showing it). */
  private readonly closed = new Set<string>();

  constructor(private readonly fetch: FetchReport, private readonly isOpen: IsOpen = () => true) {}

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
      p.onDidDispose(() => {
        if (this.panels.get(uri) === p) {
          this.panels.delete(uri);
          this.last.delete(uri);
          this.closed.delete(uri);
        }
      });
      p.onDidChangeViewState((e) => { if (e.webviewPanel.visible) void this.refresh(uri); });
    } else {
      panel.reveal(undefined, true);
    }
    await this.refresh(uri, true);
  }

  async refresh(uri: string, timeline = false, retries = 3): Promise<void> {
    const panel = this.panels.get(uri);
    if (panel === undefined) {
      return;
    }
    if (!this.isOpen(uri)) {
      this.showClosed(uri);
      return;
    }
    const report = await this.fetch(uri, timeline).catch((e: unknown) => (e instanceof Error ? e.message : String(e)));
    if (this.panels.get(uri) !== panel) {
      return; // closed meanwhile
    }
    if (typeof report === 'string' && NOT_OPEN.test(report) && this.isOpen(uri) && retries > 0) {
      // just opened again: the language client's didOpen may reach the server after this request
      await new Promise((r) => setTimeout(r, REOPEN_RETRY_MS));
      return this.refresh(uri, timeline, retries - 1);
    }
    if (!this.isOpen(uri) || (typeof report === 'string' && NOT_OPEN.test(report))) {
      this.showClosed(uri); // the source closed while the server was asked: its answer is not drawn over the note
      return;
    }
    if (typeof report === 'string') {
      this.draw(panel, this.last.get(uri) ?? emptyReport(uri), { text: `The server could not make the report: ${report}`, bad: true });
      return;
    }
    const earlier = this.last.get(uri);
    if (this.closed.has(uri) && report.runs.length === 0 && earlier !== undefined && earlier.runs.length > 0) {
      this.draw(panel, earlier, { text: REOPENED_NOTICE }); // the server forgot the runs when the file closed
      return;
    }
    this.closed.delete(uri);
    this.last.set(uri, report);
    this.draw(panel, report);
  }

  /** Tabs or documents opened or closed: a panel whose source is no longer open says so (keeping its last
   *  report); one whose source is open again asks the server again. */
  async reconcile(): Promise<void> {
    const redraws: Promise<void>[] = [];
    for (const uri of this.panels.keys()) {
      const open = this.isOpen(uri);
      if (!open && !this.closed.has(uri)) {
        this.showClosed(uri);
      } else if (open && this.closed.has(uri)) {
        redraws.push(this.refresh(uri));
      }
    }
    await Promise.all(redraws);
  }

  private showClosed(uri: string): void {
    const panel = this.panels.get(uri);
    if (panel === undefined) {
      return;
    }
    this.closed.add(uri);
    this.draw(panel, this.last.get(uri) ?? emptyReport(uri), { text: CLOSED_NOTICE });
  }

  private draw(panel: vscode.WebviewPanel, report: KernelReport, notice?: ReportNotice): void {
    panel.webview.html = renderReport(report, makeNonce(), notice);
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
    this.last.clear();
    this.closed.clear();
  }
}
