/**
 * The runtime operations as the user meets them: dialogs first (a name, a confirmation),
 * progress while they run, one-sentence notifications carrying the server's error code,
 * and the notebook side of the result (open the checkout's notebook, reattach a resumed
 * runtime's notebook to its new kernel). A checkpoint, a restore and a live comparison
 * carry the open notebook's document (unsaved edits included); the cells themselves are
 * changed only by "bring the cells back" (cellActions.ts).
 */

import { Dialog, InputDialog, Notification, showDialog } from '@jupyterlab/apputils';
import { IDocumentManager } from '@jupyterlab/docmanager';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { Session } from '@jupyterlab/services';
import { TranslationBundle } from '@jupyterlab/translation';

import { DittoApiError, RuntimeApi, errorText } from './api';
import { INotebookDocument, IUnrestorableValue, LIVE } from './apiTypes';
import { CompareTab } from './compare/compareTab';
import { errorNotice } from './errorNotice';
import { checkpointLabel, shortId } from './format';
import { runtimeDocument } from './notebookDocuments';
import { reattachNotebook } from './reattach';
import { PanelState } from './state/panelState';

/** Retries of an operation refused as busy while JupyterLab sees the kernel idle. */
const BUSY_RETRIES = 3;

/** The first wait before such a retry, in ms (doubled each time). */
const BUSY_RETRY_MS = 250;

/** An operation that answers sooner shows no pending notification, only its outcome. */
const PENDING_NOTICE_MS = 300;

/** Which operations ask first (the settings schema's confirmations). */
export interface IConfirmations {
  confirmRestore: boolean;
  confirmClose: boolean;
  confirmDeleteSnapshot: boolean;
}

/** What the actions need from the application. */
export interface IActionsOptions {
  api: RuntimeApi;
  state: PanelState;
  trans: TranslationBundle;
  docManager: IDocumentManager | null;
  notebooks: INotebookTracker | null;
  sessions: Session.IManager;
  confirmations: () => IConfirmations;
  compareTab: CompareTab;
  /**
   * Called after a restore in place succeeded, with the server's count of the
   * checkpoint's cells that differ from the open notebook's (null: unknown).
   */
  afterRestore?: (
    runtimeId: string,
    checkpointId: string,
    cellsChanged: number | null,
    cellsNote: string | null
  ) => void;
}

/** Whether a request was refused for its size (a notebook document over the body limit). */
export function refusedForSize(error: unknown): boolean {
  return (
    error instanceof DittoApiError &&
    error.status === 400 &&
    /request body|too large|limit/i.test(error.message)
  );
}

/** Runs the operations of the panel, the toolbar and the palette. */
export class RuntimeActions {
  constructor(private options: IActionsOptions) {}

  private get api(): RuntimeApi {
    return this.options.api;
  }

  private get state(): PanelState {
    return this.options.state;
  }

  private get trans(): TranslationBundle {
    return this.options.trans;
  }

  /** Checkpoint a runtime, asking for an optional name. */
  async checkpoint(runtimeId: string): Promise<void> {
    const trans = this.trans;
    const answer = await InputDialog.getText({
      title: trans.__('Checkpoint'),
      label: trans.__('Name (optional)'),
      placeholder: trans.__('e.g. before-cleanup'),
      okLabel: trans.__('Checkpoint')
    });
    if (!answer.button.accept) {
      return;
    }
    const name = (answer.value ?? '').trim() || undefined;
    await this.run(runtimeId, trans.__('Checkpointing…'), async () => {
      // The notebook as the user sees it now, read after the name dialog closed.
      const document = this.document(runtimeId);
      let result;
      let note = '';
      try {
        result = await this.call(runtimeId, () => this.api.checkpoint(runtimeId, name, document));
      } catch (error) {
        if (!document || !refusedForSize(error)) {
          throw error;
        }
        // Too large to send: the server records the saved file instead.
        result = await this.call(runtimeId, () => this.api.checkpoint(runtimeId, name));
        note = ` ${trans.__('The notebook was too large to send (%1); the checkpoint holds its saved file.', errorText(error))}`;
      }
      await this.state.cache.noteCheckpoint(runtimeId, result.checkpoint_id, true);
      return trans.__('Checkpoint %1 taken.', name ?? shortId(result.checkpoint_id)) + note;
    });
  }

  /** Restore a checkpoint into the runtime's kernel, after confirming. */
  async restore(runtimeId: string, checkpointId: string): Promise<void> {
    const trans = this.trans;
    const label = this.label(checkpointId);
    if (this.options.confirmations().confirmRestore) {
      const confirmed = await this.confirm(
        trans.__('Restore checkpoint?'),
        trans.__(
          "The kernel's variables and the workspace files go back to those of %1. Files written since then are kept in a checkpoint named before-restore. The notebook's cells are not changed.",
          label
        ),
        trans.__('Restore')
      );
      if (!confirmed) {
        return;
      }
    }
    let cellsChanged: number | null = null;
    let cellsNote: string | null = null;
    const restored = await this.run(runtimeId, trans.__('Restoring %1…', label), async () => {
      const document = this.document(runtimeId);
      let result;
      try {
        result = await this.call(runtimeId, () =>
          this.api.restore(runtimeId, checkpointId, document)
        );
      } catch (error) {
        if (!document || !refusedForSize(error)) {
          throw error;
        }
        result = await this.call(runtimeId, () => this.api.restore(runtimeId, checkpointId));
      }
      await this.state.cache.noteHead(runtimeId, result.checkpoint_id);
      this.warnUnrestorable(result.unrestorable);
      cellsChanged = result.cells_changed ?? null;
      cellsNote = result.cells_note ?? null;
      return trans.__('Restored %1.', label);
    });
    if (restored) {
      this.state.setRestoreNotice(runtimeId, null);
      this.options.afterRestore?.(runtimeId, checkpointId, cellsChanged, cellsNote);
    }
  }

  /** Check out a checkpoint into a new runtime and open its notebook on the new kernel. */
  async checkout(checkpointId: string): Promise<void> {
    const trans = this.trans;
    const label = this.label(checkpointId);
    const sourceId = this.state.cache.checkpoint(checkpointId)?.runtime_id ?? null;
    await this.run(sourceId, trans.__('Checking out %1…', label), async () => {
      const result = await this.call(sourceId, () => this.api.checkout(checkpointId));
      const childId = result.runtime.runtime_id;
      await this.state.cache.refreshRuntime(childId);
      this.state.cache.noteCheckout(result.source_runtime_id, childId, checkpointId);
      this.warnUnrestorable(result.unrestorable ?? []);
      if (result.notebook_source === 'current_file') {
        // The checkpoint held no notebook: its child's is a copy of today's file.
        Notification.warning(
          result.notebook_note ||
            trans.__(
              '%1 holds no notebook document: the new notebook is a copy of the current file, whose cells may not be the ones its kernel ran.',
              label
            ),
          { autoClose: false }
        );
      }
      if (result.notebook_path && this.options.docManager) {
        this.options.docManager.openOrReveal(result.notebook_path);
        return trans.__('Checked out %1 into %2.', label, result.notebook_path);
      }
      return trans.__('Checked out %1 into runtime %2.', label, shortId(childId));
    });
  }

  /** Pause a runtime: its state is checkpointed and its kernel stops. */
  async pause(runtimeId: string): Promise<void> {
    const trans = this.trans;
    await this.run(runtimeId, trans.__('Pausing…'), async () => {
      const result = await this.call(runtimeId, () => this.api.pause(runtimeId));
      await this.state.cache.refreshRuntime(runtimeId);
      await this.state.cache.noteCheckpoint(runtimeId, result.checkpoint_id, true);
      return trans.__('Paused %1.', this.runtimeName(runtimeId));
    });
  }

  /** Resume a paused runtime and reattach its open notebooks to the new kernel. */
  async resume(runtimeId: string): Promise<void> {
    const trans = this.trans;
    await this.run(runtimeId, trans.__('Resuming…'), async () => {
      const result = await this.api.resume(runtimeId);
      await this.state.cache.refreshRuntime(runtimeId);
      this.warnUnrestorable(result.unrestorable ?? []);
      if (result.kernel_id) {
        await this.reattach(runtimeId, result.runtime.conversation_id, result.kernel_id);
      }
      return trans.__('Resumed %1.', this.runtimeName(runtimeId));
    });
  }

  /** Close a runtime for good (its checkpoints stay), after confirming. */
  async close(runtimeId: string): Promise<void> {
    const trans = this.trans;
    const name = this.runtimeName(runtimeId);
    if (this.options.confirmations().confirmClose) {
      const confirmed = await this.confirm(
        trans.__('Close runtime?'),
        trans.__(
          'The kernel of %1 stops and its workspace is released. Its checkpoints stay; check one out to continue from it.',
          name
        ),
        trans.__('Close')
      );
      if (!confirmed) {
        return;
      }
    }
    await this.run(runtimeId, trans.__('Closing…'), async () => {
      await this.api.close(runtimeId);
      await this.state.cache.refreshRuntime(runtimeId);
      return trans.__('Closed %1.', name);
    });
  }

  /** Delete a checkpoint's backend snapshot (the checkpoint stays), after confirming. */
  async deleteSnapshot(checkpointId: string): Promise<void> {
    const trans = this.trans;
    const label = this.label(checkpointId);
    const runtimeId = this.state.cache.checkpoint(checkpointId)?.runtime_id ?? null;
    if (this.options.confirmations().confirmDeleteSnapshot) {
      const confirmed = await this.confirm(
        trans.__('Delete snapshot?'),
        trans.__(
          'The workspace snapshot of %1 is deleted. The checkpoint keeps its variables, but checking it out no longer brings its files back.',
          label
        ),
        trans.__('Delete')
      );
      if (!confirmed) {
        return;
      }
    }
    await this.run(runtimeId, trans.__('Deleting snapshot…'), async () => {
      const result = await this.api.deleteSnapshot(checkpointId);
      if (runtimeId) {
        await this.state.cache.noteCheckpoint(runtimeId, checkpointId, false);
      }
      return result.already_deleted
        ? trans.__('The snapshot of %1 was already deleted.', label)
        : trans.__('Deleted the snapshot of %1.', label);
    });
  }

  /**
   * Compare two points of a runtime (checkpoint ids, or `LIVE` for the live kernel and
   * the open notebook) in the Compare tab.
   */
  async compare(runtimeId: string, from: string, to: string): Promise<void> {
    const trans = this.trans;
    const side = (reference: string): string =>
      reference === LIVE ? trans.__('live') : this.label(reference);
    const title = trans.__('%1 → %2', side(from), side(to));
    const tab = this.options.compareTab;
    tab.show({ status: 'loading', title });
    const live = from === LIVE || to === LIVE;
    try {
      const diff = await this.api.diff(runtimeId, from, to, live ? this.document(runtimeId) : null);
      tab.show({ status: 'loaded', title, diff });
    } catch (error) {
      tab.show({ status: 'failed', title, error: errorText(error) });
    }
  }

  /** Roll the runtime back to just before its last cell, and name that cell. */
  async undo(runtimeId: string): Promise<void> {
    const trans = this.trans;
    await this.run(runtimeId, trans.__('Undoing the last cell…'), async () => {
      const result = await this.call(runtimeId, () => this.api.undo(runtimeId));
      await this.state.cache.noteHead(runtimeId, result.checkpoint_id);
      this.warnUnrestorable(result.unrestorable ?? []);
      const cell = result.undone_cell;
      const source = cell.source.trim().split('\n')[0] ?? '';
      const shown = source.length > 60 ? `${source.slice(0, 60)}…` : source;
      return trans.__('Undid cell [%1]: %2', cell.execution_count, shown);
    });
  }

  /** Reattach every open notebook of a resumed runtime to its new kernel. */
  private async reattach(runtimeId: string, path: string, kernelId: string): Promise<void> {
    const panels: NotebookPanel[] = [];
    this.options.notebooks?.forEach(panel => {
      if (panel.sessionContext.session?.id === runtimeId || panel.context.path === path) {
        panels.push(panel);
      }
    });
    for (const panel of panels) {
      const attached = await reattachNotebook(
        panel.sessionContext,
        this.options.sessions,
        runtimeId,
        kernelId
      );
      if (!attached) {
        Notification.warning(
          this.trans.__(
            'The runtime resumed, but %1 could not be reattached; reopen the notebook.',
            panel.context.path
          )
        );
      }
    }
  }

  /**
   * Call the server; a SessionBusy answer is retried a few times, quickly, while
   * JupyterLab sees the runtime's kernel idle: the server counts JupyterLab's own short
   * requests (kernel info, the debugger's probe after a tab switch) as busy, and a click
   * should not fail on those. A kernel running the user's code is busy in JupyterLab's
   * eyes too, so that answer is shown at once.
   */
  private async call<T>(runtimeId: string | null, request: () => Promise<T>): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await request();
      } catch (error) {
        const transient =
          error instanceof DittoApiError &&
          error.code === 'SessionBusy' &&
          attempt < BUSY_RETRIES &&
          runtimeId !== null &&
          this.kernelIdleInLab(runtimeId);
        if (!transient) {
          throw error;
        }
        await new Promise(resolve => setTimeout(resolve, BUSY_RETRY_MS * 2 ** attempt));
      }
    }
  }

  /** Whether an open notebook of the runtime has a connected kernel JupyterLab sees idle. */
  private kernelIdleInLab(runtimeId: string): boolean {
    let idle = false;
    this.options.notebooks?.forEach(panel => {
      const kernel = panel.sessionContext.session?.kernel;
      if (
        panel.sessionContext.session?.id === runtimeId &&
        kernel?.connectionStatus === 'connected' &&
        kernel.status === 'idle'
      ) {
        idle = true;
      }
    });
    return idle;
  }

  /**
   * Run an operation with progress: the runtime's progress bar in the panel and, when it
   * takes more than PENDING_NOTICE_MS, a pending notification; then a short success note
   * or the error's sentence. True when it succeeded.
   */
  private async run(
    runtimeId: string | null,
    pending: string,
    work: () => Promise<string>
  ): Promise<boolean> {
    if (runtimeId) {
      this.state.setPending(runtimeId, pending);
    }
    let id: string | null = null;
    const timer = setTimeout(() => {
      id = Notification.emit(pending, 'in-progress', { autoClose: false });
    }, PENDING_NOTICE_MS);
    try {
      const message = await work();
      clearTimeout(timer);
      this.notify(id, message, 'success', 4000);
      return true;
    } catch (error) {
      clearTimeout(timer);
      this.notifyError(id, errorText(error), runtimeId);
      return false;
    } finally {
      if (runtimeId) {
        this.state.setPending(runtimeId, null);
      }
    }
  }

  /**
   * Show the outcome, in a notification of its own: the pending one (`id`, when shown) is
   * dismissed, not updated, since JupyterLab drops an update that reaches a toast before
   * it is drawn (the outcome was lost behind "Checkpointing…" under load).
   */
  private notify(
    id: string | null,
    message: string,
    type: 'success' | 'error',
    autoClose: number | false,
    actions?: Notification.IAction[]
  ): void {
    if (id !== null) {
      Notification.dismiss(id);
    }
    Notification.emit(message, type, { autoClose, actions });
  }

  /**
   * The error of an operation: the runtime's id reads as its notebook's name, and a text
   * longer than a notification shows keeps a *Show all* action.
   */
  private notifyError(id: string | null, text: string, runtimeId: string | null): void {
    const name = runtimeId ? this.runtimeName(runtimeId) : null;
    const notice = errorNotice(text, runtimeId, name);
    const full = notice.full;
    const actions = full
      ? [
          {
            label: this.trans.__('Show all'),
            caption: this.trans.__('Show the whole message'),
            callback: () => {
              void showDialog({
                title: this.trans.__('Error'),
                body: full,
                buttons: [Dialog.okButton({ label: this.trans.__('OK') })]
              });
            }
          }
        ]
      : undefined;
    this.notify(id, notice.message, 'error', false, actions);
  }

  private warnUnrestorable(values: IUnrestorableValue[]): void {
    if (values.length > 0) {
      Notification.warning(
        this.trans._n(
          'Not restored: %2.',
          'Not restored (%1 values): %2.',
          values.length,
          values.map(v => `${v.name} (${v.type})`).join(', ')
        ),
        { autoClose: false }
      );
    }
  }

  private async confirm(title: string, body: string, accept: string): Promise<boolean> {
    const result = await showDialog({
      title,
      body,
      buttons: [
        Dialog.cancelButton({ label: this.trans.__('Cancel') }),
        Dialog.warnButton({ label: accept })
      ]
    });
    return result.button.accept;
  }

  /** The document of the runtime's open notebook, as the user sees it (null: not open). */
  document(runtimeId: string): INotebookDocument | null {
    const path = this.state.runtime(runtimeId)?.conversation_id;
    return runtimeDocument(this.options.notebooks, runtimeId, path);
  }

  private label(checkpointId: string): string {
    const known = this.state.cache.checkpoint(checkpointId);
    return known ? checkpointLabel(known) : shortId(checkpointId);
  }

  private runtimeName(runtimeId: string): string {
    return this.state.runtime(runtimeId)?.conversation_id ?? shortId(runtimeId);
  }
}
