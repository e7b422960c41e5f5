import * as assert from 'node:assert/strict';
import { test } from 'node:test';
import { AgentFixEdit, Decision, FixPreview, LspTextEdit, PreviewDocs, PreviewUi, agentFixEdit, applyEdits, contentHash, fileName } from '../src/fixPreview';
import { AGENT_FIX_LABEL, AGENT_FIX_REJECTED } from '../src/ids';
import { askInNotification } from '../src/previewUi';
import { fake } from './fake-vscode';

const edit = (l1: number, c1: number, l2: number, c2: number, newText: string): LspTextEdit =>
  ({ range: { start: { line: l1, character: c1 }, end: { line: l2, character: c2 } }, newText });

test('the agent fix is recognised by its label and shape; any other edit is left to the client', () => {
  const change = { textDocument: { uri: 'file:///k.py', version: 3 }, edits: [edit(0, 0, 0, 1, 'x')] };
  assert.deepEqual(agentFixEdit({ label: AGENT_FIX_LABEL, edit: { documentChanges: [change] } }),
    { uri: 'file:///k.py', version: 3, edits: change.edits });
  assert.equal(agentFixEdit({ label: 'Rename', edit: { documentChanges: [change] } }), undefined);
  assert.equal(agentFixEdit({ label: AGENT_FIX_LABEL, edit: { changes: {} } }), undefined);
  assert.equal(agentFixEdit({ label: AGENT_FIX_LABEL, edit: { documentChanges: [change, change] } }), undefined);
  assert.equal(agentFixEdit({ label: AGENT_FIX_LABEL, edit: { documentChanges: [{ kind: 'create', uri: 'file:///x' }] } }), undefined);
  assert.equal(agentFixEdit(undefined), undefined);
  assert.equal(agentFixEdit({ label: AGENT_FIX_LABEL, edit: { documentChanges: [{ ...change, textDocument: { uri: 'file:///k.py', version: null } }] } })?.version, null);
});

test('edits apply as an editor applies them: UTF-16 columns, CRLF, several lines, clamped positions', () => {
  assert.equal(applyEdits('a and b\nc\n', [edit(0, 2, 0, 5, '&')]), 'a & b\nc\n');
  assert.equal(applyEdits('x\r\ny = 1\r\nz\r\n', [edit(1, 4, 1, 5, '2')]), 'x\r\ny = 2\r\nz\r\n');
  assert.equal(applyEdits('😀 = 1\n', [edit(0, 5, 0, 6, '2')]), '😀 = 2\n'); // the emoji is two UTF-16 units
  assert.equal(applyEdits('one\ntwo\nthree', [edit(0, 3, 2, 0, '-'), edit(2, 5, 2, 5, '!')]), 'one-three!');
  assert.equal(applyEdits('ab\n', [edit(0, 99, 7, 0, 'Z')]), 'abZ');
  assert.notEqual(contentHash('a'), contentHash('a '));
  assert.equal(fileName('file:///ws/my%20kernel.py'), 'my kernel.py');
  assert.equal(fileName('file:///ws/bad%E0.py'), 'bad%E0.py');
});

class Doc { constructor(public version: number, public text: string) {} getText(): string { return this.text; } }

function harness(doc: Doc | undefined) {
  const applied: LspTextEdit[][] = [];
  const shown: { original: string; proposed: string; name: string }[] = [];
  const asks: ((d: Decision | undefined) => void)[] = [];
  /** Per question asked: closed yet? */
  const questions: boolean[] = [];
  let done = 0;
  const previewed: string[] = [];
  const docs: PreviewDocs = {
    find: () => doc,
    apply: async (_uri, edits) => { applied.push([...edits]); if (doc) doc.text = applyEdits(doc.text, edits); return true; },
  };
  const ui: PreviewUi = {
    showDiff: async (_uri, original, proposed, name) => { shown.push({ original, proposed, name }); },
    ask: () => {
      const i = questions.push(false) - 1;
      return { answer: new Promise<Decision | undefined>((r) => asks.push(r)), close: () => { questions[i] = true; } };
    },
    done: async () => { done += 1; },
  };
  const preview = new FixPreview(docs, ui, (uri) => previewed.push(uri));
  return { preview, applied, shown, asks, questions, previewed, get done() { return done; } };
}

const FIX: AgentFixEdit = { uri: 'file:///ws/k.py', version: 4, edits: [edit(1, 7, 1, 10, '&')] };
const TEXT = 'import x\nm = hi and lo\n';
const tick = () => new Promise((r) => setImmediate(r));

test('Accept: the diff shows current vs proposed, then ONE edit is applied', async () => {
  const doc = new Doc(4, TEXT);
  const h = harness(doc);
  const answer = h.preview.handle(FIX);
  await tick();
  assert.deepEqual(h.shown, [{ original: TEXT, proposed: 'import x\nm = hi & lo\n', name: 'k.py' }]);
  assert.deepEqual(h.previewed, [FIX.uri]);
  assert.equal(h.preview.open, true);
  h.asks[0]('accept');
  assert.deepEqual(await answer, { applied: true });
  assert.deepEqual(h.applied, [FIX.edits]);
  assert.equal(doc.text, 'import x\nm = hi & lo\n');
  assert.equal(h.done, 1);
  assert.equal(h.preview.open, false);
});

test('Reject answers "rejected by the user" (not stale) and applies nothing', async () => {
  const h = harness(new Doc(4, TEXT));
  const answer = h.preview.handle(FIX);
  await tick();
  h.asks[0]('reject');
  assert.deepEqual(await answer, { applied: false, failureReason: AGENT_FIX_REJECTED });
  assert.deepEqual(h.applied, []);
});

test('typing during the preview (a new version) or a changed text at the same version: stale, nothing applied', async () => {
  for (const typed of [(d: Doc) => { d.version += 1; d.text += '# typed\n'; }, (d: Doc) => { d.text = d.text.replace('import', 'imp0rt'); }]) {
    const doc = new Doc(4, TEXT);
    const h = harness(doc);
    const answer = h.preview.handle(FIX);
    await tick();
    typed(doc);
    h.asks[0]('accept');
    const res = await answer;
    assert.equal(res.applied, false);
    assert.match(res.failureReason ?? '', /^stale: the document changed during the preview/);
    assert.deepEqual(h.applied, []);
  }
});

test('an edit for another version, or a closed document, is stale at once: no diff shown', async () => {
  const h = harness(new Doc(5, TEXT));
  assert.match((await h.preview.handle(FIX)).failureReason ?? '', /^stale: the document changed while the agent ran/);
  const closed = harness(undefined);
  assert.match((await closed.preview.handle(FIX)).failureReason ?? '', /^stale: the document is not open/);
  assert.deepEqual([...h.shown, ...closed.shown], []);
});

test('a dismissed message leaves the decision to the commands; a newer fix replaces an unanswered one', async () => {
  const h = harness(new Doc(4, TEXT));
  const first = h.preview.handle(FIX);
  await tick();
  h.asks[0](undefined); // dismissed
  await tick();
  assert.equal(h.preview.open, true);
  assert.equal(h.preview.decide('accept', 'file:///other.py'), false);
  const second = h.preview.handle(FIX);
  assert.deepEqual(await first, { applied: false, failureReason: AGENT_FIX_REJECTED });
  await tick();
  assert.equal(h.preview.decide('accept'), true);
  assert.deepEqual(await second, { applied: true });
  assert.equal(h.preview.decide('accept'), false);
});

test('the Accept / Reject question is closed whichever way the decision comes: its answer, the commands, a newer fix', async () => {
  for (const how of ['answer accept', 'answer reject', 'command accept', 'command reject'] as const) {
    const h = harness(new Doc(4, TEXT));
    const answer = h.preview.handle(FIX);
    await tick();
    assert.deepEqual(h.questions, [false]); // on screen while the preview waits
    const decision = how.endsWith('accept') ? 'accept' : 'reject';
    if (how.startsWith('answer')) {
      h.asks[0](decision);
    } else {
      assert.equal(h.preview.decide(decision), true); // the title bar's buttons, the palette, closing the diff
    }
    assert.equal((await answer).applied, decision === 'accept', how);
    assert.deepEqual(h.questions, [true], how);
  }
  const h = harness(new Doc(4, TEXT));
  const first = h.preview.handle(FIX);
  await tick();
  const second = h.preview.handle(FIX);
  await first;
  await tick();
  assert.deepEqual(h.questions, [true, false]); // the older question went with its preview
  h.preview.decide('accept');
  await second;
  assert.deepEqual(h.questions, [true, true]);
});

test('the question in VS Code: a progress notification with Accept / Reject command links, gone on close; Cancel rejects', async () => {
  fake.reset();
  const q = askInNotification('k.py');
  await tick();
  assert.equal(fake.progressOpen, 1);
  assert.deepEqual(fake.progress, ["begin NKI Agent: apply the agent's verified fix to k.py? (cancellable)",
    '[Accept](command:nkiAgent.acceptFix) · [Reject](command:nkiAgent.rejectFix)']);
  q.close(); // decided elsewhere (the diff's title bar, the palette)
  assert.equal(await q.answer, undefined);
  await tick();
  assert.equal(fake.progressOpen, 0);
  const cancelled = askInNotification('k.py');
  await tick();
  fake.cancels.at(-1)!();
  assert.equal(await cancelled.answer, 'reject');
  cancelled.close();
  await tick();
  assert.equal(fake.progressOpen, 0);
});
