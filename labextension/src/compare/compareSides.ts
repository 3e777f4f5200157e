/**
 * Which two points a Compare compares, from what the user picked: the `from` and `to` a
 * button names; else the two checkpoints picked in the tree, the older first; else the one
 * picked (or the selected checkpoint) against the live kernel, when the runtime is live.
 * Three picks or more are compared side by side (`pickedSides`), not two at a time.
 */

import { LIVE } from '../apiTypes';
import { ICompareSideRequest } from '../branches/branchTypes';
import { PanelState } from '../state/panelState';

/** The two sides of a comparison, in one runtime. */
export interface ICompareSides {
  runtimeId: string;
  from: string;
  /** A checkpoint id, or `LIVE`. */
  to: string;
}

/** What a Compare command was given. */
export interface ICompareArgs {
  runtimeId?: unknown;
  from?: unknown;
  to?: unknown;
}

/** The sides to compare, or null when there is nothing to compare. */
export function compareSides(
  state: PanelState,
  args: ICompareArgs,
  selectedCheckpointId: string | null
): ICompareSides | null {
  const cache = state.cache;
  if (typeof args.from === 'string') {
    const runtimeId =
      typeof args.runtimeId === 'string' ? args.runtimeId : cache.checkpoint(args.from)?.runtime_id;
    const to = typeof args.to === 'string' ? args.to : LIVE;
    return runtimeId ? { runtimeId, from: args.from, to } : null;
  }
  const picks = state.picks;
  if (pickedSides(state) !== null) {
    return null; // side by side
  }
  if (picks && picks.checkpointIds.length === 2) {
    const time = (id: string): number => cache.checkpoint(id)?.created_at_ms ?? 0;
    const [older, newer] = [...picks.checkpointIds].sort((a, b) => time(a) - time(b));
    return { runtimeId: picks.runtimeId, from: older, to: newer };
  }
  const one = picks?.checkpointIds[0] ?? selectedCheckpointId;
  const runtimeId = picks?.runtimeId ?? (one ? cache.checkpoint(one)?.runtime_id : undefined);
  const status = runtimeId ? state.runtime(runtimeId)?.status : undefined;
  if (!one || !runtimeId || (status !== 'idle' && status !== 'busy')) {
    return null;
  }
  return { runtimeId, from: one, to: LIVE };
}

/** The sides of a side-by-side Compare of three picks or more, in the order picked. */
export function pickedSides(state: PanelState): ICompareSideRequest[] | null {
  const picks = state.picks;
  if (!picks || picks.checkpointIds.length < 3) {
    return null;
  }
  return picks.checkpointIds.map(id => ({ runtime_id: picks.runtimeId, at: id }));
}
