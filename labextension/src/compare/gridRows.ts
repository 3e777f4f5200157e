/**
 * A comparison of many sides (POST /compare) as the rows of one flat list, for the
 * side-by-side view to draw a window of: a header per part (variables, files, cells) and
 * a row per item with one text per side, marked when the sides differ. Pure data.
 */

import { ICompareResult, IDiffCell, IDiffFile, IVariable } from '../apiTypes';
import { Translate, formatBytes, untranslated } from '../format';
import { Section } from './rows';

/** One row of the side-by-side list. */
export type GridRow =
  | { kind: 'section'; key: string; section: Section; title: string; counts: string }
  | {
      kind: 'item';
      key: string;
      section: Section;
      name: string;
      /** What each side holds (null: absent there). */
      values: (string | null)[];
      /** The full text of each side, for its tooltip. */
      titles: string[];
      same: boolean;
    }
  | { kind: 'note'; key: string; text: string };

/** How the list is drawn. */
export interface IGridRowOptions {
  /** Only the rows whose sides differ. */
  onlyDiffering?: boolean;
  /** Only items whose name, path or source contains this (case-insensitive). */
  filter?: string;
  t?: Translate;
}

/** The rows of a comparison of many sides. */
export function gridRows(result: ICompareResult, options: IGridRowOptions = {}): GridRow[] {
  const t = options.t ?? untranslated;
  const filter = (options.filter ?? '').trim().toLowerCase();
  const rows: GridRow[] = [];
  const part = (
    section: Section,
    title: string,
    available: boolean[],
    items: {
      key: string;
      name: string;
      values: (string | null)[];
      titles: string[];
      same: boolean;
    }[]
  ): void => {
    const differ = items.filter(item => !item.same).length;
    rows.push({
      kind: 'section',
      key: `s:${section}`,
      section,
      title,
      counts: t('%1 in all · %2 differ', items.length, differ)
    });
    const missing = result.sides.filter((_, i) => available[i] === false).map(s => s.label);
    if (missing.length > 0) {
      rows.push({
        kind: 'note',
        key: `n:${section}-unavailable`,
        text: t('Not compared on %1: nothing to read there.', missing.join(', '))
      });
    }
    let shown = 0;
    for (const item of items) {
      if (options.onlyDiffering && item.same) {
        continue;
      }
      if (filter && !item.name.toLowerCase().includes(filter)) {
        continue;
      }
      shown += 1;
      rows.push({ kind: 'item', section, ...item });
    }
    if (shown === 0) {
      rows.push({
        kind: 'note',
        key: `n:${section}-none`,
        text:
          items.length === 0
            ? t('Nothing on any side.')
            : differ === 0 && options.onlyDiffering
              ? t('The same on every side.')
              : t('Nothing matches the filter.')
      });
    }
  };

  part(
    'variables',
    t('Variables'),
    result.variables.available,
    result.variables.rows.map(row => {
      const values = row.values.map(v => (v ? variableText(v, t) : null));
      const digests = !row.same && new Set(values.filter(v => v !== null)).size === 1;
      return {
        key: `v:${row.name}`,
        name: row.name,
        values: digests
          ? row.values.map(v =>
              v ? `${variableText(v, t)} · #${(v.digest ?? '').slice(0, 8)}` : null
            )
          : values,
        titles: row.values.map(v => (v ? `${v.type}: ${v.summary}` : t('absent'))),
        same: row.same
      };
    })
  );
  part(
    'files',
    t('Files'),
    result.files.available,
    result.files.rows.map(row => ({
      key: `f:${row.path}`,
      name: row.path,
      values: row.entries.map(e => (e ? fileText(e, t) : null)),
      titles: row.entries.map(e => (e ? `${e.kind} ${fileText(e, t)}` : t('absent'))),
      same: row.same
    }))
  );
  part(
    'cells',
    t('Cells'),
    result.cells.available,
    result.cells.rows.map(row => ({
      key: `c:${row.index}`,
      name: t('cell %1', row.index + 1),
      values: row.cells.map(c => (c ? cellText(c) : null)),
      titles: row.cells.map(c => (c ? c.source : t('absent'))),
      same: row.same
    }))
  );
  return rows;
}

function variableText(variable: IVariable, t: Translate): string {
  return variable.kept ? variable.summary : t('%1 (not kept)', variable.summary);
}

function fileText(file: IDiffFile, t: Translate): string {
  if (file.kind === 'dir') {
    return t('folder');
  }
  if (file.kind === 'symlink') {
    return t('link');
  }
  return file.size === null ? '?' : formatBytes(file.size);
}

function cellText(cell: IDiffCell): string {
  const line = cell.source.split('\n', 1)[0] ?? '';
  const text = line.length > 120 ? `${line.slice(0, 120)}…` : line;
  return cell.cell_type === 'code' ? text : `[${cell.cell_type}] ${text}`;
}
