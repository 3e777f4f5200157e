/**
 * The CheckpointTree widget's rows: runs of automatic checkpoints fold into timelines;
 * forks, checkouts, manual checkpoints and other runtimes end a run.
 */

import { layoutTree } from '../src/tree/layout';
import { foldTimelines, IWidgetNode, timelineLabel } from '../src/widgets/timeline';

function manual(id: string, parent: string | null, time: number, runtime = 'r'): IWidgetNode {
  return { id, parent, runtime_id: runtime, name: id, time, auto: null, unrestorable: [] };
}

function cell(id: string, parent: string | null, count: number, failed = false): IWidgetNode {
  return {
    id,
    parent,
    runtime_id: 'r',
    name: `cell-${count}`,
    time: count,
    auto: { execution_count: count, failed, source: `x = ${count}` },
    unrestorable: []
  };
}

/** Each entry as "id:[member ids]" (timelines marked with ~). */
function shape(nodes: IWidgetNode[], ends: string[] = []): string[] {
  return foldTimelines(nodes, new Set(ends))
    .map(e => `${e.timeline ? '~' : ''}${e.id}:${e.nodes.map(n => n.id).join(',')}<${e.parent}`)
    .sort();
}

describe('foldTimelines', () => {
  it('folds a chain of automatic checkpoints into one row', () => {
    const nodes = [manual('m', null, 0), cell('a', 'm', 1), cell('b', 'a', 2), cell('c', 'b', 3)];
    expect(shape(nodes)).toEqual(['m:m<null', '~c:a,b,c<m']);
  });

  it('keeps the order whatever order the nodes come in', () => {
    const nodes = [cell('c', 'b', 3), cell('a', 'm', 1), manual('m', null, 0), cell('b', 'a', 2)];
    expect(shape(nodes)).toEqual(['m:m<null', '~c:a,b,c<m']);
  });

  it('ends a run at a fork: each child starts its own', () => {
    const nodes = [cell('a', null, 1), cell('b', 'a', 2), cell('c', 'a', 3), cell('d', 'c', 4)];
    expect(shape(nodes)).toEqual(['~a:a<null', '~b:b<a', '~d:c,d<a']);
  });

  it('ends a run at a manual checkpoint and at a checkout source', () => {
    const nodes = [cell('a', null, 1), manual('m', 'a', 2), cell('b', 'm', 3), cell('c', 'b', 4)];
    expect(shape(nodes)).toEqual(['m:m<a', '~a:a<null', '~c:b,c<m']);
    expect(shape(nodes, ['b'])).toEqual(['m:m<a', '~a:a<null', '~b:b<m', '~c:c<b']);
  });

  it('does not fold across runtimes', () => {
    const other = { ...cell('x', 'a', 5), runtime_id: 'child' };
    expect(shape([cell('a', null, 1), other])).toEqual(['~a:a<null', '~x:x<a']);
  });

  it('lays the folded rows out as a tree with the shared layout', () => {
    const nodes = [
      manual('m', null, 0),
      cell('a', 'm', 1),
      cell('b', 'a', 2),
      manual('k', 'm', 3, 'child')
    ];
    const layout = layoutTree(foldTimelines(nodes));
    expect(layout.rows.map(r => `${r.id}@${r.column}`)).toEqual(['k@0', 'b@1', 'm@0']);
  });

  it('survives a cycle (corrupt data) without looping', () => {
    const nodes = [cell('a', 'b', 1), cell('b', 'a', 2)];
    expect(
      foldTimelines(nodes)
        .flatMap(e => e.nodes.map(n => n.id))
        .sort()
    ).toEqual(['a', 'b']);
  });

  it('handles ten thousand cells in one run', () => {
    const nodes = [cell('n0', null, 0)];
    for (let i = 1; i < 10000; i++) {
      nodes.push(cell(`n${i}`, `n${i - 1}`, i));
    }
    const entries = foldTimelines(nodes.reverse());
    expect(entries).toHaveLength(1);
    expect(entries[0].nodes).toHaveLength(10000);
    expect(entries[0].id).toBe('n9999');
  });
});

describe('timelineLabel', () => {
  it('names the span of cells and the failures', () => {
    expect(timelineLabel([cell('a', null, 3), cell('b', 'a', 9, true)])).toBe(
      'cells 3-9 (1 failed)'
    );
    expect(timelineLabel([cell('a', null, 4)])).toBe('cell 4');
  });
});
