/**
 * A checkpoint's details read what it holds and what changed since its parent once, keep
 * them, and read them again after its pending document was recorded or a failure
 * (state/checkpointInfo.ts).
 */

import { DittoApiError } from '../src/api';
import { ICheckpointContents, IDiffResult } from '../src/apiTypes';
import { CheckpointInfo } from '../src/state/checkpointInfo';
import { settle } from './fakeRuntimeServer';
import { emptyDiff, variable } from './diffFixtures';

/** The contents and diff routes, answering when the test says. */
class FakeInfoServer {
  readonly requests: string[] = [];
  failNext: Error | null = null;
  held: (() => void)[] = [];
  hold = false;
  cells = 2;

  contents(runtimeId: string, reference: string): Promise<ICheckpointContents> {
    this.requests.push(`contents ${runtimeId}/${reference}`);
    return this.answer({
      checkpoint_id: reference,
      variables: [variable('x', '1')],
      files: { count: 1, bytes: 10 },
      document: { cells: this.cells }
    });
  }

  diff(runtimeId: string, from: string, to: string): Promise<IDiffResult> {
    this.requests.push(`diff ${runtimeId} ${from}..${to}`);
    return this.answer(emptyDiff());
  }

  private answer<T>(value: T): Promise<T> {
    const failure = this.failNext;
    this.failNext = null;
    return new Promise<T>((resolve, reject) => {
      const deliver = (): void => (failure ? reject(failure) : resolve(value));
      if (this.hold) {
        this.held.push(deliver);
      } else {
        deliver();
      }
    });
  }
}

describe('CheckpointInfo', () => {
  it('reads what a checkpoint holds once, and tells when it arrived', async () => {
    const server = new FakeInfoServer();
    const info = new CheckpointInfo(server);
    let changes = 0;
    info.changed.connect(() => (changes += 1));
    expect(info.contents('r1', 'c2').state).toBe('loading');
    await settle();
    const loaded = info.contents('r1', 'c2');
    expect(loaded.state === 'loaded' && loaded.value.document).toEqual({ cells: 2 });
    expect(changes).toBe(1);
    info.contents('r1', 'c2');
    expect(server.requests).toEqual(['contents r1/c2']);
  });

  it('compares a checkpoint with its parent once', async () => {
    const server = new FakeInfoServer();
    const info = new CheckpointInfo(server);
    info.changes('r1', 'c2', 'c1');
    await settle();
    expect(info.changes('r1', 'c2', 'c1').state).toBe('loaded');
    expect(server.requests).toEqual(['diff r1 c1..c2']);
  });

  it('reads a checkpoint again once forgotten (its document was recorded meanwhile)', async () => {
    const server = new FakeInfoServer();
    const info = new CheckpointInfo(server);
    info.contents('r1', 'c2');
    await settle();
    server.cells = 5;
    info.forget('c2');
    info.contents('r1', 'c2');
    await settle();
    const loaded = info.contents('r1', 'c2');
    expect(loaded.state === 'loaded' && loaded.value.document).toEqual({ cells: 5 });
    expect(server.requests).toEqual(['contents r1/c2', 'contents r1/c2']);
  });

  it('drops an answer to a request sent before the checkpoint was forgotten', async () => {
    const server = new FakeInfoServer();
    const info = new CheckpointInfo(server);
    server.hold = true;
    info.contents('r1', 'c2'); // asked while the document was pending
    info.forget('c2');
    server.cells = 7;
    info.contents('r1', 'c2'); // asked again after the document event
    const [stale, fresh] = server.held;
    fresh();
    await settle();
    server.cells = 2;
    stale();
    await settle();
    const loaded = info.contents('r1', 'c2');
    expect(loaded.state === 'loaded' && loaded.value.document).toEqual({ cells: 7 });
  });

  it('says why a read failed, and a retry reads again', async () => {
    const server = new FakeInfoServer();
    const info = new CheckpointInfo(server);
    server.failNext = new DittoApiError('CheckpointNotFound', 'no checkpoint c9', 404);
    info.contents('r1', 'c9');
    await settle();
    expect(info.contents('r1', 'c9')).toEqual({
      state: 'failed',
      error: 'CheckpointNotFound: no checkpoint c9'
    });
    info.forget('c9');
    info.contents('r1', 'c9');
    await settle();
    expect(info.contents('r1', 'c9').state).toBe('loaded');
  });
});
