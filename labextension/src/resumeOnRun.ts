/**
 * Running a cell in a paused runtime's notebook resumes the runtime first (intercept).
 *
 * A paused runtime's notebook stays open without a kernel. When a cell runs there,
 * JupyterLab's cell executor calls `sessionContext.startKernel()`, which would start a
 * new Jupyter session: a new, empty runtime beside the paused one, the user's variables
 * left behind. So each notebook's `startKernel` is wrapped (on the instance, once the
 * notebook has finished opening, so opening a paused notebook does not resume it): when
 * the notebook's runtime is paused, the runtime is resumed and the notebook reattached to
 * it (the Resume action, with its notification), and the cell then runs on the resumed
 * kernel. A resume that fails leaves the notebook without a kernel and the cell not run;
 * the error is in the notification. Notebooks of no paused runtime start kernels as before.
 */

import type { ISessionContext } from '@jupyterlab/apputils';
import type { NotebookPanel } from '@jupyterlab/notebook';

import type { PanelState } from './state/panelState';

/** What the intercept needs of RuntimeActions. */
export interface IResumer {
  resume(runtimeId: string): Promise<void>;
}

/** The paused runtime of a notebook without a kernel, asking the server when unknown. */
async function pausedRuntimeId(state: PanelState, path: string): Promise<string | null> {
  let runtime = state.runtimeForPath(path);
  if (!runtime) {
    await state.cache.refresh();
    runtime = state.runtimeForPath(path);
  }
  return runtime?.status === 'paused' ? runtime.runtime_id : null;
}

/** Wrap `startKernel` of one notebook's session context; returns the undo. */
export function installResumeOnRun(
  panel: NotebookPanel,
  state: PanelState,
  resumer: IResumer
): () => void {
  const context: ISessionContext = panel.sessionContext;
  // Kept unbound, so the undo puts back the very method; it is called with .call(context).
  // eslint-disable-next-line @typescript-eslint/unbound-method
  const original = context.startKernel;
  const startKernel = async (): Promise<boolean> => {
    const runtimeId = await pausedRuntimeId(state, panel.context.path);
    if (runtimeId === null) {
      return original.call(context);
    }
    await resumer.resume(runtimeId);
    return false; // false: no kernel dialog; without a kernel now, the cell is not run
  };
  context.startKernel = startKernel;
  return () => {
    if (context.startKernel === startKernel) {
      context.startKernel = original;
    }
  };
}
