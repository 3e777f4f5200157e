/**
 * How many cells differ between two notebook documents: what the panel tells the user
 * after a restore ("7 cells changed since this checkpoint") when the server's answer did
 * not count them. Pure functions over nbformat JSON.
 *
 * Cells are matched by their nbformat id when both sides have ids (a moved cell is the
 * same cell), else by position. A matched cell counts as changed when its type, source or
 * outputs differ; a cell on one side only counts once (added or removed).
 */

import { INotebookCell, INotebookDocument } from '../apiTypes';

/** A cell's source as one string (nbformat allows a list of lines). */
export function cellSource(cell: Pick<INotebookCell, 'source'>): string {
  return Array.isArray(cell.source) ? cell.source.join('') : (cell.source ?? '');
}

/** Whether two cells differ in what the user sees: type, source or outputs. */
export function cellsDiffer(a: INotebookCell, b: INotebookCell): boolean {
  if (a.cell_type !== b.cell_type || cellSource(a) !== cellSource(b)) {
    return true;
  }
  return stableJson(outputsOf(a)) !== stableJson(outputsOf(b));
}

/** The number of cells that differ between two documents (added, removed or changed). */
export function changedCellCount(before: INotebookDocument, after: INotebookDocument): number {
  const old = before.cells;
  const now = after.cells;
  const withIds = [...old, ...now].every(cell => typeof cell.id === 'string' && cell.id);
  if (!withIds) {
    let changed = Math.abs(old.length - now.length);
    for (let i = 0; i < Math.min(old.length, now.length); i++) {
      if (cellsDiffer(old[i], now[i])) {
        changed += 1;
      }
    }
    return changed;
  }
  const byId = new Map(old.map(cell => [cell.id as string, cell]));
  let changed = 0;
  let matched = 0;
  for (const cell of now) {
    const previous = byId.get(cell.id as string);
    if (!previous) {
      changed += 1; // added
    } else {
      matched += 1;
      if (cellsDiffer(previous, cell)) {
        changed += 1;
      }
    }
  }
  return changed + (old.length - matched); // plus the removed
}

function outputsOf(cell: INotebookCell): unknown[] {
  return cell.cell_type === 'code' ? (cell.outputs ?? []) : [];
}

/** JSON with object keys sorted, so equal outputs compare equal whatever their key order. */
function stableJson(value: unknown): string {
  return JSON.stringify(value, (_key, item: unknown) => {
    if (item && typeof item === 'object' && !Array.isArray(item)) {
      const record = item as Record<string, unknown>;
      return Object.fromEntries(
        Object.keys(record)
          .sort()
          .map(key => [key, record[key]])
      );
    }
    return item;
  });
}
