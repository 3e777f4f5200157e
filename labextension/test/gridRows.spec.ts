/**
 * A comparison of three fan-out branches as the rows of the side-by-side view: a text per
 * side, absent sides as null, rows that differ marked, the filter and "only differing".
 */

import { ICompareResult } from '../src/apiTypes';
import { gridRows } from '../src/compare/gridRows';

function variable(name: string, summary: string, digest: string) {
  return { name, type: 'builtins.int', summary, size: 28, kept: true, reason: null, digest };
}

const RESULT: ICompareResult = {
  sides: [
    { runtime_id: 'a', checkpoint_id: null, label: 'a (live)' },
    { runtime_id: 'b', checkpoint_id: null, label: 'b (live)' },
    { runtime_id: 'c', checkpoint_id: 'k', label: 'c @ head' }
  ],
  variables: {
    available: [true, true, true],
    rows: [
      {
        name: 'plan',
        values: [
          variable('plan', '1', 'd1'),
          variable('plan', '2', 'd2'),
          variable('plan', '3', 'd3')
        ],
        same: false
      },
      {
        name: 'seed',
        values: [
          variable('seed', '7', 'd7'),
          variable('seed', '7', 'd7'),
          variable('seed', '7', 'd7')
        ],
        same: true
      },
      {
        name: 'rows',
        values: [variable('rows', 'list len 2', 'x1'), variable('rows', 'list len 2', 'x2'), null],
        same: false
      }
    ]
  },
  files: {
    available: [true, true, false],
    rows: [
      {
        path: 'out.txt',
        entries: [
          { path: 'out.txt', size: 10, kind: 'file' },
          { path: 'out.txt', size: 10, kind: 'file' },
          null
        ],
        same: false
      }
    ]
  },
  cells: {
    available: [true, true, true],
    rows: [
      {
        index: 0,
        cells: [0, 1, 2].map(() => ({
          index: 0,
          cell_type: 'code',
          source: 'seed = 7\nprint(seed)',
          execution_count: 1,
          outputs: 1
        })),
        same: true
      }
    ]
  }
};

describe('the side-by-side rows of a comparison of many', () => {
  it('gives each item a text per side and marks the ones that differ', () => {
    const rows = gridRows(RESULT);
    const items = rows.filter(r => r.kind === 'item');
    const plan = items.find(r => r.key === 'v:plan');
    expect(plan).toMatchObject({ values: ['1', '2', '3'], same: false });
    expect(items.find(r => r.key === 'v:seed')).toMatchObject({ same: true });
    // Same summary, different contents: the digests tell them apart; absent is null.
    expect(items.find(r => r.key === 'v:rows')).toMatchObject({
      values: ['list len 2 · #x1', 'list len 2 · #x2', null]
    });
    expect(items.find(r => r.key === 'c:0')).toMatchObject({
      name: 'cell 1',
      values: ['seed = 7', 'seed = 7', 'seed = 7'],
      same: true
    });
    const sections = rows
      .filter(r => r.kind === 'section')
      .map(r => [r.key, r.kind === 'section' && r.counts]);
    expect(sections).toEqual([
      ['s:variables', '3 in all · 2 differ'],
      ['s:files', '1 in all · 1 differ'],
      ['s:cells', '1 in all · 0 differ']
    ]);
    expect(rows.find(r => r.key === 'n:files-unavailable')).toMatchObject({
      text: 'Not compared on c @ head: nothing to read there.'
    });
  });

  it('shows only the rows that differ, and filters by name', () => {
    const differing = gridRows(RESULT, { onlyDiffering: true });
    expect(differing.filter(r => r.kind === 'item').map(r => r.key)).toEqual([
      'v:plan',
      'v:rows',
      'f:out.txt'
    ]);
    expect(differing.find(r => r.key === 'n:cells-none')).toMatchObject({
      text: 'The same on every side.'
    });
    const filtered = gridRows(RESULT, { filter: 'PLA' });
    expect(filtered.filter(r => r.kind === 'item').map(r => r.key)).toEqual(['v:plan']);
  });
});
