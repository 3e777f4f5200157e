/**
 * Bringing a checkpoint's cells back is one step of Edit > Undo Cell Operation on its own
 * (notebookDocuments.ts): the notebook's undo history (a Yjs UndoManager) merges changes
 * made within half a second of each other, and one undo must give back exactly the cells
 * the user had, not also take back the cell run just before.
 */

import type { NotebookPanel } from '@jupyterlab/notebook';
import * as Y from 'yjs';

import { INotebookDocument } from '../src/apiTypes';
import { replaceCells } from '../src/notebookDocuments';

/** A notebook's shared model the way JupyterLab's is built: cells in a Y.Array, tracked by an
 * UndoManager that merges changes within 500 ms (Yjs's default, which JupyterLab keeps). */
function sharedNotebook(sources: string[]) {
  const doc = new Y.Doc();
  const cells = doc.getArray<string>('cells');
  const origin = {};
  const undoManager = new Y.UndoManager(cells, { trackedOrigins: new Set([origin]) });
  const shared = {
    undoManager,
    get cells() {
      return cells.toArray();
    },
    transact: (change: () => void) => doc.transact(change, origin),
    deleteCellRange: (from: number, to: number) => cells.delete(from, to - from),
    insertCells: (index: number, added: { source: string }[]) =>
      cells.insert(
        index,
        added.map(cell => cell.source)
      )
  };
  shared.transact(() => cells.insert(0, sources));
  const panel = { context: { model: { sharedModel: shared } } } as unknown as NotebookPanel;
  return { shared, panel };
}

function checkpointDocument(sources: string[]): INotebookDocument {
  return {
    cells: sources.map((source, index) => ({
      cell_type: 'code',
      id: `c${index}`,
      source,
      outputs: [],
      metadata: {}
    })),
    metadata: {},
    nbformat: 4,
    nbformat_minor: 5
  };
}

describe('replaceCells', () => {
  it('is undone on its own, even right after the user ran a cell', () => {
    const { shared, panel } = sharedNotebook(['a = 1', 'b = [1, 2]']);
    shared.undoManager.stopCapturing();
    // the user runs a cell, and a new empty cell appears below it (both within 500 ms
    // of the bring-back that follows)
    shared.transact(() => shared.insertCells(2, [{ source: 'print(b)' }, { source: '' }]));
    const users = [...shared.cells];

    replaceCells(panel, checkpointDocument(['a = 1']));
    expect(shared.cells).toEqual(['a = 1']);

    shared.undoManager.undo();
    expect(shared.cells).toEqual(users);
    shared.undoManager.redo();
    expect(shared.cells).toEqual(['a = 1']);
  });

  it('keeps a change made right after it out of its undo step', () => {
    const { shared, panel } = sharedNotebook(['a = 1', 'b = 2']);
    replaceCells(panel, checkpointDocument(['x = 0']));
    shared.transact(() => shared.insertCells(1, [{ source: 'typed after' }]));

    shared.undoManager.undo();
    expect(shared.cells).toEqual(['x = 0']);
    shared.undoManager.undo();
    expect(shared.cells).toEqual(['a = 1', 'b = 2']);
  });
});
