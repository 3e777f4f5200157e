/**
 * The rows a runtime's tree draws: its checkpoints (the layout's rows) and, right under a
 * checkpoint a fan-out started from, one row per fan-out group ("4 branches") followed,
 * when the group is open, by one row per child. Pure data; the inserted rows carry the
 * checkpoint's row so the graph's lanes are drawn on through them.
 */

import { ICheckoutBranch } from '../apiTypes';
import { IFanoutGroup } from '../branches/fanout';
import { ITreeLayout, ITreeRow } from './layout';

/** One drawn row of the tree. */
export type TreeItem =
  | { kind: 'checkpoint'; key: string; row: ITreeRow }
  | { kind: 'group'; key: string; row: ITreeRow; group: IFanoutGroup; expanded: boolean }
  | { kind: 'branch'; key: string; row: ITreeRow; group: IFanoutGroup; branch: ICheckoutBranch };

/** The rows, and the row index of each checkpoint among them. */
export interface ITreeItems {
  items: TreeItem[];
  index: Map<string, number>;
}

/** The tree's rows with the fan-out groups of each checkpoint under it. */
export function treeItems(
  layout: ITreeLayout,
  groupsOf: (checkpointId: string) => readonly IFanoutGroup[],
  isExpanded: (groupId: string) => boolean
): ITreeItems {
  const items: TreeItem[] = [];
  const index = new Map<string, number>();
  for (const row of layout.rows) {
    index.set(row.id, items.length);
    items.push({ kind: 'checkpoint', key: row.id, row });
    for (const group of groupsOf(row.id)) {
      const expanded = isExpanded(group.id);
      items.push({ kind: 'group', key: `group:${group.id}`, row, group, expanded });
      if (expanded) {
        for (const branch of group.children) {
          items.push({
            kind: 'branch',
            key: `branch:${branch.runtime_id}`,
            row,
            group,
            branch
          });
        }
      }
    }
  }
  return { items, index };
}
