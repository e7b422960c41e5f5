// What the user is told when the chosen interpreter cannot run the server, and the way out offered:
// one message per problem (no Python, a wrong path, a Python older than 3.11, a Python without the
// package, an interpreter that does not answer) with the buttons that fix it.
import { Interpreter, describeSource } from './interpreter';
import { MIN_PYTHON } from './ids';
import { ProbeResult } from './probe';

export const ACTIONS = {
  install: 'Install NKI Agent into this interpreter',
  select: 'Select interpreter',
  showLog: 'Show log',
} as const;

export type SetupAction = keyof typeof ACTIONS;

export interface SetupProblem {
  message: string;
  actions: SetupAction[];
}

const MIN = `${MIN_PYTHON[0]}.${MIN_PYTHON[1]}`;

/** The message and buttons for an interpreter problem; undefined when the probe found nothing wrong. */
export function setupProblem(interp: Interpreter | undefined, probe: ProbeResult | undefined): SetupProblem | undefined {
  if (interp === undefined) {
    return {
      message: `NKI Agent needs Python ${MIN} or newer to run its language server, and found none (no nkiAgent.interpreter ` +
        'setting, no Python extension environment, no python3 on PATH).',
      actions: ['select', 'showLog'],
    };
  }
  if (probe === undefined || probe.kind === 'ok') {
    return undefined;
  }
  const where = describeSource(interp.source);
  switch (probe.kind) {
    case 'missing':
      return {
        message: interp.source === 'setting'
          ? `NKI Agent: the interpreter in the nkiAgent.interpreter setting does not exist or cannot be run: ${interp.path}`
          : `NKI Agent: cannot run the Python from ${where}: ${interp.path} (${probe.detail})`,
        actions: ['select', 'showLog'],
      };
    case 'too-old':
      return {
        message: `NKI Agent needs Python ${MIN} or newer; ${interp.path} (from ${where}) is Python ${probe.version}.`,
        actions: ['select', 'showLog'],
      };
    case 'no-package':
      return {
        message: `NKI Agent is not installed in ${interp.path} (Python ${probe.version}, from ${where}): ${probe.detail}.`,
        actions: ['install', 'select', 'showLog'],
      };
    case 'failed':
      return {
        message: `NKI Agent: ${interp.path} (from ${where}) did not run as Python: ${probe.detail.split('\n').pop()}`,
        actions: ['select', 'showLog'],
      };
  }
}
