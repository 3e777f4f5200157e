/**
 * What each runtime event from the server's event stream (`/api/events/subscribe`) changes
 * in the server cache: one small request for what it changed, never a reload of a listing,
 * so a `%checkpoint` typed in any tab shows up in the panel within a second.
 *
 * Events carry no order of their own, and their requests may be answered in any order; the
 * cache keeps the newest answer of each piece (`Freshness`), so the panel ends where the
 * server is. An event for a runtime the cache does not hold loads that runtime's record.
 */

import { IRuntimeEvent } from '../apiTypes';
import type { CheckpointInfo } from './checkpointInfo';
import { ServerCache } from './serverCache';

/**
 * Apply one runtime event to the cache (and drop what the details hold of a checkpoint
 * whose pending document was just recorded).
 */
export async function applyRuntimeEvent(
  cache: ServerCache,
  event: IRuntimeEvent,
  info?: Pick<CheckpointInfo, 'forget'>
): Promise<void> {
  if (!event.ok) {
    return; // a failed operation left the store as it was
  }
  const runtimeId = event.runtime_id;
  const checkpointId = event.checkpoint_id ?? null;
  switch (event.action) {
    case 'checkpoint':
    case 'pause':
      // The new checkpoint (a pause takes one) becomes the runtime's head.
      await Promise.all([
        cache.refreshRuntime(runtimeId),
        checkpointId ? cache.noteCheckpoint(runtimeId, checkpointId, true) : null
      ]);
      break;
    case 'restore':
    case 'undo':
      // An undo is a restore of the checkpoint from before the last cell.
      await cache.refreshRuntime(runtimeId);
      if (checkpointId) {
        await cache.noteHead(runtimeId, checkpointId);
      }
      break;
    case 'checkout':
      // `runtime_id` is the new child; it joins the source's checkouts.
      await cache.refreshRuntime(runtimeId);
      if (event.source_runtime_id && checkpointId) {
        cache.noteCheckout(event.source_runtime_id, runtimeId, checkpointId, event.fanout ?? null);
      }
      break;
    case 'document':
      // A pending document was recorded: the checkpoint's summary now says where from.
      if (checkpointId) {
        info?.forget(checkpointId);
        await cache.noteCheckpoint(runtimeId, checkpointId, false);
      }
      break;
    case 'delete-snapshot':
      if (checkpointId && cache.checkpoint(checkpointId)) {
        await cache.noteCheckpoint(runtimeId, checkpointId, false);
      }
      break;
    default:
      // register, resume, close, lost, prune: the runtime's record says what changed.
      await cache.refreshRuntime(runtimeId);
  }
}
