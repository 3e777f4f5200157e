/**
 * A comparison (the diff route's answer) as the rows of one flat list, for the Compare
 * view to draw a window of: section headers, a row per variable, file and cell that
 * changed, and the lines of the text and source diffs the user opened.
 *
 * Pure data in, pure data out, so a comparison of 1,000 variables, 10,000 files and 200
 * cells becomes its rows in a few milliseconds and the view draws only those on screen.
 */

import { IDiffCell, IDiffFile, IDiffResult, IVariable } from '../apiTypes';
import { Translate, formatBytes, untranslated } from '../format';

/** What happened to an item between the two sides. */
export type Change = 'added' | 'removed' | 'changed';

/** The three parts of a comparison. */
export type Section = 'variables' | 'files' | 'cells';

/** How a diff line reads: an added, removed or context line, a hunk header, a note. */
export type LineTone = 'add' | 'del' | 'context' | 'hunk' | 'meta';

/** One row of the list. */
export type CompareRow =
  | { kind: 'section'; key: string; section: Section; title: string; counts: string }
  | {
      kind: 'variable';
      key: string;
      change: Change;
      name: string;
      type: string;
      /** The summary on the "from" side (null: absent there). */
      old: string | null;
      /** The summary on the "to" side. */
      new: string | null;
      /** A note: not kept, a changed type. */
      note: string | null;
    }
  | {
      kind: 'file';
      key: string;
      change: Change;
      path: string;
      sizes: string;
      /** Whether it has a text diff to open. */
      expandable: boolean;
      expanded: boolean;
    }
  | {
      kind: 'cell';
      key: string;
      change: Change;
      label: string;
      cellType: string;
      /** The first line of its source (the "to" side's when it changed). */
      preview: string;
      outputsChanged: boolean;
      expandable: boolean;
      expanded: boolean;
    }
  | { kind: 'line'; key: string; tone: LineTone; text: string }
  | { kind: 'note'; key: string; text: string };

/** How the list is drawn. */
export interface ICompareRowOptions {
  /** Keys of the files and cells whose diff is open. */
  expanded: ReadonlySet<string>;
  /** Only items whose name, path or source contains this (case-insensitive). */
  filter?: string;
  t?: Translate;
}

/** Open every diff when all of them together are at most this many lines. */
export const EXPAND_ALL_UP_TO_LINES = 400;

/** Keys of every item that has a diff to open. */
export function expandableKeys(diff: IDiffResult): string[] {
  const keys: string[] = [];
  for (const file of diff.files.changed) {
    if (file.text_diff) {
      keys.push(fileKey(file.path));
    }
  }
  for (const cell of diff.cells.added) {
    if (cell.source) {
      keys.push(addedCellKey(cell));
    }
  }
  for (const cell of diff.cells.removed) {
    if (cell.source) {
      keys.push(removedCellKey(cell));
    }
  }
  for (const cell of diff.cells.changed) {
    if (cell.source_diff) {
      keys.push(changedCellKey(cell.index_old, cell.index_new));
    }
  }
  return keys;
}

/** The diffs open at first: all of them when they are short together, else none. */
export function initiallyExpanded(diff: IDiffResult): Set<string> {
  const texts = [
    ...diff.files.changed.map(file => file.text_diff ?? ''),
    ...diff.cells.added.map(cell => cell.source),
    ...diff.cells.removed.map(cell => cell.source),
    ...diff.cells.changed.map(cell => cell.source_diff ?? '')
  ];
  let lines = 0;
  for (const text of texts) {
    lines += countLines(text);
    if (lines > EXPAND_ALL_UP_TO_LINES) {
      return new Set();
    }
  }
  return new Set(expandableKeys(diff));
}

/** Lines of a text, as `splitLines` splits it (without splitting it). */
function countLines(text: string): number {
  if (text === '') {
    return 0;
  }
  let count = 1;
  for (let i = text.indexOf('\n'); i !== -1 && i < text.length - 1; i = text.indexOf('\n', i + 1)) {
    count += 1;
  }
  return count;
}

/** Whether the two sides differ at all. */
export function hasChanges(diff: IDiffResult): boolean {
  const { variables: v, files: f, cells: c } = diff;
  return (
    v.added.length + v.removed.length + v.changed.length > 0 ||
    f.added.length + f.removed.length + f.changed.length > 0 ||
    c.added.length + c.removed.length + c.changed.length > 0
  );
}

/** The rows of a comparison. */
export function compareRows(diff: IDiffResult, options: ICompareRowOptions): CompareRow[] {
  const t = options.t ?? untranslated;
  const filter = (options.filter ?? '').trim().toLowerCase();
  const shows = (...texts: string[]): boolean =>
    filter === '' || texts.some(text => text.toLowerCase().includes(filter));
  const rows: CompareRow[] = [];
  variableRows(diff, rows, shows, t);
  fileRows(diff, rows, shows, options.expanded, t);
  cellRows(diff, rows, shows, options.expanded, t);
  return rows;
}

/** The lines of a unified diff, without its two file header lines. */
export function diffLines(text: string): { tone: LineTone; text: string }[] {
  const lines = splitLines(text);
  const out: { tone: LineTone; text: string }[] = [];
  for (const line of lines) {
    if (line.startsWith('--- ') || line.startsWith('+++ ')) {
      continue;
    }
    out.push({ tone: toneOf(line), text: line });
  }
  return out;
}

function toneOf(line: string): LineTone {
  switch (line[0]) {
    case '+':
      return 'add';
    case '-':
      return 'del';
    case '@':
      return 'hunk';
    case '\\':
      return 'meta';
    default:
      return 'context';
  }
}

function splitLines(text: string): string[] {
  const lines = text.split('\n');
  if (lines.length > 0 && lines[lines.length - 1] === '') {
    lines.pop();
  }
  return lines;
}

function counts(
  t: Translate,
  added: number,
  removed: number,
  changed: number,
  unchanged: number
): string {
  return t('%1 added · %2 removed · %3 changed · %4 unchanged', added, removed, changed, unchanged);
}

function variableRows(
  diff: IDiffResult,
  rows: CompareRow[],
  shows: (...texts: string[]) => boolean,
  t: Translate
): void {
  const v = diff.variables;
  const available = v.available !== false;
  rows.push({
    kind: 'section',
    key: 's:variables',
    section: 'variables',
    title: t('Variables'),
    counts: available
      ? counts(t, v.added.length, v.removed.length, v.changed.length, v.unchanged)
      : t('not compared')
  });
  if (!available) {
    rows.push({
      kind: 'note',
      key: 'n:variables-unavailable',
      text: t('One side holds no variables to compare (its checkpoint was pruned).')
    });
    return;
  }
  const notKept = (variable: IVariable): string | null =>
    variable.kept ? null : t('not kept: %1', variable.reason ?? t('unknown reason'));
  let shown = 0;
  for (const variable of v.added) {
    if (shows(variable.name)) {
      shown += 1;
      rows.push({
        kind: 'variable',
        key: `v+:${variable.name}`,
        change: 'added',
        name: variable.name,
        type: variable.type,
        old: null,
        new: variable.summary,
        note: notKept(variable)
      });
    }
  }
  for (const variable of v.removed) {
    if (shows(variable.name)) {
      shown += 1;
      rows.push({
        kind: 'variable',
        key: `v-:${variable.name}`,
        change: 'removed',
        name: variable.name,
        type: variable.type,
        old: variable.summary,
        new: null,
        note: null
      });
    }
  }
  for (const change of v.changed) {
    if (shows(change.name)) {
      shown += 1;
      const retyped = change.old.type !== change.new.type;
      const { digest: before, summary: was } = change.old;
      const { digest: after, summary: now } = change.new;
      const edited =
        !retyped && change.new.kept && was === now && before && after && before !== after
          ? t('contents changed (digest %1 → %2)', before.slice(0, 8), after.slice(0, 8))
          : null;
      rows.push({
        kind: 'variable',
        key: `v~:${change.name}`,
        change: 'changed',
        name: change.name,
        type: change.new.type,
        old: change.old.summary,
        new: change.new.summary,
        note: retyped ? t('was %1', change.old.type) : (notKept(change.new) ?? edited)
      });
    }
  }
  if (shown === 0) {
    rows.push(emptyNote('variables', v.added.length + v.removed.length + v.changed.length, t));
  }
}

function fileRows(
  diff: IDiffResult,
  rows: CompareRow[],
  shows: (...texts: string[]) => boolean,
  expanded: ReadonlySet<string>,
  t: Translate
): void {
  const f = diff.files;
  const available = f.available !== false;
  rows.push({
    kind: 'section',
    key: 's:files',
    section: 'files',
    title: t('Files'),
    counts: available
      ? counts(t, f.added.length, f.removed.length, f.changed.length, f.unchanged)
      : t('not compared')
  });
  if (!available) {
    rows.push({
      kind: 'note',
      key: 'n:files-unavailable',
      text: t(
        "One side's files cannot be read here (an E2B snapshot, or a deleted or pruned snapshot)."
      )
    });
    return;
  }
  let shown = 0;
  for (const file of f.added) {
    if (shows(file.path)) {
      shown += 1;
      rows.push({
        kind: 'file',
        key: `f+:${file.path}`,
        change: 'added',
        path: file.path,
        sizes: sizeText(file, t),
        expandable: false,
        expanded: false
      });
    }
  }
  for (const file of f.removed) {
    if (shows(file.path)) {
      shown += 1;
      rows.push({
        kind: 'file',
        key: `f-:${file.path}`,
        change: 'removed',
        path: file.path,
        sizes: sizeText(file, t),
        expandable: false,
        expanded: false
      });
    }
  }
  for (const file of f.changed) {
    if (!shows(file.path)) {
      continue;
    }
    shown += 1;
    const key = fileKey(file.path);
    const open = file.text_diff !== null && expanded.has(key);
    rows.push({
      kind: 'file',
      key,
      change: 'changed',
      path: file.path,
      sizes: `${sizeText(file.old, t)} → ${sizeText(file.new, t)}`,
      expandable: file.text_diff !== null,
      expanded: open
    });
    if (open && file.text_diff !== null) {
      pushLines(rows, key, diffLines(file.text_diff));
    }
  }
  if (shown === 0) {
    rows.push(emptyNote('files', f.added.length + f.removed.length + f.changed.length, t));
  }
}

function cellRows(
  diff: IDiffResult,
  rows: CompareRow[],
  shows: (...texts: string[]) => boolean,
  expanded: ReadonlySet<string>,
  t: Translate
): void {
  const c = diff.cells;
  if (c.note) {
    // How the cells were paired, when the server had to fall back (one line above them).
    rows.push({ kind: 'note', key: 'n:cells-alignment', text: c.note });
  }
  rows.push({
    kind: 'section',
    key: 's:cells',
    section: 'cells',
    title: t('Cells'),
    counts: c.available
      ? counts(t, c.added.length, c.removed.length, c.changed.length, c.unchanged)
      : t('not compared')
  });
  if (!c.available) {
    rows.push({
      kind: 'note',
      key: 'n:cells-unavailable',
      text: t('One side holds no notebook document, so its cells cannot be compared.')
    });
    return;
  }
  // Every cell in the order of the newer document (removed ones where they were).
  type Item =
    | { change: 'added' | 'removed'; cell: IDiffCell; order: number }
    | { change: 'changed'; item: IDiffResult['cells']['changed'][number]; order: number };
  const items: Item[] = [
    ...c.added.map(cell => ({ change: 'added' as const, cell, order: cell.index })),
    ...c.removed.map(cell => ({ change: 'removed' as const, cell, order: cell.index - 0.5 })),
    ...c.changed.map(item => ({ change: 'changed' as const, item, order: item.index_new }))
  ].sort((a, b) => a.order - b.order);
  let shown = 0;
  for (const entry of items) {
    if (entry.change === 'changed') {
      const { item } = entry;
      const source = item.new.source;
      if (!shows(source, item.old.source)) {
        continue;
      }
      shown += 1;
      const key = changedCellKey(item.index_old, item.index_new);
      const open = item.source_diff !== null && expanded.has(key);
      rows.push({
        kind: 'cell',
        key,
        change: 'changed',
        label:
          item.index_old === item.index_new
            ? t('cell %1', item.index_new + 1)
            : t('cell %1 → %2', item.index_old + 1, item.index_new + 1),
        cellType: item.new.cell_type,
        preview: firstLine(source),
        outputsChanged: item.outputs_changed,
        expandable: item.source_diff !== null,
        expanded: open
      });
      if (open && item.source_diff !== null) {
        pushLines(rows, key, diffLines(item.source_diff));
      }
    } else {
      const { cell, change } = entry;
      if (!shows(cell.source)) {
        continue;
      }
      shown += 1;
      const key = change === 'added' ? addedCellKey(cell) : removedCellKey(cell);
      const open = expanded.has(key);
      const empty = cell.source === '';
      rows.push({
        kind: 'cell',
        key,
        change,
        label: t('cell %1', cell.index + 1),
        cellType: cell.cell_type,
        preview: empty ? t('(empty)') : firstLine(cell.source),
        outputsChanged: false,
        expandable: !empty,
        expanded: open && !empty
      });
      if (open && !empty) {
        const sign = change === 'added' ? '+' : '-';
        const tone: LineTone = change === 'added' ? 'add' : 'del';
        pushLines(
          rows,
          key,
          splitLines(cell.source).map(line => ({ tone, text: `${sign}${line}` }))
        );
      }
    }
  }
  if (shown === 0) {
    rows.push(emptyNote('cells', items.length, t));
  }
}

/** A file's size, a folder as "folder", a link as "link". */
function sizeText(file: IDiffFile, t: Translate): string {
  if (file.kind === 'dir') {
    return t('folder');
  }
  if (file.kind === 'symlink') {
    return t('link');
  }
  return file.size === null ? '' : formatBytes(file.size);
}

function pushLines(
  rows: CompareRow[],
  key: string,
  lines: { tone: LineTone; text: string }[]
): void {
  lines.forEach((line, i) => {
    rows.push({ kind: 'line', key: `${key}#${i}`, tone: line.tone, text: line.text });
  });
}

/** The note of a section with no row: nothing changed, or the filter hides every change. */
function emptyNote(section: Section, changes: number, t: Translate): CompareRow {
  return {
    kind: 'note',
    key: `n:${section}-none`,
    text: changes === 0 ? t('No changes.') : t('No change matches the filter.')
  };
}

function firstLine(source: string): string {
  const line = source.split('\n', 1)[0] ?? '';
  return line.length > 200 ? `${line.slice(0, 200)}…` : line;
}

function fileKey(path: string): string {
  return `f~:${path}`;
}

function addedCellKey(cell: IDiffCell): string {
  return `c+:${cell.index}`;
}

function removedCellKey(cell: IDiffCell): string {
  return `c-:${cell.index}`;
}

function changedCellKey(indexOld: number, indexNew: number): string {
  return `c~:${indexOld}:${indexNew}`;
}
