/**
 * A restore in place never overwrites the notebook silently. It rolls the kernel back and
 * leaves the open notebook as it is; when the checkpoint's cells differ from the open
 * notebook's, the panel says how many ("7 cells changed since this checkpoint") and
 * offers to show the changes (the Compare view, checkpoint against live) or to bring the
 * checkpoint's cells back.
 *
 * Bringing them back is confirmed, and recoverable: the notebook is saved and a
 * JupyterLab file checkpoint taken first (what Ctrl+S does), so File > Revert Notebook to
 * Checkpoint brings back the cells the user had. When saving or the file checkpoint
 * fails, the cells are left alone.
 */

import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { TranslationBundle } from '@jupyterlab/translation';

import { RuntimeApi, errorText } from './api';
import { INotebookDocument, LIVE } from './apiTypes';
import { checkpointLabel, shortId } from './format';
import { documentOf, fileCheckpoint, notebooksOfRuntime, replaceCells } from './notebookDocuments';
import { changedCellCount } from './compare/documentCompare';
import { restoreNoticeText } from './restoreNoticeText';
import { PanelState } from './state/panelState';

/** What the cell actions need. */
export interface ICellActionsOptions {
  api: Pick<RuntimeApi, 'document'>;
  state: PanelState;
  trans: TranslationBundle;
  notebooks: INotebookTracker | null;
  /** Opens the Compare view of two points of a runtime. */
  compare: (runtimeId: string, from: string, to: string) => Promise<void>;
  /** Brings a notebook's tab to the front. */
  reveal: (panel: NotebookPanel) => void;
}

/** The notebook side of a restore: say what differs, show it, bring the cells back. */
export class CellActions {
  constructor(private options: ICellActionsOptions) {}

  /**
   * After a restore in place: count the cells that differ (the server's count, else by
   * comparing the open notebook with the checkpoint's document), and when some do, say
   * so in the panel and in a notification with the two actions.
   */
  async afterRestore(
    runtimeId: string,
    checkpointId: string,
    cellsChanged: number | null,
    cellsNote: string | null = null
  ): Promise<void> {
    const { state, trans } = this.options;
    const open = this.openDocument(runtimeId);
    if (!open) {
      return; // no notebook of the runtime is open here: nothing to bring back into
    }
    let count = cellsChanged;
    if (count === null) {
      const stored = await this.storedDocument(runtimeId, checkpointId);
      if (!stored) {
        return; // the checkpoint holds no document
      }
      count = changedCellCount(stored, open);
    }
    if (count <= 0) {
      return;
    }
    state.setRestoreNotice(runtimeId, { checkpointId, cellsChanged: count, cellsNote });
    this.dismissNotification(runtimeId);
    const id = Notification.warning(this.noticeText(count, checkpointId, cellsNote), {
      autoClose: false,
      actions: [
        {
          label: trans.__('Show changes'),
          caption: trans.__('Compare the checkpoint with the notebook as it is'),
          callback: () => void this.showChanges(runtimeId, checkpointId)
        },
        {
          label: trans.__('Bring cells back'),
          caption: trans.__("Replace the notebook's cells with the checkpoint's"),
          callback: () => void this.bringCellsBack(runtimeId, checkpointId)
        }
      ]
    });
    this._notifications.set(runtimeId, id);
  }

  /** "7 cells changed since this checkpoint" (naming it), and the server's note if any. */
  noticeText(count: number, checkpointId: string, note: string | null = null): string {
    return restoreNoticeText(this.options.trans, count, this.label(checkpointId), note);
  }

  /** The Compare view: the checkpoint against the live kernel and the open notebook. */
  showChanges(runtimeId: string, checkpointId: string): Promise<void> {
    return this.options.compare(runtimeId, checkpointId, LIVE);
  }

  /**
   * Replace the open notebook's cells with the checkpoint's, after a confirmation and a
   * JupyterLab file checkpoint of the cells it has now.
   */
  async bringCellsBack(runtimeId: string, checkpointId: string): Promise<void> {
    const { state, trans } = this.options;
    const label = this.label(checkpointId);
    const [panel] = notebooksOfRuntime(
      this.options.notebooks,
      runtimeId,
      state.runtime(runtimeId)?.conversation_id
    );
    if (!panel) {
      Notification.error(trans.__('The notebook of this runtime is not open.'));
      return;
    }
    const confirmed = await showDialog({
      title: trans.__('Bring the cells of %1 back?', label),
      body: trans.__(
        'The cells of %1 are replaced by those of runtime checkpoint %2. The notebook is saved and a file checkpoint taken first: File > Revert Notebook to Checkpoint brings back the cells it has now.',
        panel.context.path,
        label
      ),
      buttons: [
        Dialog.cancelButton({ label: trans.__('Cancel') }),
        Dialog.warnButton({ label: trans.__('Bring cells back') })
      ]
    });
    if (!confirmed.button.accept) {
      return;
    }
    const stored = await this.storedDocument(runtimeId, checkpointId, true);
    if (!stored) {
      return;
    }
    try {
      await fileCheckpoint(panel);
    } catch (error) {
      Notification.error(
        trans.__(
          'The cells were left as they are: saving the notebook or its file checkpoint failed (%1).',
          errorText(error)
        ),
        { autoClose: false }
      );
      return;
    }
    replaceCells(panel, stored);
    state.setRestoreNotice(runtimeId, null);
    this.dismissNotification(runtimeId);
    this.options.reveal(panel);
    Notification.success(
      trans._n(
        'Brought back the %1 cell of %2. File > Revert Notebook to Checkpoint brings back the cells you had.',
        'Brought back the %1 cells of %2. File > Revert Notebook to Checkpoint brings back the cells you had.',
        stored.cells.length,
        label
      ),
      { autoClose: 8000 }
    );
  }

  /** Close the notification of a runtime's last restore notice, if it is still shown. */
  private dismissNotification(runtimeId: string): void {
    const id = this._notifications.get(runtimeId);
    if (id !== undefined) {
      Notification.dismiss(id);
      this._notifications.delete(runtimeId);
    }
  }

  private openDocument(runtimeId: string): INotebookDocument | null {
    const path = this.options.state.runtime(runtimeId)?.conversation_id;
    const [panel] = notebooksOfRuntime(this.options.notebooks, runtimeId, path);
    return panel ? documentOf(panel) : null;
  }

  /** The checkpoint's stored document; null (said, when `report`) when it has none. */
  private async storedDocument(
    runtimeId: string,
    checkpointId: string,
    report = false
  ): Promise<INotebookDocument | null> {
    const summary = this.options.state.cache.checkpoint(checkpointId);
    if (summary?.document && summary.document.cells === null && !report) {
      return null; // none, or still pending
    }
    try {
      return await this.options.api.document(runtimeId, checkpointId);
    } catch (error) {
      if (report) {
        Notification.error(errorText(error), { autoClose: false });
      } else {
        console.info(`ditto-jupyter: no document of checkpoint ${checkpointId}:`, errorText(error));
      }
      return null;
    }
  }

  private label(checkpointId: string): string {
    const known = this.options.state.cache.checkpoint(checkpointId);
    return known ? checkpointLabel(known) : shortId(checkpointId);
  }

  private _notifications = new Map<string, string>();
}
