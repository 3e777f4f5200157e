/**
 * Runtime events from the server's event stream update what the panel shows
 * (state/runtimeEvents.ts over state/serverCache.ts): each with the one small request it
 * needs, for runtimes the panel holds and ones it does not, and in whatever order the
 * answers come back.
 */

import { IRuntimeEvent, RUNTIME_EVENT_SCHEMA_ID, RuntimeAction } from '../src/apiTypes';
import { applyRuntimeEvent } from '../src/state/runtimeEvents';
import { ServerCache } from '../src/state/serverCache';
import { FakeRuntimeServer } from './fakeRuntimeServer';

function event(
  action: RuntimeAction,
  runtimeId: string,
  fields: Partial<IRuntimeEvent> = {}
): IRuntimeEvent {
  return {
    schema_id: RUNTIME_EVENT_SCHEMA_ID,
    action,
    runtime_id: runtimeId,
    duration_ms: 1,
    ok: true,
    ...fields
  };
}

/** A server with runtime r1 (checkpoint c1, its head) and r2; the panel listed both. */
async function setUp(openTree = true): Promise<{ server: FakeRuntimeServer; cache: ServerCache }> {
  const server = new FakeRuntimeServer();
  server.addRuntime('r1');
  server.takeCheckpoint('r1', 'c1');
  server.addRuntime('r2');
  const cache = new ServerCache(server);
  await cache.refresh();
  if (openTree) {
    await cache.loadTree('r1');
  }
  server.requests.length = 0;
  return { server, cache };
}

const headOf = (cache: ServerCache, runtimeId: string): string | null | undefined =>
  cache.lineage(runtimeId)?.head?.checkpoint_id;

describe('runtime events', () => {
  it('a checkpoint joins the open tree and becomes the head, with two small requests', async () => {
    const { server, cache } = await setUp();
    const before = cache.record('r1')?.updated_at_ms ?? 0;
    server.takeCheckpoint('r1', 'c2');
    await applyRuntimeEvent(cache, event('checkpoint', 'r1', { checkpoint_id: 'c2' }));
    expect(cache.tree('r1')?.checkpoints.has('c2')).toBe(true);
    expect(headOf(cache, 'r1')).toBe('c2');
    expect(cache.record('r1')?.updated_at_ms).toBeGreaterThan(before);
    expect(server.requests.sort()).toEqual(['GET checkpoint r1/c2', 'GET runtime r1']);
  });

  it('a checkpoint of a runtime whose tree is not open only refreshes its row', async () => {
    const { server, cache } = await setUp(false);
    const before = cache.record('r1')?.updated_at_ms ?? 0;
    server.takeCheckpoint('r1', 'c2');
    await applyRuntimeEvent(cache, event('checkpoint', 'r1', { checkpoint_id: 'c2' }));
    expect(server.requests).toEqual(['GET runtime r1']);
    expect(cache.record('r1')?.updated_at_ms).toBeGreaterThan(before);
    expect(cache.tree('r1')).toBeUndefined();
  });

  it('a pause shows the runtime paused at its pause checkpoint', async () => {
    const { server, cache } = await setUp();
    server.takeCheckpoint('r1', 'p1');
    server.setStatus('r1', 'paused');
    await applyRuntimeEvent(cache, event('pause', 'r1', { checkpoint_id: 'p1', reason: 'idle' }));
    expect(cache.record('r1')?.status).toBe('paused');
    expect(headOf(cache, 'r1')).toBe('p1');
    expect(cache.tree('r1')?.checkpoints.get('p1')?.parent_checkpoint_id).toBe('c1');
  });

  it('a resume shows the runtime live again', async () => {
    const { server, cache } = await setUp();
    server.setStatus('r1', 'paused');
    await applyRuntimeEvent(cache, event('pause', 'r1'));
    expect(cache.record('r1')?.status).toBe('paused');
    server.setStatus('r1', 'idle');
    await applyRuntimeEvent(cache, event('resume', 'r1', { checkpoint_id: 'c1' }));
    expect(cache.record('r1')?.status).toBe('idle');
    expect(headOf(cache, 'r1')).toBe('c1');
  });

  it('a lost runtime shows paused, in its own row and among its source checkouts', async () => {
    const { server, cache } = await setUp();
    server.checkout('c1', 'r3');
    await applyRuntimeEvent(
      cache,
      event('checkout', 'r3', { checkpoint_id: 'c1', source_runtime_id: 'r1' })
    );
    expect(cache.checkoutsOf('r1', 'c1').map(c => [c.runtime_id, c.status])).toEqual([
      ['r3', 'idle']
    ]);
    server.setStatus('r3', 'paused');
    await applyRuntimeEvent(cache, event('lost', 'r3', { status: 'paused' }));
    expect(cache.record('r3')?.status).toBe('paused');
    expect(cache.checkoutsOf('r1', 'c1').map(c => c.status)).toEqual(['paused']);
  });

  it('a close shows the runtime closed and keeps its tree', async () => {
    const { server, cache } = await setUp();
    server.setStatus('r1', 'closed');
    await applyRuntimeEvent(cache, event('close', 'r1', { status: 'closed' }));
    expect(cache.record('r1')?.status).toBe('closed');
    expect([...(cache.tree('r1')?.checkpoints.keys() ?? [])]).toEqual(['c1']);
  });

  it('an event for a runtime the panel does not hold loads that runtime alone', async () => {
    const { server, cache } = await setUp();
    server.addRuntime('r9', 'new.ipynb');
    await applyRuntimeEvent(cache, event('register', 'r9', { status: 'idle' }));
    expect(cache.record('r9')?.conversation_id).toBe('new.ipynb');
    expect(server.requests).toEqual(['GET runtime r9']);
  });

  it('an event for a runtime the server does not know adds nothing and fails nothing', async () => {
    const { cache } = await setUp();
    await expect(
      applyRuntimeEvent(cache, event('checkpoint', 'ghost', { checkpoint_id: 'c9' }))
    ).resolves.toBeUndefined();
    expect(cache.record('ghost')).toBeUndefined();
    expect(
      cache
        .records()
        .map(r => r.runtime_id)
        .sort()
    ).toEqual(['r1', 'r2']);
  });

  it('a runtime the server no longer knows leaves the list on its next event', async () => {
    const { server, cache } = await setUp();
    server.forget('r2');
    await applyRuntimeEvent(cache, event('close', 'r2'));
    expect(cache.record('r2')).toBeUndefined();
  });

  it('a failed operation changes nothing and asks nothing', async () => {
    const { server, cache } = await setUp();
    await applyRuntimeEvent(
      cache,
      event('checkpoint', 'r1', { ok: false, error: 'SessionBusy', checkpoint_id: null })
    );
    await applyRuntimeEvent(cache, event('pause', 'r1', { ok: false, error: 'BackendError' }));
    expect(server.requests).toEqual([]);
    expect(cache.record('r1')?.status).toBe('idle');
  });

  it('a restore moves the head: to a loaded checkpoint at once, else from the lineage', async () => {
    const { server, cache } = await setUp();
    server.takeCheckpoint('r1', 'c2');
    await applyRuntimeEvent(cache, event('checkpoint', 'r1', { checkpoint_id: 'c2' }));
    server.requests.length = 0;
    server.restore('r1', 'c1');
    await applyRuntimeEvent(cache, event('restore', 'r1', { checkpoint_id: 'c1' }));
    expect(headOf(cache, 'r1')).toBe('c1');
    expect(server.requests).toEqual(['GET runtime r1']);

    const other = await setUp(false);
    await other.cache.loadLineage('r1');
    other.server.takeCheckpoint('r1', 'c2');
    other.server.restore('r1', 'c2');
    await applyRuntimeEvent(other.cache, event('restore', 'r1', { checkpoint_id: 'c2' }));
    expect(headOf(other.cache, 'r1')).toBe('c2');
  });

  it('a checkout adds the new runtime, and it joins its source checkouts', async () => {
    const { server, cache } = await setUp();
    server.checkout('c1', 'r4');
    await applyRuntimeEvent(
      cache,
      event('checkout', 'r4', { checkpoint_id: 'c1', source_runtime_id: 'r1' })
    );
    expect(cache.record('r4')?.status).toBe('idle');
    expect(cache.checkoutsOf('r1', 'c1').map(c => c.runtime_id)).toEqual(['r4']);
  });

  it('a recorded document shows in the checkpoint and drops what its details held', async () => {
    const { server, cache } = await setUp();
    server.takeCheckpoint('r1', 'c2');
    server.setDocument('c2', 'pending', null);
    await applyRuntimeEvent(
      cache,
      event('checkpoint', 'r1', { checkpoint_id: 'c2', document: 'pending' })
    );
    expect(cache.checkpoint('c2')?.document).toEqual({ source: 'pending', cells: null });
    const forgotten: string[] = [];
    server.setDocument('c2', 'front_end', 3);
    server.requests.length = 0;
    await applyRuntimeEvent(
      cache,
      event('document', 'r1', { checkpoint_id: 'c2', document: 'front_end' }),
      { forget: id => forgotten.push(id) }
    );
    expect(cache.checkpoint('c2')?.document).toEqual({ source: 'front_end', cells: 3 });
    expect(headOf(cache, 'r1')).toBe('c2');
    expect(forgotten).toEqual(['c2']);
    expect(server.requests).toEqual(['GET checkpoint r1/c2']);
  });

  it('an undo moves the head to the checkpoint before the last cell', async () => {
    const { server, cache } = await setUp();
    server.takeCheckpoint('r1', 'cell-2');
    await applyRuntimeEvent(cache, event('checkpoint', 'r1', { checkpoint_id: 'cell-2' }));
    server.restore('r1', 'c1');
    await applyRuntimeEvent(cache, event('undo', 'r1', { checkpoint_id: 'c1' }));
    expect(headOf(cache, 'r1')).toBe('c1');
  });

  it('a deleted snapshot shows in the checkpoint, in the tree and as the head', async () => {
    const { server, cache } = await setUp();
    server.deleteSnapshot('c1');
    await applyRuntimeEvent(cache, event('delete-snapshot', 'r1', { checkpoint_id: 'c1' }));
    expect(cache.tree('r1')?.checkpoints.get('c1')?.has_provider_snapshot).toBe(false);
    expect(cache.lineage('r1')?.head?.has_provider_snapshot).toBe(false);
  });
});

describe('runtime events answered out of order', () => {
  it('a pause answered after the resume that followed it leaves the runtime live', async () => {
    const { server, cache } = await setUp(false);
    server.holdAnswers();
    server.setStatus('r1', 'paused');
    const pause = applyRuntimeEvent(cache, event('pause', 'r1'));
    server.setStatus('r1', 'idle');
    const resume = applyRuntimeEvent(cache, event('resume', 'r1'));
    await server.release('GET runtime r1', 1); // the resume's answer first
    await server.release('GET runtime r1', 0); // then the pause's, late
    await Promise.all([pause, resume]);
    expect(cache.record('r1')?.status).toBe('idle');
  });

  it('two checkpoints answered in reverse order keep the newer as head, both in the tree', async () => {
    const { server, cache } = await setUp();
    server.holdAnswers();
    server.takeCheckpoint('r1', 'c2');
    const first = applyRuntimeEvent(cache, event('checkpoint', 'r1', { checkpoint_id: 'c2' }));
    server.takeCheckpoint('r1', 'c3');
    const second = applyRuntimeEvent(cache, event('checkpoint', 'r1', { checkpoint_id: 'c3' }));
    await server.release('GET checkpoint r1/c3');
    await server.release('GET checkpoint r1/c2');
    await server.releaseAll();
    await Promise.all([first, second]);
    expect(headOf(cache, 'r1')).toBe('c3');
    expect([...(cache.tree('r1')?.checkpoints.keys() ?? [])].sort()).toEqual(['c1', 'c2', 'c3']);
  });

  it('a checkpoint answered after a later restore does not take the head back', async () => {
    const { server, cache } = await setUp();
    server.holdAnswers();
    server.takeCheckpoint('r1', 'c2');
    const checkpoint = applyRuntimeEvent(cache, event('checkpoint', 'r1', { checkpoint_id: 'c2' }));
    server.restore('r1', 'c1');
    const restore = applyRuntimeEvent(cache, event('restore', 'r1', { checkpoint_id: 'c1' }));
    await server.release('GET runtime r1', 1); // the restore's record, then its head (c1 is loaded)
    await server.releaseAll(); // the checkpoint's answers, late
    await Promise.all([checkpoint, restore]);
    expect(headOf(cache, 'r1')).toBe('c1');
    expect(cache.tree('r1')?.checkpoints.has('c2')).toBe(true);
  });

  it('a listing answered after newer events keeps what the events brought', async () => {
    const { server, cache } = await setUp(false);
    server.holdAnswers();
    const listing = cache.refresh(); // the list the panel asked for before the events
    server.setStatus('r1', 'paused');
    const pause = applyRuntimeEvent(cache, event('pause', 'r1'));
    server.addRuntime('r9');
    const register = applyRuntimeEvent(cache, event('register', 'r9'));
    await server.release('GET runtime r1');
    await server.release('GET runtime r9');
    await server.release('GET runtimes');
    await Promise.all([listing, pause, register]);
    expect(cache.record('r1')?.status).toBe('paused');
    expect(cache.record('r9')).toBeDefined();
  });

  it('a page of checkpoints answered after a deleted snapshot keeps the deletion', async () => {
    const { server, cache } = await setUp(false);
    server.holdAnswers();
    const open = cache.loadTree('r1');
    await server.release('GET lineage r1');
    server.deleteSnapshot('c1');
    const deleted = applyRuntimeEvent(
      cache,
      event('delete-snapshot', 'r1', { checkpoint_id: 'c1' })
    );
    await server.release('GET checkpoint r1/c1');
    await server.release('GET checkpoints r1');
    await Promise.all([open, deleted]);
    expect(cache.tree('r1')?.checkpoints.get('c1')?.has_provider_snapshot).toBe(false);
  });
});
