/**
 * After a restore, the panel says how many cells differ between the checkpoint's document
 * and the open notebook when the server did not count them (compare/documentCompare.ts).
 */

import { INotebookCell, INotebookDocument } from '../src/apiTypes';
import { cellSource, changedCellCount } from '../src/compare/documentCompare';

function code(
  id: string | undefined,
  source: string | string[],
  outputs: unknown[] = []
): INotebookCell {
  return { cell_type: 'code', id, source, outputs, execution_count: null, metadata: {} };
}

function doc(...cells: INotebookCell[]): INotebookDocument {
  return { cells, metadata: {}, nbformat: 4, nbformat_minor: 5 };
}

const out = (text: string): unknown => ({ output_type: 'stream', name: 'stdout', text });

describe('changedCellCount', () => {
  it('counts nothing for the same cells, whatever their execution counts', () => {
    const a = doc(code('a', 'x = 1'), code('b', 'print(x)', [out('1\n')]));
    const b = doc(code('a', 'x = 1'), {
      ...code('b', 'print(x)', [out('1\n')]),
      execution_count: 7
    });
    expect(changedCellCount(a, b)).toBe(0);
  });

  it('counts edited sources, changed outputs, added and removed cells (by id)', () => {
    const checkpoint = doc(
      code('a', 'x = 1'),
      code('b', 'y = 2'),
      code('c', 'print(y)', [out('2\n')])
    );
    const now = doc(
      code('a', 'x = 10'), // edited
      code('c', 'print(y)', [out('3\n')]), // outputs changed
      code('d', 'z = 3') // added
    ); // b removed
    expect(changedCellCount(checkpoint, now)).toBe(4);
  });

  it('matches moved cells by id', () => {
    const checkpoint = doc(code('a', 'x = 1'), code('b', 'y = 2'));
    const now = doc(code('b', 'y = 2'), code('a', 'x = 1'));
    expect(changedCellCount(checkpoint, now)).toBe(0);
  });

  it('compares by position when cells have no ids (nbformat 4.4)', () => {
    const checkpoint = doc(code(undefined, 'x = 1'), code(undefined, 'y = 2'));
    const now = doc(code(undefined, 'x = 1'), code(undefined, 'y = 3'), code(undefined, 'z'));
    expect(changedCellCount(checkpoint, now)).toBe(2);
  });

  it('reads sources given as lists of lines, and outputs in any key order', () => {
    const checkpoint = doc(
      code('a', ['x = 1\n', 'y = 2'], [{ name: 'stdout', output_type: 'stream', text: 'a' }])
    );
    const now = doc(
      code('a', 'x = 1\ny = 2', [{ output_type: 'stream', text: 'a', name: 'stdout' }])
    );
    expect(changedCellCount(checkpoint, now)).toBe(0);
    expect(cellSource({ source: ['a\n', 'b'] })).toBe('a\nb');
  });

  it('counts a cell whose type changed', () => {
    const checkpoint = doc(code('a', '# title'));
    const now = doc({ cell_type: 'markdown', id: 'a', source: '# title', metadata: {} });
    expect(changedCellCount(checkpoint, now)).toBe(1);
  });
});
