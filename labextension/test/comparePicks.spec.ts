/**
 * Picking checkpoints for Compare (state/panelState.ts) and which two points a Compare
 * then compares (compare/compareSides.ts); and the notice a restore leaves.
 */

import { LIVE } from '../src/apiTypes';
import { CheckpointInfo } from '../src/state/checkpointInfo';
import { compareSides, pickedSides } from '../src/compare/compareSides';
import { PanelState } from '../src/state/panelState';
import { ServerCache } from '../src/state/serverCache';
import { FakeRuntimeServer } from './fakeRuntimeServer';

/** r1 with checkpoints c1 (older) and c2, r2 with c3; both trees loaded. */
async function setUp(): Promise<{ server: FakeRuntimeServer; state: PanelState }> {
  const server = new FakeRuntimeServer();
  server.addRuntime('r1');
  server.takeCheckpoint('r1', 'c1');
  server.takeCheckpoint('r1', 'c2');
  server.addRuntime('r2');
  server.takeCheckpoint('r2', 'c3');
  const cache = new ServerCache(server);
  const info = new CheckpointInfo({
    contents: () => Promise.reject(new Error('not used')),
    diff: () => Promise.reject(new Error('not used'))
  });
  const state = new PanelState(cache, info);
  await cache.refresh();
  await cache.loadTree('r1');
  await cache.loadTree('r2');
  return { server, state };
}

describe('picking checkpoints for Compare', () => {
  it('keeps at most two picks of one runtime, in the order picked', async () => {
    const { state } = await setUp();
    state.togglePick('r1', 'c2');
    state.togglePick('r1', 'c1');
    expect(state.pickIndex('r1', 'c2')).toBe(1);
    expect(state.pickIndex('r1', 'c1')).toBe(2);
    state.togglePick('r1', 'c2'); // unpick
    expect(state.picks).toEqual({ runtimeId: 'r1', checkpointIds: ['c1'] });
    state.togglePick('r2', 'c3'); // another runtime starts over
    expect(state.picks).toEqual({ runtimeId: 'r2', checkpointIds: ['c3'] });
    expect(state.pickIndex('r1', 'c1')).toBe(0);
    state.clearPicks();
    expect(state.picks).toBeNull();
  });

  it('a click then a Ctrl+click picks both, as a user picks two', async () => {
    const { state } = await setUp();
    state.select({ runtimeId: 'r1', checkpointId: 'c1' }); // the click
    state.ctrlPick('r1', 'c2'); // the Ctrl+click (the tree selects it after picking)
    state.select({ runtimeId: 'r1', checkpointId: 'c2' });
    expect(state.picks).toEqual({ runtimeId: 'r1', checkpointIds: ['c1', 'c2'] });
    expect(compareSides(state, {}, 'c2')).toEqual({ runtimeId: 'r1', from: 'c1', to: 'c2' });
  });

  it('a Ctrl+click picks only itself after a click on the same row or another runtime', async () => {
    const { state } = await setUp();
    state.select({ runtimeId: 'r1', checkpointId: 'c1' });
    state.ctrlPick('r1', 'c1');
    expect(state.picks).toEqual({ runtimeId: 'r1', checkpointIds: ['c1'] });
    state.ctrlPick('r1', 'c1'); // a second Ctrl+click unpicks it
    expect(state.picks).toBeNull();
    state.select({ runtimeId: 'r2', checkpointId: 'c3' });
    state.ctrlPick('r1', 'c2');
    expect(state.picks).toEqual({ runtimeId: 'r1', checkpointIds: ['c2'] });
    state.select({ runtimeId: 'r1', checkpointId: 'c1' }); // picks exist: a click adds none
    state.ctrlPick('r1', 'c2');
    expect(state.picks).toBeNull();
  });

  it('keeps up to eight picks; a ninth replaces the oldest', async () => {
    const { server, state } = await setUp();
    const more = ['c4', 'c5', 'c6', 'c7', 'c8', 'c9', 'c10'];
    more.forEach(id => server.takeCheckpoint('r1', id));
    await state.cache.loadTree('r1');
    state.togglePick('r1', 'c1');
    state.togglePick('r1', 'c2');
    state.togglePick('r1', 'c4');
    expect(state.picks?.checkpointIds).toEqual(['c1', 'c2', 'c4']);
    expect(state.pickIndex('r1', 'c4')).toBe(3);
    more.slice(1).forEach(id => state.togglePick('r1', id));
    expect(state.picks?.checkpointIds).toEqual(['c2', 'c4', 'c5', 'c6', 'c7', 'c8', 'c9', 'c10']);
  });

  it('compares three or more picks side by side, in the order picked', async () => {
    const { server, state } = await setUp();
    server.takeCheckpoint('r1', 'c4');
    await state.cache.loadTree('r1');
    state.togglePick('r1', 'c4');
    state.togglePick('r1', 'c1');
    expect(pickedSides(state)).toBeNull(); // two: the two-sided Compare
    state.togglePick('r1', 'c2');
    expect(pickedSides(state)).toEqual([
      { runtime_id: 'r1', at: 'c4' },
      { runtime_id: 'r1', at: 'c1' },
      { runtime_id: 'r1', at: 'c2' }
    ]);
    expect(compareSides(state, {}, null)).toBeNull();
  });
});

describe('compareSides', () => {
  it('compares two picks older first, whichever was picked first', async () => {
    const { state } = await setUp();
    state.togglePick('r1', 'c2');
    state.togglePick('r1', 'c1');
    expect(compareSides(state, {}, null)).toEqual({ runtimeId: 'r1', from: 'c1', to: 'c2' });
  });

  it('compares one pick, else the selected checkpoint, with the live kernel', async () => {
    const { state } = await setUp();
    expect(compareSides(state, {}, 'c1')).toEqual({ runtimeId: 'r1', from: 'c1', to: LIVE });
    state.togglePick('r1', 'c2');
    expect(compareSides(state, {}, 'c1')).toEqual({ runtimeId: 'r1', from: 'c2', to: LIVE });
  });

  it('compares nothing with live for a runtime that is not live', async () => {
    const { server, state } = await setUp();
    server.setStatus('r1', 'paused');
    await state.cache.refreshRuntime('r1');
    expect(compareSides(state, {}, 'c1')).toBeNull();
    expect(compareSides(state, {}, null)).toBeNull();
  });

  it('takes the sides a button names', async () => {
    const { state } = await setUp();
    state.togglePick('r2', 'c3');
    expect(compareSides(state, { from: 'c1', to: 'c2' }, null)).toEqual({
      runtimeId: 'r1',
      from: 'c1',
      to: 'c2'
    });
    expect(compareSides(state, { runtimeId: 'r1', from: 'c2' }, null)).toEqual({
      runtimeId: 'r1',
      from: 'c2',
      to: LIVE
    });
  });
});

describe('the notice after a restore', () => {
  it('is kept per runtime until dismissed', async () => {
    const { state } = await setUp();
    let changes = 0;
    state.changed.connect(() => (changes += 1));
    state.setRestoreNotice('r1', { checkpointId: 'c1', cellsChanged: 7 });
    expect(state.restoreNotice('r1')).toEqual({ checkpointId: 'c1', cellsChanged: 7 });
    expect(state.restoreNotice('r2')).toBeUndefined();
    state.setRestoreNotice('r1', null);
    state.setRestoreNotice('r1', null); // nothing left to dismiss: no change
    expect(state.restoreNotice('r1')).toBeUndefined();
    expect(changes).toBe(2);
  });
});
