/**
 * A fake of the server's read routes (`RuntimeReader`), for the cache's tests.
 *
 * It stands in for the runtime API of a running server: runtimes, checkpoints and lineages
 * held in memory, changed by the test the way operations change them on the server. Each
 * answer is computed when its request arrives (the server's state at that moment), and,
 * once `holdAnswers()` was called, delivered only when the test releases it, so a test
 * picks the order in which answers come back. An unknown runtime or checkpoint is answered
 * with a `DittoApiError` 404, as the server answers.
 */

import { DittoApiError, IPageRequest } from '../src/api';
import {
  ICheckpointDetail,
  ICheckpointPage,
  ICheckpointSummary,
  DocumentSource,
  IRuntimeLineage,
  IRuntimeRecord,
  RuntimeStatus
} from '../src/apiTypes';
import { RuntimeReader } from '../src/state/serverCache';

interface IHeldAnswer {
  label: string;
  deliver: () => void;
}

export class FakeRuntimeServer implements RuntimeReader {
  /** Every request, in the order it arrived: "GET runtime r1", "GET checkpoint r1/c2", ... */
  readonly requests: string[] = [];

  /** From now on, answers wait until `release` lets them go. */
  holdAnswers(): void {
    this._holding = true;
  }

  /** The requests whose answers are held, oldest first. */
  held(): string[] {
    return this._held.map(h => h.label);
  }

  /** Deliver the held answer of the `nth` held request with this label, and let it land. */
  async release(label: string, nth = 0): Promise<void> {
    const matching = this._held.filter(h => h.label === label);
    const answer = matching[nth];
    if (!answer) {
      throw new Error(`no held answer #${nth} of ${label}; held: ${this.held().join(', ')}`);
    }
    this._held.splice(this._held.indexOf(answer), 1);
    answer.deliver();
    await settle();
  }

  /** Deliver every held answer, oldest first. */
  async releaseAll(): Promise<void> {
    while (this._held.length > 0) {
      await this.release(this._held[0].label);
    }
  }

  // The server's side: what operations do to its state.

  addRuntime(runtimeId: string, path = `${runtimeId}.ipynb`): void {
    this._clock += 1;
    this._runtimes.set(runtimeId, {
      runtime_id: runtimeId,
      conversation_id: path,
      sender_id: 'user',
      status: 'idle',
      fanout: null,
      created_at_ms: this._clock,
      updated_at_ms: this._clock
    });
    this._lineages.set(runtimeId, {
      runtime_id: runtimeId,
      head: null,
      source: null,
      checkouts: []
    });
  }

  setStatus(runtimeId: string, status: RuntimeStatus): void {
    this._touch(runtimeId).status = status;
    for (const lineage of this._lineages.values()) {
      for (const branch of lineage.checkouts) {
        if (branch.runtime_id === runtimeId) {
          branch.status = status;
        }
      }
    }
  }

  /** A new checkpoint of a runtime, made its head (a checkpoint or a pause). */
  takeCheckpoint(runtimeId: string, checkpointId: string): ICheckpointSummary {
    const lineage = this._lineage(runtimeId);
    this._touch(runtimeId);
    const summary: ICheckpointSummary = {
      checkpoint_id: checkpointId,
      runtime_id: runtimeId,
      parent_checkpoint_id: lineage.head?.checkpoint_id ?? null,
      name: null,
      metadata: {},
      created_at_ms: this._clock,
      bytes_written: 100,
      has_provider_snapshot: true,
      unrestorable: []
    };
    this._checkpoints.set(checkpointId, summary);
    lineage.head = summary;
    return summary;
  }

  /** A restore: the checkpoint becomes its runtime's head. */
  restore(runtimeId: string, checkpointId: string): void {
    this._touch(runtimeId);
    this._lineage(runtimeId).head = this._checkpoint(checkpointId);
  }

  /** A checkout: a new runtime from a checkpoint, among its source's checkouts. */
  checkout(checkpointId: string, childId: string): void {
    const source = this._checkpoint(checkpointId).runtime_id;
    this.addRuntime(childId);
    this._lineage(childId).source = { runtime_id: source, checkpoint_id: checkpointId };
    this._lineage(source).checkouts.push({
      runtime_id: childId,
      checkpoint_id: checkpointId,
      conversation_id: `${childId}.ipynb`,
      status: 'idle',
      fanout: null
    });
  }

  /** The checkpoint's document is recorded (or pending): its summary says where from. */
  setDocument(checkpointId: string, source: DocumentSource, cells: number | null): void {
    this._checkpoint(checkpointId).document = { source, cells };
  }

  deleteSnapshot(checkpointId: string): void {
    this._checkpoint(checkpointId).has_provider_snapshot = false;
  }

  /** The runtime is gone from the server (its store was reset, say). */
  forget(runtimeId: string): void {
    this._runtimes.delete(runtimeId);
    this._lineages.delete(runtimeId);
  }

  // RuntimeReader: the routes the cache reads.

  listRuntimes(): Promise<{ runtimes: IRuntimeRecord[] }> {
    return this._answer('GET runtimes', () => ({ runtimes: [...this._runtimes.values()] }));
  }

  getRuntime(runtimeId: string): Promise<IRuntimeRecord> {
    return this._answer(`GET runtime ${runtimeId}`, () => this._record(runtimeId));
  }

  listCheckpoints(runtimeId: string, page: IPageRequest = {}): Promise<ICheckpointPage> {
    return this._answer(`GET checkpoints ${runtimeId}`, () => {
      this._record(runtimeId);
      const all = [...this._checkpoints.values()]
        .filter(c => c.runtime_id === runtimeId)
        .sort((a, b) => b.created_at_ms - a.created_at_ms);
      const start = page.cursor ? Number(page.cursor) : 0;
      const end = page.limit ? start + page.limit : all.length;
      return {
        checkpoints: all.slice(start, end),
        next_cursor: end < all.length ? String(end) : null
      };
    });
  }

  getCheckpoint(runtimeId: string, reference: string): Promise<ICheckpointDetail> {
    return this._answer(`GET checkpoint ${runtimeId}/${reference}`, () => ({
      checkpoint: this._checkpoint(reference),
      context_manifest_id: null
    }));
  }

  lineage(runtimeId: string): Promise<IRuntimeLineage> {
    return this._answer(`GET lineage ${runtimeId}`, () => this._lineage(runtimeId));
  }

  /** Answer with the state as it is now (a copy), at once or when released. */
  private _answer<T>(label: string, read: () => T): Promise<T> {
    this.requests.push(label);
    let outcome: { value: T } | { error: Error };
    try {
      outcome = { value: structuredClone(read()) };
    } catch (error) {
      outcome = { error: error instanceof Error ? error : new Error(String(error)) };
    }
    return new Promise<T>((resolve, reject) => {
      const deliver = (): void =>
        'value' in outcome ? resolve(outcome.value) : reject(outcome.error);
      if (this._holding) {
        this._held.push({ label, deliver });
      } else {
        deliver();
      }
    });
  }

  private _record(runtimeId: string): IRuntimeRecord {
    const record = this._runtimes.get(runtimeId);
    if (!record) {
      throw new DittoApiError('RuntimeNotFound', `no runtime ${runtimeId}`, 404);
    }
    return record;
  }

  private _touch(runtimeId: string): IRuntimeRecord {
    const record = this._record(runtimeId);
    this._clock += 1;
    record.updated_at_ms = this._clock;
    return record;
  }

  private _lineage(runtimeId: string): IRuntimeLineage {
    this._record(runtimeId);
    const lineage = this._lineages.get(runtimeId);
    if (!lineage) {
      throw new DittoApiError('RuntimeNotFound', `no runtime ${runtimeId}`, 404);
    }
    return lineage;
  }

  private _checkpoint(checkpointId: string): ICheckpointSummary {
    const summary = this._checkpoints.get(checkpointId);
    if (!summary) {
      throw new DittoApiError('CheckpointNotFound', `no checkpoint ${checkpointId}`, 404);
    }
    return summary;
  }

  private _holding = false;
  private _held: IHeldAnswer[] = [];
  private _clock = 1_000;
  private _runtimes = new Map<string, IRuntimeRecord>();
  private _checkpoints = new Map<string, ICheckpointSummary>();
  private _lineages = new Map<string, IRuntimeLineage>();
}

/** Let every answer delivered so far land: a macrotask runs after all pending promise jobs. */
export function settle(): Promise<void> {
  return new Promise(resolve => setTimeout(resolve, 0));
}
