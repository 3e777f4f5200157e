/**
 * What the details of a checkpoint show beyond its summary: what it holds (variables,
 * files, document; the contents route) and what changed since its parent (the diff
 * route). Both are read once per checkpoint, when its details are first shown, and kept:
 * a checkpoint does not change, except for a document still pending when it was read,
 * which `forget` drops when the document event arrives.
 */

import { ISignal, Signal } from '@lumino/signaling';

import { errorText } from '../api';
import type { RuntimeApi } from '../api';
import { ICheckpointContents, IDiffResult } from '../apiTypes';

/** The routes the details read. */
export type CheckpointInfoReader = Pick<RuntimeApi, 'contents' | 'diff'>;

/** One piece of loaded information: loading, loaded, or failed with a sentence. */
export type Loaded<T> =
  { state: 'loading' } | { state: 'loaded'; value: T } | { state: 'failed'; error: string };

/** Checkpoints whose information is kept; the oldest read is dropped beyond this. */
const KEEP = 200;

/** The contents and parent changes of the checkpoints whose details were shown. */
export class CheckpointInfo {
  constructor(readonly api: CheckpointInfoReader) {}

  /** Emitted when a piece of information arrives (or fails). */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** What a checkpoint holds (starts loading it the first time it is asked for). */
  contents(runtimeId: string, checkpointId: string): Loaded<ICheckpointContents> {
    return this._get(this._contents, checkpointId, () =>
      this.api.contents(runtimeId, checkpointId)
    );
  }

  /** What changed from a checkpoint's parent to it (loads it the first time). */
  changes(runtimeId: string, checkpointId: string, parentId: string): Loaded<IDiffResult> {
    return this._get(this._changes, checkpointId, () =>
      this.api.diff(runtimeId, parentId, checkpointId)
    );
  }

  /**
   * Drop what is held of a checkpoint, so it is read again: its pending document was
   * recorded meanwhile, or the user retries after a failure.
   */
  forget(checkpointId: string): void {
    const contents = this._contents.delete(checkpointId);
    const changes = this._changes.delete(checkpointId);
    if (contents || changes) {
      this._changed.emit(undefined);
    }
  }

  private _get<T>(
    store: Map<string, Loaded<T>>,
    checkpointId: string,
    load: () => Promise<T>
  ): Loaded<T> {
    const held = store.get(checkpointId);
    if (held) {
      return held;
    }
    const loading: Loaded<T> = { state: 'loading' };
    store.set(checkpointId, loading);
    while (store.size > KEEP) {
      store.delete(store.keys().next().value as string);
    }
    void load().then(
      value => this._settle(store, checkpointId, loading, { state: 'loaded', value }),
      error =>
        this._settle(store, checkpointId, loading, { state: 'failed', error: errorText(error) })
    );
    return loading;
  }

  /** Keep an answer unless its request was forgotten meanwhile (a newer one is due). */
  private _settle<T>(
    store: Map<string, Loaded<T>>,
    checkpointId: string,
    request: Loaded<T>,
    answer: Loaded<T>
  ): void {
    if (store.get(checkpointId) === request) {
      store.set(checkpointId, answer);
      this._changed.emit(undefined);
    }
  }

  private _changed = new Signal<this, void>(this);
  private _contents = new Map<string, Loaded<ICheckpointContents>>();
  private _changes = new Map<string, Loaded<IDiffResult>>();
}
