/**
 * The tree layout: order, lanes, bends, stubs, and windows of large trees.
 */

import { ITreeLayout, ITreeNode, layoutTree, orderNewestFirst } from '../src/tree/layout';

function node(id: string, parent: string | null, time: number): ITreeNode {
  return { id, parent, time };
}

/** The rows as text: "id@column", for compact expectations. */
function columns(layout: ITreeLayout): string[] {
  return layout.rows.map(row => `${row.id}@${row.column}`);
}

/** Every lane leaving a row's bottom enters the next row's top, and nothing else does. */
function expectJoined(layout: ITreeLayout): void {
  layout.rows.forEach((row, i) => {
    const next = layout.rows[i + 1];
    const leaving = row.bottom.map(s => s.to).sort();
    const entering = next ? next.top.map(s => s.from).sort() : [];
    expect(entering).toEqual(leaving);
  });
}

describe('orderNewestFirst', () => {
  it('puts newer checkpoints first', () => {
    const order = orderNewestFirst([node('a', null, 1), node('b', 'a', 2), node('c', 'b', 3)]);
    expect(order.map(n => n.id)).toEqual(['c', 'b', 'a']);
  });

  it('keeps a child above its parent when their clocks say otherwise', () => {
    // Same millisecond, and a child stamped earlier than its parent (clock skew).
    const order = orderNewestFirst([
      node('p', null, 5),
      node('c1', 'p', 5),
      node('c2', 'p', 4),
      node('g', 'c2', 3)
    ]);
    const ids = order.map(n => n.id);
    for (const [child, parent] of [
      ['c1', 'p'],
      ['c2', 'p'],
      ['g', 'c2']
    ]) {
      expect(ids.indexOf(child)).toBeLessThan(ids.indexOf(parent));
    }
    expect(ids).toHaveLength(4);
  });

  it('keeps every node of a cycle (damaged data) instead of dropping it', () => {
    const order = orderNewestFirst([node('a', 'b', 1), node('b', 'a', 2)]);
    expect(order.map(n => n.id).sort()).toEqual(['a', 'b']);
  });

  it('is stable for equal times', () => {
    const nodes = [node('x', null, 1), node('y', null, 1), node('z', null, 1)];
    expect(orderNewestFirst(nodes).map(n => n.id)).toEqual(
      orderNewestFirst([...nodes].reverse()).map(n => n.id)
    );
  });
});

describe('layoutTree', () => {
  it('draws a chain in one lane', () => {
    const layout = layoutTree([node('a', null, 1), node('b', 'a', 2), node('c', 'b', 3)]);
    expect(columns(layout)).toEqual(['c@0', 'b@0', 'a@0']);
    expect(layout.columns).toBe(1);
    expect(layout.rows[0].tip).toBe(true);
    expect(layout.rows[1].tip).toBe(false);
    expect(layout.rows[0].top).toEqual([]);
    expect(layout.rows[0].bottom).toEqual([{ from: 0, to: 0 }]);
    expect(layout.rows[2].bottom).toEqual([]); // the root ends the lane
    expectJoined(layout);
  });

  it('forks: a restore then a checkpoint opens a second lane that bends into the parent', () => {
    // a <- b <- c, then restore to a and checkpoint d (parent a).
    const layout = layoutTree([
      node('a', null, 1),
      node('b', 'a', 2),
      node('c', 'b', 3),
      node('d', 'a', 4)
    ]);
    expect(columns(layout)).toEqual(['d@0', 'c@1', 'b@1', 'a@0']);
    expect(layout.columns).toBe(2);
    const a = layout.rows[3];
    expect(a.top).toEqual(
      expect.arrayContaining([
        { from: 0, to: 0 },
        { from: 1, to: 0 }
      ])
    );
    expect(layout.rows.filter(r => r.tip).map(r => r.id)).toEqual(['d', 'c']);
    expectJoined(layout);
  });

  it('reuses a freed lane for the next branch', () => {
    // Two forks from the same root, one after the other.
    const layout = layoutTree([
      node('r', null, 1),
      node('x1', 'r', 2),
      node('y1', 'r', 3),
      node('x2', 'x1', 4),
      node('z1', 'y1', 5)
    ]);
    expect(layout.columns).toBe(2);
    expectJoined(layout);
  });

  it('gives a node whose parent is not loaded a stub, not a lane', () => {
    // The newest page of a long chain: the parent of the oldest loaded node is absent.
    const layout = layoutTree([node('c', 'b', 3), node('d', 'c', 4)]);
    expect(columns(layout)).toEqual(['d@0', 'c@0']);
    expect(layout.rows[1].danglingParent).toBe(true);
    expect(layout.rows[1].bottom).toEqual([]);
    expect(layout.rows[0].danglingParent).toBe(false);
    expectJoined(layout);
  });

  it('draws the first checkpoint of a checkout child with a stub to its origin', () => {
    // The child's first checkpoint's parent is a checkpoint of the source runtime.
    const layout = layoutTree([node('k1', 'source-cp', 10), node('k2', 'k1', 11)]);
    expect(layout.rows.map(r => r.danglingParent)).toEqual([false, true]);
  });

  it('indexes rows by id', () => {
    const layout = layoutTree([node('a', null, 1), node('b', 'a', 2)]);
    expect(layout.index.get('a')).toBe(1);
    expect(layout.index.get('b')).toBe(0);
  });

  it('lays out 10,000 checkpoints with branches every 50, every lane joined', () => {
    const nodes: ITreeNode[] = [];
    for (let i = 0; i < 10_000; i++) {
      const parent = i === 0 ? null : i % 50 === 0 ? `n${i - 25}` : `n${i - 1}`;
      nodes.push(node(`n${i}`, parent, i));
    }
    const layout = layoutTree(nodes);
    expect(layout.rows).toHaveLength(10_000);
    expect(new Set(layout.rows.map(r => r.id)).size).toBe(10_000);
    expect(layout.columns).toBeLessThanOrEqual(3);
    expectJoined(layout);
  });

  it('draws an empty tree as nothing', () => {
    expect(layoutTree([])).toEqual({ rows: [], columns: 0, index: new Map() });
  });
});
