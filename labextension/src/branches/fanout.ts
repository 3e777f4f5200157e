/**
 * The runtimes of one fan-out (a checkout of 2 or more from one checkpoint) seen as one
 * exploration: the `fanout` a record or a checkout carries, the groups of a runtime's
 * checkouts under their checkpoint, "branch 2 of 4", and the siblings "keep this branch"
 * closes. Pure functions over the server's records.
 */

import { ICheckoutBranch, IRuntimeRecord } from '../apiTypes';
import { Translate, untranslated } from '../format';
import { IFanout } from './branchTypes';

/** The fan-out of a runtime record or a checkout (null: not made by a fan-out of 2+). */
export function fanoutOf(item: object): IFanout | null {
  const fanout = (item as { fanout?: unknown }).fanout;
  if (typeof fanout !== 'object' || fanout === null) {
    return null;
  }
  const { id, index, size } = fanout as Record<string, unknown>;
  if (typeof id !== 'string' || typeof index !== 'number' || typeof size !== 'number') {
    return null;
  }
  return size >= 2 ? { id, index, size } : null;
}

/** The children of one fan-out, under the checkpoint they came from. */
export interface IFanoutGroup {
  /** The fan-out's id. */
  id: string;
  checkpointId: string;
  /** How many children the fan-out made (some may have failed: fewer are listed). */
  size: number;
  /** Its children, by their place in the fan-out. */
  children: ICheckoutBranch[];
}

/** The fan-out groups among a runtime's checkouts, oldest checkpoint's last. */
export function fanoutGroups(checkouts: readonly ICheckoutBranch[]): IFanoutGroup[] {
  const groups = new Map<string, IFanoutGroup>();
  for (const branch of checkouts) {
    const fanout = fanoutOf(branch);
    if (!fanout) {
      continue;
    }
    let group = groups.get(fanout.id);
    if (!group) {
      group = {
        id: fanout.id,
        checkpointId: branch.checkpoint_id,
        size: fanout.size,
        children: []
      };
      groups.set(fanout.id, group);
    }
    group.children.push(branch);
  }
  for (const group of groups.values()) {
    group.children.sort((a, b) => (fanoutOf(a)?.index ?? 0) - (fanoutOf(b)?.index ?? 0));
  }
  return [...groups.values()];
}

/** "branch 2 of 4". */
export function branchText(fanout: IFanout, t: Translate = untranslated): string {
  return t('branch %1 of %2', fanout.index + 1, fanout.size);
}

/** "4 branches" (the children listed; the fan-out's size when some failed to start). */
export function groupText(group: IFanoutGroup, t: Translate = untranslated): string {
  return group.children.length === 1 ? t('1 branch') : t('%1 branches', group.children.length);
}

/**
 * The siblings "keep this branch" closes: the other runtimes of the same fan-out that are
 * still live or paused, by their place in it.
 */
export function siblingsToClose(
  records: readonly IRuntimeRecord[],
  keptId: string
): IRuntimeRecord[] {
  const kept = records.find(r => r.runtime_id === keptId);
  const fanout = kept ? fanoutOf(kept) : null;
  if (!fanout) {
    return [];
  }
  return records
    .filter(r => {
      const other = fanoutOf(r);
      return r.runtime_id !== keptId && other?.id === fanout.id && r.status !== 'closed';
    })
    .sort((a, b) => (fanoutOf(a)?.index ?? 0) - (fanoutOf(b)?.index ?? 0));
}
