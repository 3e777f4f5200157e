/**
 * Running a cell in a paused runtime's notebook resumes the runtime (resumeOnRun.ts), and
 * only then: a notebook of a live runtime, or of none, starts its kernel as JupyterLab does.
 */

import type { NotebookPanel } from '@jupyterlab/notebook';

import type { PanelState } from '../src/state/panelState';
import { installResumeOnRun } from '../src/resumeOnRun';

interface IFakeRuntime {
  runtime_id: string;
  status: string;
}

/** A notebook panel, the panel state and a resumer, recording what was called. */
function setUp(known: IFakeRuntime | undefined, onServer: IFakeRuntime | undefined) {
  const calls: string[] = [];
  let runtime = known;
  const state = {
    runtimeForPath: (path: string) => (path === 'work.ipynb' ? runtime : undefined),
    cache: {
      refresh: () => {
        calls.push('refresh');
        runtime = onServer;
        return Promise.resolve();
      }
    }
  } as unknown as PanelState;
  const sessionContext = {
    startKernel: () => {
      calls.push('start a new kernel');
      return Promise.resolve(false);
    }
  };
  const panel = {
    sessionContext,
    context: { path: 'work.ipynb' }
  } as unknown as NotebookPanel;
  const resumer = {
    resume: (runtimeId: string) => {
      calls.push(`resume ${runtimeId}`);
      return Promise.resolve();
    }
  };
  const undo = installResumeOnRun(panel, state, resumer);
  return { calls, panel, undo };
}

describe('installResumeOnRun', () => {
  it('resumes a paused runtime instead of starting a new kernel', async () => {
    const { calls, panel } = setUp({ runtime_id: 'r1', status: 'paused' }, undefined);
    expect(await panel.sessionContext.startKernel()).toBe(false);
    expect(calls).toEqual(['resume r1']);
  });

  it('asks the server when the panel does not know the notebook yet', async () => {
    const { calls, panel } = setUp(undefined, { runtime_id: 'r2', status: 'paused' });
    await panel.sessionContext.startKernel();
    expect(calls).toEqual(['refresh', 'resume r2']);
  });

  it('starts a kernel as before for a live runtime or none', async () => {
    const live = setUp({ runtime_id: 'r3', status: 'idle' }, undefined);
    await live.panel.sessionContext.startKernel();
    expect(live.calls).toEqual(['start a new kernel']);
    const none = setUp(undefined, undefined);
    await none.panel.sessionContext.startKernel();
    expect(none.calls).toEqual(['refresh', 'start a new kernel']);
  });

  it('can be undone', async () => {
    const { calls, panel, undo } = setUp({ runtime_id: 'r4', status: 'paused' }, undefined);
    undo();
    await panel.sessionContext.startKernel();
    expect(calls).toEqual(['start a new kernel']);
  });
});
