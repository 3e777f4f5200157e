/**
 * The open notebooks of a runtime, as documents: what a checkpoint records (the notebook
 * as the user sees it, unsaved edits included), and the one way the panel changes a
 * notebook's cells (bringing a checkpoint's cells back, after a JupyterLab file
 * checkpoint so File > Revert Notebook to Checkpoint gets the user's cells back).
 */

import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';

import { INotebookDocument } from './apiTypes';

/** The open notebooks of a runtime: those on its session, else (no session) on its path. */
export function notebooksOfRuntime(
  tracker: INotebookTracker | null,
  runtimeId: string,
  path?: string | null
): NotebookPanel[] {
  const bySession: NotebookPanel[] = [];
  const byPath: NotebookPanel[] = [];
  tracker?.forEach(panel => {
    if (panel.isDisposed || !panel.context.isReady) {
      return;
    }
    if (panel.sessionContext.session?.id === runtimeId) {
      bySession.push(panel);
    } else if (path && panel.context.path === path && !panel.sessionContext.session) {
      byPath.push(panel);
    }
  });
  return bySession.length > 0 ? bySession : byPath;
}

/** The document of an open notebook as the user sees it now (unsaved edits included). */
export function documentOf(panel: NotebookPanel): INotebookDocument | null {
  const model = panel.context.model;
  return model ? (model.toJSON() as unknown as INotebookDocument) : null;
}

/** The document of the runtime's open notebook (the first, if it is open twice). */
export function runtimeDocument(
  tracker: INotebookTracker | null,
  runtimeId: string,
  path?: string | null
): INotebookDocument | null {
  const [panel] = notebooksOfRuntime(tracker, runtimeId, path);
  return panel ? documentOf(panel) : null;
}

/**
 * Save the notebook and take JupyterLab's file checkpoint of it (what Ctrl+S does), so
 * File > Revert Notebook to Checkpoint brings back the cells it has now. Throws when
 * either fails: the caller then changes nothing.
 */
export async function fileCheckpoint(panel: NotebookPanel): Promise<void> {
  await panel.context.save();
  await panel.context.createCheckpoint();
}

/** The notebook's undo history, where the shared model has one (Yjs documents do). */
interface IUndoCapture {
  stopCapturing(): void;
}

/**
 * Replace the notebook's cells with a document's, in one change of the shared model
 * (the notebook's metadata stays the open notebook's). The change is one step of
 * Edit > Undo Cell Operation on its own: the undo history merges changes made within
 * half a second of each other, so without a stop on both sides one undo could also take
 * back the cell the user ran just before (or a change made just after).
 */
export function replaceCells(panel: NotebookPanel, document: INotebookDocument): void {
  const shared = panel.context.model.sharedModel;
  type Cells = Parameters<typeof shared.insertCells>[1];
  const cells = document.cells.map(cell => ({ ...cell })) as unknown as Cells;
  const history = (shared as { undoManager?: IUndoCapture | null }).undoManager;
  history?.stopCapturing();
  shared.transact(() => {
    shared.deleteCellRange(0, shared.cells.length);
    shared.insertCells(0, cells);
  });
  history?.stopCapturing();
}
