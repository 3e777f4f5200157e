/**
 * The view state of the Runtimes panel and the notebook toolbars, over the server cache.
 *
 * What the user sees beyond the server's records: which runtime is pinned on top (the one
 * of the notebook in focus), which trees are open, the selection, the context menu's
 * target, the operations in flight, and the busy or idle that JupyterLab sees of a live
 * runtime's kernel, the checkpoints picked for Compare, and what a restore left to say about
 * the notebook's cells. Until the panel is first shown, only what the toolbars ask for (their
 * own runtimes) is loaded, so a JupyterLab whose panel stays closed never lists every
 * runtime.
 */

import { ISignal, Signal } from '@lumino/signaling';

import { IRuntimeRecord } from '../apiTypes';
import { MAX_COMPARE_SIDES } from '../branches/branchTypes';
import { ITreeLayout, layoutTree } from '../tree/layout';
import { CheckpointInfo } from './checkpointInfo';
import { ServerCache } from './serverCache';

/** A checkpoint picked in a tree. */
export interface ISelection {
  runtimeId: string;
  checkpointId: string;
}

/**
 * What the panel says after a restore in place whose checkpoint's cells differ from the
 * open notebook's: how many, with the actions "show the changes" and "bring the cells back".
 */
export interface IRestoreNotice {
  checkpointId: string;
  cellsChanged: number;
  /** The server's note on how the cells were compared (`cells_note`), if any. */
  cellsNote?: string | null;
}

/** The checkpoints picked for Compare: at most eight, of one runtime, in the order picked. */
export interface IComparePicks {
  runtimeId: string;
  checkpointIds: string[];
}

/** What a context menu was opened on: a runtime, and a checkpoint of it. */
export interface IMenuTarget {
  runtimeId: string;
  checkpointId: string | null;
}

/** The state of the Runtimes panel and the notebook toolbars. */
export class PanelState {
  constructor(
    readonly cache: ServerCache,
    readonly info: CheckpointInfo
  ) {
    cache.changed.connect(() => this._onCacheChanged());
    info.changed.connect(() => this._emit());
  }

  /** Emitted after any change, of the view or of the cache below it. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** The runtime pinned on top: the one of the notebook in focus. */
  get pinnedId(): string | null {
    return this._pinnedId;
  }

  get selection(): ISelection | null {
    return this._selection;
  }

  /** The context menu's target: the commands act on it while the menu runs them. */
  get menuTarget(): IMenuTarget | null {
    return this._menuTarget;
  }

  /** Set when a context menu opens, cleared when it closes. */
  setMenuTarget(target: IMenuTarget | null): void {
    this._menuTarget = target;
  }

  /** The runtimes: the pinned one first, the others by last change, newest first. */
  runtimes(): IRuntimeRecord[] {
    const all = this.cache.records().map(r => this._live(r));
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

  /** A runtime's record, with the kernel status JupyterLab sees when it is live. */
  runtime(runtimeId: string): IRuntimeRecord | undefined {
    const record = this.cache.record(runtimeId);
    return record ? this._live(record) : undefined;
  }

  /** The runtime of a notebook path: a live one first, else the newest paused one. */
  runtimeForPath(path: string): IRuntimeRecord | undefined {
    const matches = this.cache
      .records()
      .filter(r => r.conversation_id === path)
      .map(r => this._live(r));
    const rank = (r: IRuntimeRecord): number =>
      r.status === 'closed' ? 0 : r.status === 'paused' ? 1 : 2;
    matches.sort((a, b) => rank(b) - rank(a) || b.updated_at_ms - a.updated_at_ms);
    return matches[0];
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
    if (this.cache.record(runtimeId)) {
      this._emit();
    }
  }

  isExpanded(runtimeId: string): boolean {
    return this._expanded.has(runtimeId);
  }

  /** The label of the operation running on a runtime, if one is. */
  pending(runtimeId: string): string | undefined {
    return this._pending.get(runtimeId);
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

  /** The checkpoints picked for Compare (none: null). */
  get picks(): IComparePicks | null {
    return this._picks;
  }

  /** Whether a checkpoint is picked for Compare: its place (1 to 8), else 0. */
  pickIndex(runtimeId: string, checkpointId: string): number {
    if (this._picks?.runtimeId !== runtimeId) {
      return 0;
    }
    return this._picks.checkpointIds.indexOf(checkpointId) + 1;
  }

  /**
   * Pick a checkpoint for Compare, or unpick it. A pick in another runtime starts over;
   * a pick beyond MAX_COMPARE_SIDES replaces the oldest.
   */
  togglePick(runtimeId: string, checkpointId: string): void {
    const current = this._picks?.runtimeId === runtimeId ? this._picks.checkpointIds : [];
    let next: string[];
    if (current.includes(checkpointId)) {
      next = current.filter(id => id !== checkpointId);
    } else {
      next = [...current, checkpointId].slice(-MAX_COMPARE_SIDES);
    }
    this._picks = next.length > 0 ? { runtimeId, checkpointIds: next } : null;
    this._emit();
  }

  /**
   * A Ctrl+click on a row: pick it for Compare. When nothing of the runtime is picked yet,
   * the row a plain click selected before is picked first, so a click then a Ctrl+click
   * picks both.
   */
  ctrlPick(runtimeId: string, checkpointId: string): void {
    const selected = this._selection;
    if (
      this._picks?.runtimeId !== runtimeId &&
      selected?.runtimeId === runtimeId &&
      selected.checkpointId !== checkpointId
    ) {
      this._picks = { runtimeId, checkpointIds: [selected.checkpointId] };
    }
    this.togglePick(runtimeId, checkpointId);
  }

  clearPicks(): void {
    if (this._picks !== null) {
      this._picks = null;
      this._emit();
    }
  }

  /** What the last restore of a runtime left to say about its notebook's cells. */
  restoreNotice(runtimeId: string): IRestoreNotice | undefined {
    return this._notices.get(runtimeId);
  }

  setRestoreNotice(runtimeId: string, notice: IRestoreNotice | null): void {
    if (notice === null) {
      if (!this._notices.delete(runtimeId)) {
        return;
      }
    } else {
      this._notices.set(runtimeId, notice);
    }
    this._emit();
  }

  /** The layout of a runtime's loaded checkpoints (computed once per change of them). */
  layout(runtimeId: string): ITreeLayout {
    const tree = this.cache.tree(runtimeId);
    const revision = tree?.revision ?? -1;
    const cached = this._layouts.get(runtimeId);
    if (cached && cached.revision === revision) {
      return cached.layout;
    }
    const nodes = tree
      ? [...tree.checkpoints.values()].map(c => ({
          id: c.checkpoint_id,
          parent: c.parent_checkpoint_id,
          time: c.created_at_ms
        }))
      : [];
    const layout = layoutTree(nodes);
    this._layouts.set(runtimeId, { revision, layout });
    return layout;
  }

  /** Whether a fan-out group's children are shown in the tree. */
  isGroupExpanded(fanoutId: string): boolean {
    return this._groups.has(fanoutId);
  }

  /** Show or hide a fan-out group's children. */
  toggleGroup(fanoutId: string): void {
    if (!this._groups.delete(fanoutId)) {
      this._groups.add(fanoutId);
    }
    this._emit();
  }

  /** Whether the panel has been shown: only then is the whole runtime list loaded. */
  get active(): boolean {
    return this._active;
  }

  /** The panel is shown for the first time: load the runtime list. */
  activate(): Promise<void> {
    if (!this._active) {
      this._active = true;
      this._activation = this.cache.refresh();
    }
    return this._activation;
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
    if (!this.cache.tree(runtimeId)) {
      await this.cache.loadTree(runtimeId);
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

  /** The cache changed (a runtime may have come or gone): pin again, then tell the view. */
  private _onCacheChanged(): void {
    this._repin();
    this._emit();
  }

  /** Pin the focused runtime; true when the pin changed. */
  private _repin(): boolean {
    let pinned: string | null = null;
    if (this._focusId && this.cache.record(this._focusId)) {
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
  private _layouts = new Map<string, { revision: number; layout: ITreeLayout }>();
  private _expanded = new Set<string>();
  private _groups = new Set<string>();
  private _autoExpanded = new Set<string>();
  private _pending = new Map<string, string>();
  private _kernelStatus = new Map<string, 'idle' | 'busy'>();
  private _selection: ISelection | null = null;
  private _picks: IComparePicks | null = null;
  private _notices = new Map<string, IRestoreNotice>();
  private _menuTarget: IMenuTarget | null = null;
  private _pinnedId: string | null = null;
  private _focusId: string | null = null;
  private _focusPath: string | null = null;
  private _active = false;
  private _activation: Promise<void> = Promise.resolve();
}
