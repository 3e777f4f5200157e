/**
 * The Compare view's rows (compare/rows.ts): what a comparison lists, in which order, the
 * diffs opened or not, the filter, and a comparison of the issue's size as a flat list.
 */

import {
  CompareRow,
  EXPAND_ALL_UP_TO_LINES,
  compareRows,
  diffLines,
  expandableKeys,
  hasChanges,
  initiallyExpanded
} from '../src/compare/rows';
import { cell, emptyDiff, largeDiff, variable } from './diffFixtures';

/** The rows as short text, for compact expectations. */
function text(rows: CompareRow[]): string[] {
  return rows.map(row => {
    switch (row.kind) {
      case 'section':
        return `# ${row.title}: ${row.counts}`;
      case 'variable':
        return `${row.change} ${row.name}: ${row.old ?? '-'} -> ${row.new ?? '-'}${row.note ? ` (${row.note})` : ''}`;
      case 'file':
        return `${row.change} ${row.path} ${row.sizes}${row.expandable ? (row.expanded ? ' [open]' : ' [closed]') : ''}`;
      case 'cell':
        return `${row.change} ${row.label} ${row.preview}${row.outputsChanged ? ' (outputs)' : ''}${row.expandable ? (row.expanded ? ' [open]' : ' [closed]') : ''}`;
      case 'line':
        return `  ${row.tone} ${row.text}`;
      case 'note':
        return `  ${row.text}`;
    }
  });
}

/** The cell-2 checkpoint against the cell-5 one of the browser scenario. */
const scenario = emptyDiff(diff => {
  diff.variables.added.push(variable('c', "'new'", 'builtins.str'));
  diff.variables.changed.push({
    name: 'b',
    old: variable('b', 'list, len 2', 'builtins.list'),
    new: variable('b', 'list, len 3', 'builtins.list')
  });
  diff.variables.unchanged = 1;
  diff.files.added.push({ path: 'out.txt', size: 2, kind: 'file' });
  diff.files.changed.push({
    path: 'notes.md',
    old: { path: 'notes.md', size: 4, kind: 'file' },
    new: { path: 'notes.md', size: 8, kind: 'file' },
    text_diff: '--- a/notes.md\n+++ b/notes.md\n@@ -1 +1,2 @@\n one\n+two\n'
  });
  diff.cells.added.push(cell(2, 'b.append(3)'), cell(3, "c = 'new'"), cell(4, ''));
  diff.cells.changed.push({
    index_old: 1,
    index_new: 1,
    source_diff: null,
    outputs_changed: true,
    old: cell(1, 'b', 0),
    new: cell(1, 'b', 1)
  });
  diff.cells.unchanged = 1;
});

describe('compareRows', () => {
  it('lists variables, files and cells with their changes, old and new summaries', () => {
    const rows = compareRows(scenario, { expanded: initiallyExpanded(scenario) });
    expect(text(rows)).toEqual([
      '# Variables: 1 added · 0 removed · 1 changed · 1 unchanged',
      "added c: - -> 'new'",
      'changed b: list, len 2 -> list, len 3',
      '# Files: 1 added · 0 removed · 1 changed · 0 unchanged',
      'added out.txt 2 B',
      'changed notes.md 4 B → 8 B [open]',
      '  hunk @@ -1 +1,2 @@',
      '  context  one',
      '  add +two',
      '# Cells: 3 added · 0 removed · 1 changed · 1 unchanged',
      'changed cell 2 b (outputs)',
      'added cell 3 b.append(3) [open]',
      '  add +b.append(3)',
      "added cell 4 c = 'new' [open]",
      "  add +c = 'new'",
      'added cell 5 (empty)'
    ]);
  });

  it('says what changed in an array edited in place (same shape and dtype)', () => {
    const edited = emptyDiff(diff => {
      diff.variables.changed.push({
        name: 'arr',
        old: {
          ...variable('arr', 'shape (10,) int64', 'numpy.ndarray'),
          digest: '5be1e3a0' + '0'.repeat(24)
        },
        new: {
          ...variable('arr', 'shape (10,) int64', 'numpy.ndarray'),
          digest: '0c4f9d21' + '1'.repeat(24)
        }
      });
    });
    const rows = text(compareRows(edited, { expanded: new Set() }));
    expect(rows).toContain(
      'changed arr: shape (10,) int64 -> shape (10,) int64 (contents changed (digest 5be1e3a0 → 0c4f9d21))'
    );
  });

  it('shows a closed diff as its row alone', () => {
    const rows = compareRows(scenario, { expanded: new Set() });
    expect(rows.filter(row => row.kind === 'line')).toEqual([]);
    expect(text(rows)).toContain('changed notes.md 4 B → 8 B [closed]');
  });

  it('filters by name, path or source, and says when the filter hides every change', () => {
    const rows = text(compareRows(scenario, { expanded: new Set(), filter: 'OUT' }));
    expect(rows).toContain('added out.txt 2 B');
    expect(rows).not.toContain('changed notes.md 4 B → 8 B [closed]');
    expect(rows).toContain('  No change matches the filter.');
  });

  it('says "No changes." for a section with none, and why cells were not compared', () => {
    const diff = emptyDiff(d => {
      d.cells.available = false;
    });
    expect(hasChanges(diff)).toBe(false);
    expect(text(compareRows(diff, { expanded: new Set() }))).toEqual([
      '# Variables: 0 added · 0 removed · 0 changed · 0 unchanged',
      '  No changes.',
      '# Files: 0 added · 0 removed · 0 changed · 0 unchanged',
      '  No changes.',
      '# Cells: not compared',
      '  One side holds no notebook document, so its cells cannot be compared.'
    ]);
  });

  it("shows the server's note on the cells one line above the cells section", () => {
    const note = 'nbdime could not align the cells (boom), so they were aligned in order';
    const diff = emptyDiff(d => {
      d.cells.aligned_by = 'order';
      d.cells.note = note;
    });
    const rows = text(compareRows(diff, { expanded: new Set() }));
    const section = rows.indexOf('# Cells: 0 added · 0 removed · 0 changed · 0 unchanged');
    expect(rows[section - 1]).toBe(`  ${note}`);
    expect(text(compareRows(emptyDiff(), { expanded: new Set() }))).not.toContain(`  ${note}`);
  });

  it('says when a side holds no variables or no readable files to compare', () => {
    const diff = emptyDiff(d => {
      d.variables.available = false;
      d.files.available = false;
    });
    expect(text(compareRows(diff, { expanded: new Set() })).slice(0, 4)).toEqual([
      '# Variables: not compared',
      '  One side holds no variables to compare (its checkpoint was pruned).',
      '# Files: not compared',
      "  One side's files cannot be read here (an E2B snapshot, or a deleted or pruned snapshot)."
    ]);
  });

  it('shows a folder and a link as such, and a file of unknown size without one', () => {
    const diff = emptyDiff(d => {
      d.files.added.push(
        { path: 'data', size: null, kind: 'dir' },
        { path: 'latest', size: null, kind: 'symlink' },
        { path: 'blob', size: null, kind: 'file' }
      );
    });
    expect(text(compareRows(diff, { expanded: new Set() })).slice(3, 6)).toEqual([
      'added data folder',
      'added latest link',
      'added blob '
    ]);
  });

  it('names a changed type and a value that could not be kept', () => {
    const diff = emptyDiff(d => {
      d.variables.changed.push({
        name: 'x',
        old: variable('x', '1'),
        new: variable('x', "'one'", 'builtins.str')
      });
      d.variables.added.push({
        ...variable('gen', 'generator', 'builtins.generator'),
        kept: false,
        reason: 'cannot pickle'
      });
    });
    expect(text(compareRows(diff, { expanded: new Set() })).slice(1, 3)).toEqual([
      'added gen: - -> generator (not kept: cannot pickle)',
      "changed x: 1 -> 'one' (was builtins.int)"
    ]);
  });

  it('opens every diff at first only when they are short together', () => {
    expect([...initiallyExpanded(scenario)].sort()).toEqual(expandableKeys(scenario).sort());
    const long = emptyDiff(d => {
      const lines = Array.from({ length: EXPAND_ALL_UP_TO_LINES + 1 }, (_, i) => `+${i}`);
      d.files.changed.push({
        path: 'big.txt',
        old: { path: 'big.txt', size: 1, kind: 'file' },
        new: { path: 'big.txt', size: 2, kind: 'file' },
        text_diff: `@@ -0,0 +1,${lines.length} @@\n${lines.join('\n')}\n`
      });
    });
    expect(initiallyExpanded(long).size).toBe(0);
  });

  it('draws a comparison of the issue size as one flat list of rows', () => {
    const diff = largeDiff();
    const closed = compareRows(diff, { expanded: initiallyExpanded(diff) });
    // three section rows and one row per item: the diffs start closed
    expect(closed.length).toBe(3 + 1000 + 10_000 + 200);
    expect(new Set(closed.map(row => row.key)).size).toBe(closed.length);
    const open = compareRows(diff, { expanded: new Set(expandableKeys(diff)) });
    // each file's diff: a hunk, a removed and an added line; each cell's too
    expect(open.length).toBe(closed.length + 3 * 10_000 + 3 * 200);
  });
});

describe('diffLines', () => {
  it('drops the file headers and tells the lines apart', () => {
    expect(
      diffLines('--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n c\n\\ No newline at end of file\n')
    ).toEqual([
      { tone: 'hunk', text: '@@ -1 +1 @@' },
      { tone: 'del', text: '-a' },
      { tone: 'add', text: '+b' },
      { tone: 'context', text: ' c' },
      { tone: 'meta', text: '\\ No newline at end of file' }
    ]);
  });
});
