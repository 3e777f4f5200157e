/**
 * What the panel knows of the server: the runtimes, the loaded pages of each opened
 * runtime's checkpoint tree, and the runtimes' lineage (head, checkout origin, checkouts).
 *
 * Each piece is read with one small request (a runtime, a checkpoint, a lineage, a page of
 * checkpoints), never by polling, and the panel asks for only what it shows. Answers can
 * come back in any order; an answer older than the one already held is dropped
 * (`Freshness`), so a slow answer never puts back a state the server has left.
 */

import { ISignal, Signal } from '@lumino/signaling';

import { errorText } from '../api';
import type { RuntimeApi } from '../api';
import { ICheckpointSummary, IFanOutMember, IRuntimeLineage, IRuntimeRecord } from '../apiTypes';
import { Freshness } from './freshness';

/** The calls the cache reads the server with (the GET routes of `RuntimeApi`). */
export type RuntimeReader = Pick<
  RuntimeApi,
  'listRuntimes' | 'getRuntime' | 'listCheckpoints' | 'getCheckpoint' | 'lineage'
>;

/** The loaded part of one runtime's checkpoint tree. */
export interface IRuntimeTree {
  checkpoints: Map<string, ICheckpointSummary>;
  /** Where the next page starts; null when every checkpoint is loaded. */
  nextCursor: string | null;
  loading: boolean;
  error: string | null;
  /** Counts the changes of `checkpoints`, so their layout is computed once per change. */
  revision: number;
}

/** Options of the cache. */
export interface IServerCacheOptions {
  /** Checkpoints asked for per page. */
  pageSize?: number;
}

const recordKey = (runtimeId: string): string => `record:${runtimeId}`;
const lineageKey = (runtimeId: string): string => `lineage:${runtimeId}`;
const checkpointKey = (checkpointId: string): string => `checkpoint:${checkpointId}`;

/** The server's runtimes, checkpoint pages and lineages, as far as the panel loaded them. */
export class ServerCache {
  constructor(
    readonly api: RuntimeReader,
    options: IServerCacheOptions = {}
  ) {
    this.pageSize = options.pageSize ?? 200;
  }

  /** Checkpoints asked for per page. */
  pageSize: number;

  /** Emitted after any change. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** The last error of listing the runtimes, if it failed. */
  get error(): string | null {
    return this._error;
  }

  /** Whether the runtime list has been loaded once. */
  get loaded(): boolean {
    return this._loaded;
  }

  /** Every runtime record held, in no particular order. */
  records(): IRuntimeRecord[] {
    return [...this._runtimes.values()];
  }

  /** The server's record of a runtime, as last read. */
  record(runtimeId: string): IRuntimeRecord | undefined {
    return this._runtimes.get(runtimeId);
  }

  lineage(runtimeId: string): IRuntimeLineage | undefined {
    return this._lineages.get(runtimeId);
  }

  tree(runtimeId: string): IRuntimeTree | undefined {
    return this._trees.get(runtimeId);
  }

  /** A loaded checkpoint, from any tree or lineage. */
  checkpoint(checkpointId: string): ICheckpointSummary | undefined {
    for (const tree of this._trees.values()) {
      const found = tree.checkpoints.get(checkpointId);
      if (found) {
        return found;
      }
    }
    for (const lineage of this._lineages.values()) {
      if (lineage.head?.checkpoint_id === checkpointId) {
        return lineage.head;
      }
    }
    return undefined;
  }

  /** The checkouts made from one checkpoint of a runtime. */
  checkoutsOf(runtimeId: string, checkpointId: string): IRuntimeLineage['checkouts'] {
    const lineage = this._lineages.get(runtimeId);
    return lineage ? lineage.checkouts.filter(c => c.checkpoint_id === checkpointId) : [];
  }

  /** Reload the runtime list (and the lineage of every runtime whose lineage is held). */
  async refresh(): Promise<void> {
    const ticket = this._fresh.ticket();
    try {
      const { runtimes } = await this.api.listRuntimes();
      const listed = new Map(runtimes.map(r => [r.runtime_id, r]));
      for (const runtimeId of [...this._runtimes.keys()]) {
        if (!listed.has(runtimeId) && this._fresh.accept(recordKey(runtimeId), ticket)) {
          this._runtimes.delete(runtimeId);
        }
      }
      for (const [runtimeId, record] of listed) {
        if (this._fresh.accept(recordKey(runtimeId), ticket)) {
          this._runtimes.set(runtimeId, record);
        }
      }
      this._error = null;
    } catch (error) {
      this._error = errorText(error);
    }
    this._loaded = true;
    this._emit();
    await Promise.all(
      [...this._lineages.keys()]
        .filter(id => this._runtimes.has(id))
        .map(id => this.loadLineage(id))
    );
  }

  /** Re-read one runtime's record (new, or its status changed). */
  async refreshRuntime(runtimeId: string): Promise<void> {
    const ticket = this._fresh.ticket();
    let record: IRuntimeRecord | null;
    try {
      record = await this.api.getRuntime(runtimeId);
    } catch {
      record = null; // the server does not know it (any more): it leaves the list
    }
    if (!this._fresh.accept(recordKey(runtimeId), ticket)) {
      return; // a later request's answer is already held
    }
    if (record === null) {
      this._runtimes.delete(runtimeId);
    } else {
      this._runtimes.set(runtimeId, record);
      for (const lineage of this._lineages.values()) {
        for (const branch of lineage.checkouts) {
          if (branch.runtime_id === runtimeId) {
            branch.status = record.status;
          }
        }
      }
    }
    this._emit();
  }

  /** Load (or reload) a runtime's newest page of checkpoints and its lineage. */
  async loadTree(runtimeId: string): Promise<void> {
    const tree: IRuntimeTree = this._trees.get(runtimeId) ?? {
      checkpoints: new Map(),
      nextCursor: null,
      loading: false,
      error: null,
      revision: 0
    };
    this._trees.set(runtimeId, tree);
    tree.loading = true;
    this._emit();
    const ticket = this._fresh.ticket();
    try {
      const [page] = await Promise.all([
        this.api.listCheckpoints(runtimeId, { limit: this.pageSize }),
        this.loadLineage(runtimeId)
      ]);
      this._putCheckpoints(tree, page.checkpoints, ticket);
      tree.nextCursor = page.next_cursor ?? null;
      tree.error = null;
    } catch (error) {
      tree.error = errorText(error);
    }
    tree.loading = false;
    this._emit();
  }

  /** Load the next page of a runtime's checkpoints, when there is one. */
  async loadMore(runtimeId: string): Promise<void> {
    const tree = this._trees.get(runtimeId);
    if (!tree || tree.loading || tree.nextCursor === null) {
      return;
    }
    tree.loading = true;
    this._emit();
    const ticket = this._fresh.ticket();
    try {
      const page = await this.api.listCheckpoints(runtimeId, {
        limit: this.pageSize,
        cursor: tree.nextCursor
      });
      this._putCheckpoints(tree, page.checkpoints, ticket);
      tree.nextCursor = page.next_cursor ?? null;
    } catch (error) {
      tree.error = errorText(error);
    }
    tree.loading = false;
    this._emit();
  }

  /** Load a runtime's head, origin and checkouts (the toolbar needs only this). */
  loadLineage(runtimeId: string): Promise<void> {
    const inFlight = this._lineageRequests.get(runtimeId);
    if (inFlight) {
      return inFlight;
    }
    const request = this._fetchLineage(runtimeId).finally(() => {
      this._lineageRequests.delete(runtimeId);
      this._emit();
    });
    this._lineageRequests.set(runtimeId, request);
    return request;
  }

  /** Load the lineage of a runtime unless it is loaded or loading. */
  ensureLineage(runtimeId: string): void {
    if (!this._lineages.has(runtimeId) && !this._lineageRequests.has(runtimeId)) {
      void this.loadLineage(runtimeId);
    }
  }

  /**
   * A checkpoint was taken (or changed): fetch it alone and put it in the runtime's
   * tree; `head` makes it the runtime's head. Nothing is fetched for a runtime of which
   * neither tree nor lineage is held: opening it loads it.
   */
  async noteCheckpoint(runtimeId: string, checkpointId: string, head: boolean): Promise<void> {
    if (!this._trees.has(runtimeId) && !this._lineages.has(runtimeId)) {
      return;
    }
    const ticket = this._fresh.ticket();
    let summary: ICheckpointSummary;
    try {
      summary = (await this.api.getCheckpoint(runtimeId, checkpointId)).checkpoint;
    } catch {
      return; // gone meanwhile (deleted with its runtime): the next listing shows it
    }
    const fresh = this._fresh.accept(checkpointKey(checkpointId), ticket);
    const tree = this._trees.get(runtimeId);
    if (tree && fresh) {
      tree.checkpoints.set(checkpointId, summary);
      tree.revision += 1;
    }
    const lineage = this._lineages.get(runtimeId);
    if (lineage) {
      const becomesHead = head && this._fresh.accept(lineageKey(runtimeId), ticket);
      if (becomesHead || (fresh && lineage.head?.checkpoint_id === checkpointId)) {
        this._lineages.set(runtimeId, { ...lineage, head: summary });
      }
    }
    this._emit();
  }

  /** A restore made a checkpoint the head. */
  async noteHead(runtimeId: string, checkpointId: string): Promise<void> {
    const lineage = this._lineages.get(runtimeId);
    if (!lineage) {
      return;
    }
    const known = this._trees.get(runtimeId)?.checkpoints.get(checkpointId);
    if (!known) {
      await this._fetchLineage(runtimeId); // its own request, sent after the restore
      this._emit();
    } else if (this._fresh.accept(lineageKey(runtimeId), this._fresh.ticket())) {
      this._lineages.set(runtimeId, { ...lineage, head: known });
      this._emit();
    }
  }

  /**
   * A runtime was checked out from a checkpoint of `sourceId` (`fanout`: the child's place
   * in a fan-out of 2 or more, from the event; else the child's record says).
   */
  noteCheckout(
    sourceId: string,
    childId: string,
    checkpointId: string,
    fanout: IFanOutMember | null = null
  ): void {
    const child = this._runtimes.get(childId);
    const lineage = this._lineages.get(sourceId);
    if (!lineage || lineage.checkouts.some(c => c.runtime_id === childId)) {
      return;
    }
    this._fresh.accept(lineageKey(sourceId), this._fresh.ticket());
    this._lineages.set(sourceId, {
      ...lineage,
      checkouts: [
        ...lineage.checkouts,
        {
          runtime_id: childId,
          checkpoint_id: checkpointId,
          conversation_id: child?.conversation_id ?? childId,
          status: child?.status ?? 'idle',
          fanout: fanout ?? child?.fanout ?? null
        }
      ]
    });
    this._emit();
  }

  /** Read a runtime's lineage and keep it unless a later answer is held. */
  private async _fetchLineage(runtimeId: string): Promise<void> {
    const ticket = this._fresh.ticket();
    let lineage: IRuntimeLineage;
    try {
      lineage = await this.api.lineage(runtimeId);
    } catch {
      return; // an unknown runtime has no lineage; the runtime list says why
    }
    if (this._fresh.accept(lineageKey(runtimeId), ticket)) {
      this._lineages.set(runtimeId, lineage);
    }
  }

  /** Put a page's checkpoints in a tree, each unless a later answer about it is held. */
  private _putCheckpoints(
    tree: IRuntimeTree,
    checkpoints: ICheckpointSummary[],
    ticket: number
  ): void {
    for (const checkpoint of checkpoints) {
      if (this._fresh.accept(checkpointKey(checkpoint.checkpoint_id), ticket)) {
        tree.checkpoints.set(checkpoint.checkpoint_id, checkpoint);
      }
    }
    tree.revision += 1;
  }

  private _emit(): void {
    this._changed.emit(undefined);
  }

  private _changed = new Signal<this, void>(this);
  private _fresh = new Freshness();
  private _runtimes = new Map<string, IRuntimeRecord>();
  private _trees = new Map<string, IRuntimeTree>();
  private _lineages = new Map<string, IRuntimeLineage>();
  private _lineageRequests = new Map<string, Promise<void>>();
  private _error: string | null = null;
  private _loaded = false;
}
