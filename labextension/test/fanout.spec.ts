/**
 * A fan-out's children as one exploration: groups under their checkpoint, "branch 2 of 4",
 * the tree's rows with the groups inserted, and the siblings "keep this branch" closes.
 */

import { ICheckoutBranch, IRuntimeRecord, RuntimeStatus } from '../src/apiTypes';
import {
  branchText,
  fanoutGroups,
  fanoutOf,
  groupText,
  siblingsToClose
} from '../src/branches/fanout';
import { layoutTree } from '../src/tree/layout';
import { treeItems } from '../src/tree/treeItems';

function branch(
  runtimeId: string,
  checkpointId: string,
  fanout: { id: string; index: number; size: number } | null,
  status: RuntimeStatus = 'idle'
): ICheckoutBranch {
  return {
    runtime_id: runtimeId,
    checkpoint_id: checkpointId,
    conversation_id: `${runtimeId}.ipynb`,
    status,
    fanout
  };
}

function record(
  runtimeId: string,
  fanout: { id: string; index: number; size: number } | null,
  status: RuntimeStatus = 'idle'
): IRuntimeRecord {
  return {
    runtime_id: runtimeId,
    conversation_id: `${runtimeId}.ipynb`,
    sender_id: 'me',
    status,
    created_at_ms: 1,
    updated_at_ms: 1,
    fanout
  };
}

describe('fan-out groups', () => {
  it('reads a fan-out, and none from a single checkout, an older server or bad data', () => {
    expect(fanoutOf({ fanout: { id: 'fo-1', index: 1, size: 3 } })).toEqual({
      id: 'fo-1',
      index: 1,
      size: 3
    });
    expect(fanoutOf({ fanout: null })).toBeNull();
    expect(fanoutOf({})).toBeNull();
    expect(fanoutOf({ fanout: { id: 'fo-1', index: '1', size: 3 } })).toBeNull();
    expect(fanoutOf({ fanout: { id: 'fo-1', index: 0, size: 1 } })).toBeNull();
  });

  it('groups the children of one fan-out by their place, apart from single checkouts', () => {
    const groups = fanoutGroups([
      branch('b', 'c1', { id: 'fo-1', index: 2, size: 3 }),
      branch('single', 'c1', null),
      branch('a', 'c1', { id: 'fo-1', index: 0, size: 3 }),
      branch('x', 'c2', { id: 'fo-2', index: 0, size: 2 }),
      branch('m', 'c1', { id: 'fo-1', index: 1, size: 3 }),
      branch('y', 'c2', { id: 'fo-2', index: 1, size: 2 })
    ]);
    expect(groups.map(g => [g.id, g.checkpointId, g.children.map(c => c.runtime_id)])).toEqual([
      ['fo-1', 'c1', ['a', 'm', 'b']],
      ['fo-2', 'c2', ['x', 'y']]
    ]);
    expect(groupText(groups[0])).toBe('3 branches');
    expect(branchText({ id: 'fo-1', index: 1, size: 4 })).toBe('branch 2 of 4');
  });

  it('puts a group row under its checkpoint, and its children when it is open', () => {
    const layout = layoutTree([
      { id: 'c1', parent: null, time: 1 },
      { id: 'c2', parent: 'c1', time: 2 }
    ]);
    const groups = fanoutGroups([
      branch('a', 'c1', { id: 'fo-1', index: 0, size: 2 }),
      branch('b', 'c1', { id: 'fo-1', index: 1, size: 2 })
    ]);
    const groupsOf = (id: string): typeof groups => groups.filter(g => g.checkpointId === id);
    const closed = treeItems(layout, groupsOf, () => false);
    expect(closed.items.map(i => i.key)).toEqual(['c2', 'c1', 'group:fo-1']);
    expect(closed.index.get('c1')).toBe(1);
    const open = treeItems(layout, groupsOf, id => id === 'fo-1');
    expect(open.items.map(i => i.key)).toEqual(['c2', 'c1', 'group:fo-1', 'branch:a', 'branch:b']);
    // The inserted rows carry the checkpoint's row, whose lanes they draw on through.
    expect(open.items[4].row).toBe(layout.rows[1]);
  });

  it('keeping a branch closes the live and paused siblings of its fan-out only', () => {
    const records = [
      record('a', { id: 'fo-1', index: 0, size: 4 }),
      record('d', { id: 'fo-1', index: 3, size: 4 }, 'paused'),
      record('b', { id: 'fo-1', index: 1, size: 4 }),
      record('c', { id: 'fo-1', index: 2, size: 4 }, 'closed'),
      record('other', { id: 'fo-2', index: 0, size: 2 }),
      record('plain', null)
    ];
    expect(siblingsToClose(records, 'b').map(r => r.runtime_id)).toEqual(['a', 'd']);
    expect(siblingsToClose(records, 'plain')).toEqual([]);
    expect(siblingsToClose(records, 'unknown')).toEqual([]);
  });
});
