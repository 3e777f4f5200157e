/**
 * Answers of the diff route (`IDiffResult`) for the tests: an empty comparison to fill in,
 * and one of the size (1,000 variables, 10,000 files, 200 cells).
 */

import { IDiffCell, IDiffResult, IVariable } from '../src/apiTypes';

export function variable(name: string, summary: string, type = 'builtins.int'): IVariable {
  return { name, type, summary, size: 28, kept: true, reason: null };
}

export function cell(index: number, source: string, outputs = 0): IDiffCell {
  return { index, cell_type: 'code', source, execution_count: index + 1, outputs };
}

/** A comparison with nothing in it; `fill` adds what the test needs. */
export function emptyDiff(fill: (diff: IDiffResult) => void = () => undefined): IDiffResult {
  const diff: IDiffResult = {
    from: { checkpoint_id: 'c1', label: 'after-2' },
    to: { checkpoint_id: 'c2', label: 'after-5' },
    variables: { added: [], removed: [], changed: [], unchanged: 0 },
    files: { added: [], removed: [], changed: [], unchanged: 0 },
    cells: { added: [], removed: [], changed: [], unchanged: 0, available: true }
  };
  fill(diff);
  return diff;
}

/** A comparison of 1,000 changed variables, 10,000 changed files and 200 changed cells. */
export function largeDiff(): IDiffResult {
  return emptyDiff(diff => {
    for (let i = 0; i < 1000; i++) {
      const name = `v${i}`;
      diff.variables.changed.push({
        name,
        old: variable(name, `ndarray (${i},) float64`, 'numpy.ndarray'),
        new: variable(name, `ndarray (${i + 1},) float64`, 'numpy.ndarray')
      });
    }
    for (let i = 0; i < 10_000; i++) {
      const path = `data/part-${i}.csv`;
      diff.files.changed.push({
        path,
        old: { path, size: 100, kind: 'file' },
        new: { path, size: 120, kind: 'file' },
        text_diff: `--- a/${path}\n+++ b/${path}\n@@ -1 +1 @@\n-${i}\n+${i + 1}\n`
      });
    }
    for (let i = 0; i < 200; i++) {
      diff.cells.changed.push({
        index_old: i,
        index_new: i,
        source_diff: `@@ -1 +1 @@\n-x = ${i}\n+x = ${i + 1}\n`,
        outputs_changed: true,
        old: cell(i, `x = ${i}`, 1),
        new: cell(i, `x = ${i + 1}`, 1)
      });
    }
  });
}
