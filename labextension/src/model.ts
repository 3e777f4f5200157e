/**
 * What the panel shows, kept in step with the server without polling.
 *
 * The model holds the runtimes, the checkpoint trees of the runtimes the user opened
 * (loaded a page at a time), their lineage (head, checkout origin, checkouts), the
 * selection and the operations in flight. Runtime events from `/api/events/subscribe`
 * update it with one small request each (the new checkpoint, the changed runtime), never
 * by reloading a listing, so a `%checkpoint` typed in any tab shows up within a second.
 */

import { ISignal, Signal } from '@lumino/signaling';

import { RuntimeApi, errorText } from './api';
import { ICheckpointSummary, IRuntimeEvent, IRuntimeLineage, IRuntimeRecord } from './models';
import { ITreeLayout, layoutTree } from './tree/layout';

/** The loaded part of one runtime's checkpoint tree. */
export interface IRuntimeTree {
  checkpoints: Map<string, ICheckpointSummary>;
  /** Where the next page starts; null when every checkpoint is loaded. */
  nextCursor: string | null;
  loading: boolean;
  error: string | null;
}

/** A checkpoint picked in a tree. */
export interface ISelection {
  runtimeId: string;
  checkpointId: string;
}

/** Options of the model. */
export interface IModelOptions {
  /** Checkpoints asked for per page. */
  pageSize?: number;
}

/** The state of the Runtimes panel and the notebook toolbars. */
export class RuntimesModel {
  constructor(
    readonly api: RuntimeApi,
    options: IModelOptions = {}
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

  /** The runtime pinned on top: the one of the notebook in focus. */
  get pinnedId(): string | null {
    return this._pinnedId;
  }

  get selection(): ISelection | null {
    return this._selection;
  }

  /**
   * What a context menu was opened on (a runtime, and a checkpoint of it): the commands
   * act on it while the menu runs them. Cleared when the menu closes.
   */
  get menuTarget(): { runtimeId: string; checkpointId: string | null } | null {
    return this._menuTarget;
  }

  setMenuTarget(target: { runtimeId: string; checkpointId: string | null } | null): void {
    this._menuTarget = target;
  }

  /** The runtimes: the pinned one first, the others by last change, newest first. */
  runtimes(): IRuntimeRecord[] {
    const all = [...this._runtimes.values()].map(r => this._live(r));
    all.sort((a, b) => {
      if (a.runtime_id === this._pinnedId) {
        return -1;
      }
      if (b.runtime_id === this._pinnedId) {
        return 1;
      }
      return b.updated_at_ms - a.updated_at_ms || (a.runtime_id < b.runtime_id ? -1 : 1);
    });
    return all;
  }

  runtime(runtimeId: string): IRuntimeRecord | undefined {
    const record = this._runtimes.get(runtimeId);
    return record ? this._live(record) : undefined;
  }

  /**
   * What JupyterLab sees of a runtime's kernel, from an open notebook (null: nothing
   * open). Busy and idle change with every cell; the server's record is a snapshot, so a
   * live runtime shows this instead.
   */
  setKernelStatus(runtimeId: string, status: 'idle' | 'busy' | null): void {
    if ((this._kernelStatus.get(runtimeId) ?? null) === status) {
      return;
    }
    if (status === null) {
      this._kernelStatus.delete(runtimeId);
    } else {
      this._kernelStatus.set(runtimeId, status);
    }
    if (this._runtimes.has(runtimeId)) {
      this._emit();
    }
  }

  private _live(record: IRuntimeRecord): IRuntimeRecord {
    const status = this._kernelStatus.get(record.runtime_id);
    if (!status || status === record.status) {
      return record;
    }
    if (record.status !== 'idle' && record.status !== 'busy') {
      return record; // paused and closed are the server's word
    }
    return { ...record, status };
  }

  /** The runtime of a notebook path: a live one first, else the newest paused one. */
  runtimeForPath(path: string): IRuntimeRecord | undefined {
    const matches = [...this._runtimes.values()]
      .filter(r => r.conversation_id === path)
      .map(r => this._live(r));
    const rank = (r: IRuntimeRecord): number =>
      r.status === 'closed' ? 0 : r.status === 'paused' ? 1 : 2;
    matches.sort((a, b) => rank(b) - rank(a) || b.updated_at_ms - a.updated_at_ms);
    return matches[0];
  }

  lineage(runtimeId: string): IRuntimeLineage | undefined {
    return this._lineages.get(runtimeId);
  }

  tree(runtimeId: string): IRuntimeTree | undefined {
    return this._trees.get(runtimeId);
  }

  isExpanded(runtimeId: string): boolean {
    return this._expanded.has(runtimeId);
  }

  /** The label of the operation running on a runtime, if one is. */
  pending(runtimeId: string): string | undefined {
    return this._pending.get(runtimeId);
  }

  /** The layout of a runtime's loaded checkpoints (computed once per change). */
  layout(runtimeId: string): ITreeLayout {
    const cached = this._layouts.get(runtimeId);
    if (cached) {
      return cached;
    }
    const tree = this._trees.get(runtimeId);
    const nodes = tree
      ? [...tree.checkpoints.values()].map(c => ({
          id: c.checkpoint_id,
          parent: c.parent_checkpoint_id,
          time: c.created_at_ms
        }))
      : [];
    const layout = layoutTree(nodes);
    this._layouts.set(runtimeId, layout);
    return layout;
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

  /** Whether the panel has been shown: only then is the whole runtime list loaded. */
  get active(): boolean {
    return this._active;
  }

  /**
   * The panel is shown for the first time: load the runtime list. Until then the model
   * holds only what the notebook toolbars ask for (their own runtimes), so a JupyterLab
   * whose panel stays closed never lists every runtime.
   */
  activate(): Promise<void> {
    if (!this._active) {
      this._active = true;
      this._activation = this.refresh();
    }
    return this._activation;
  }

  /** Reload the runtime list (and the lineage of every opened runtime). */
  async refresh(): Promise<void> {
    try {
      const { runtimes } = await this.api.listRuntimes();
      this._runtimes = new Map(runtimes.map(r => [r.runtime_id, r]));
      this._error = null;
    } catch (error) {
      this._error = errorText(error);
    }
    this._loaded = true;
    this._repin();
    this._emit();
    await Promise.all(
      [...this._lineages.keys()]
        .filter(id => this._runtimes.has(id))
        .map(id => this.loadLineage(id))
    );
  }

  /**
   * Pin the runtime of the notebook in focus (its session id), or find it by the
   * notebook's path when the notebook has no session (a paused runtime). The pinned
   * runtime's tree opens by itself the first time.
   */
  setFocus(runtimeId: string | null, path: string | null): void {
    this._focusId = runtimeId;
    this._focusPath = path;
    if (this._repin()) {
      this._emit();
    }
  }

  /** Open or close a runtime's tree (opening loads its first page and lineage). */
  toggle(runtimeId: string): void {
    if (this._expanded.has(runtimeId)) {
      this._expanded.delete(runtimeId);
      this._emit();
    } else {
      void this.expand(runtimeId);
    }
  }

  async expand(runtimeId: string): Promise<void> {
    this._expanded.add(runtimeId);
    this._emit();
    if (!this._trees.has(runtimeId)) {
      await this.loadTree(runtimeId);
    }
  }

  select(selection: ISelection | null): void {
    const same =
      selection?.runtimeId === this._selection?.runtimeId &&
      selection?.checkpointId === this._selection?.checkpointId;
    if (!same) {
      this._selection = selection;
      this._emit();
    }
  }

  /** Load (or reload) a runtime's newest page of checkpoints and its lineage. */
  async loadTree(runtimeId: string): Promise<void> {
    const tree: IRuntimeTree = this._trees.get(runtimeId) ?? {
      checkpoints: new Map(),
      nextCursor: null,
      loading: false,
      error: null
    };
    this._trees.set(runtimeId, tree);
    tree.loading = true;
    this._emit();
    try {
      const [page] = await Promise.all([
        this.api.listCheckpoints(runtimeId, { limit: this.pageSize }),
        this.loadLineage(runtimeId)
      ]);
      for (const checkpoint of page.checkpoints) {
        tree.checkpoints.set(checkpoint.checkpoint_id, checkpoint);
      }
      tree.nextCursor = page.next_cursor ?? null;
      tree.error = null;
    } catch (error) {
      tree.error = errorText(error);
    }
    tree.loading = false;
    this._layouts.delete(runtimeId);
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
    try {
      const page = await this.api.listCheckpoints(runtimeId, {
        limit: this.pageSize,
        cursor: tree.nextCursor
      });
      for (const checkpoint of page.checkpoints) {
        tree.checkpoints.set(checkpoint.checkpoint_id, checkpoint);
      }
      tree.nextCursor = page.next_cursor ?? null;
    } catch (error) {
      tree.error = errorText(error);
    }
    tree.loading = false;
    this._layouts.delete(runtimeId);
    this._emit();
  }

  /** Load a runtime's head, origin and checkouts (the toolbar needs only this). */
  async loadLineage(runtimeId: string): Promise<void> {
    const inFlight = this._lineageRequests.get(runtimeId);
    if (inFlight) {
      return inFlight;
    }
    const request = (async () => {
      try {
        this._lineages.set(runtimeId, await this.api.lineage(runtimeId));
      } catch {
        // An unknown runtime has no lineage; the runtime list says why.
      }
      this._lineageRequests.delete(runtimeId);
      this._emit();
    })();
    this._lineageRequests.set(runtimeId, request);
    return request;
  }

  /** Load the lineage of a runtime unless it is loaded or loading. */
  ensureLineage(runtimeId: string): void {
    if (!this._lineages.has(runtimeId) && !this._lineageRequests.has(runtimeId)) {
      void this.loadLineage(runtimeId);
    }
  }

  /** Mark an operation in flight on a runtime (null when it ended). */
  setPending(runtimeId: string, label: string | null): void {
    if (label === null) {
      this._pending.delete(runtimeId);
    } else {
      this._pending.set(runtimeId, label);
    }
    this._emit();
  }

  /** Apply one runtime event: a small request for what it changed, nothing more. */
  async handleEvent(event: IRuntimeEvent): Promise<void> {
    if (!event.ok) {
      return; // a failed operation left the store as it was
    }
    const runtimeId = event.runtime_id;
    const checkpointId = event.checkpoint_id ?? null;
    switch (event.action) {
      case 'checkpoint':
      case 'pause':
        await Promise.all([
          this.refreshRuntime(runtimeId),
          checkpointId ? this.noteCheckpoint(runtimeId, checkpointId, true) : null
        ]);
        break;
      case 'restore':
        await this.refreshRuntime(runtimeId);
        if (checkpointId) {
          await this.noteHead(runtimeId, checkpointId);
        }
        break;
      case 'checkout':
        await this.refreshRuntime(runtimeId);
        if (event.source_runtime_id && checkpointId) {
          this.noteCheckout(event.source_runtime_id, runtimeId, checkpointId);
        }
        break;
      case 'delete-snapshot':
        if (checkpointId && this.checkpoint(checkpointId)) {
          await this.noteCheckpoint(runtimeId, checkpointId, false);
        }
        break;
      default:
        await this.refreshRuntime(runtimeId);
    }
  }

  /** Re-read one runtime's record (new, or its status changed). */
  async refreshRuntime(runtimeId: string): Promise<void> {
    try {
      const record = await this.api.getRuntime(runtimeId);
      this._runtimes.set(runtimeId, record);
      for (const lineage of this._lineages.values()) {
        for (const branch of lineage.checkouts) {
          if (branch.runtime_id === runtimeId) {
            branch.status = record.status;
          }
        }
      }
    } catch {
      this._runtimes.delete(runtimeId);
    }
    this._repin();
    this._emit();
  }

  /**
   * A checkpoint was taken (or changed): fetch it alone and put it in the runtime's
   * tree; `head` makes it the runtime's head.
   */
  async noteCheckpoint(runtimeId: string, checkpointId: string, head: boolean): Promise<void> {
    const tree = this._trees.get(runtimeId);
    const lineage = this._lineages.get(runtimeId);
    if (!tree && !lineage) {
      return; // nothing of this runtime is shown; opening it will load it
    }
    let summary: ICheckpointSummary;
    try {
      summary = (await this.api.getCheckpoint(runtimeId, checkpointId)).checkpoint;
    } catch {
      return;
    }
    if (tree) {
      tree.checkpoints.set(checkpointId, summary);
      this._layouts.delete(runtimeId);
    }
    const current = this._lineages.get(runtimeId);
    if (current && (head || current.head?.checkpoint_id === checkpointId)) {
      this._lineages.set(runtimeId, { ...current, head: summary });
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
    if (known) {
      this._lineages.set(runtimeId, { ...lineage, head: known });
      this._emit();
    } else {
      await this.loadLineage(runtimeId);
    }
  }

  /** A runtime was checked out from a checkpoint of `sourceId`. */
  noteCheckout(sourceId: string, childId: string, checkpointId: string): void {
    const child = this._runtimes.get(childId);
    const lineage = this._lineages.get(sourceId);
    if (lineage && !lineage.checkouts.some(c => c.runtime_id === childId)) {
      lineage.checkouts = [
        ...lineage.checkouts,
        {
          runtime_id: childId,
          checkpoint_id: checkpointId,
          conversation_id: child?.conversation_id ?? childId,
          status: child?.status ?? 'idle'
        }
      ];
      this._emit();
    }
  }

  /** Pin the focused runtime; true when the pin changed. */
  private _repin(): boolean {
    let pinned: string | null = null;
    if (this._focusId && this._runtimes.has(this._focusId)) {
      pinned = this._focusId;
    } else if (this._focusPath) {
      pinned = this.runtimeForPath(this._focusPath)?.runtime_id ?? null;
    }
    const changed = pinned !== this._pinnedId;
    this._pinnedId = pinned;
    if (this._active && pinned !== null && !this._autoExpanded.has(pinned)) {
      this._autoExpanded.add(pinned);
      void this.expand(pinned);
    }
    return changed;
  }

  private _emit(): void {
    this._changed.emit(undefined);
  }

  private _changed = new Signal<this, void>(this);
  private _runtimes = new Map<string, IRuntimeRecord>();
  private _trees = new Map<string, IRuntimeTree>();
  private _layouts = new Map<string, ITreeLayout>();
  private _lineages = new Map<string, IRuntimeLineage>();
  private _lineageRequests = new Map<string, Promise<void>>();
  private _expanded = new Set<string>();
  private _autoExpanded = new Set<string>();
  private _pending = new Map<string, string>();
  private _kernelStatus = new Map<string, 'idle' | 'busy'>();
  private _selection: ISelection | null = null;
  private _menuTarget: { runtimeId: string; checkpointId: string | null } | null = null;
  private _pinnedId: string | null = null;
  private _focusId: string | null = null;
  private _focusPath: string | null = null;
  private _error: string | null = null;
  private _loaded = false;
  private _active = false;
  private _activation: Promise<void> = Promise.resolve();
}
