/**
 * The notebook toolbar's part: the Runtime checkpoint and Runtime undo buttons, and the
 * runtime's state at a glance (its head checkpoint, or "paused" with a Resume button where
 * the user is looking). Their tooltips say "Runtime": JupyterLab's own toolbar has a file
 * checkpoint (Save and create checkpoint) and cell-editing undo.
 */

import { ReactWidget, ToolbarButton, UseSignal } from '@jupyterlab/apputils';
import { DocumentRegistry } from '@jupyterlab/docregistry';
import { INotebookModel, NotebookPanel } from '@jupyterlab/notebook';
import { TranslationBundle } from '@jupyterlab/translation';
import { CommandRegistry } from '@lumino/commands';
import { DisposableDelegate, IDisposable } from '@lumino/disposable';
import * as React from 'react';

import { IRuntimeRecord } from './apiTypes';
import { CommandIDs } from './commandIds';
import { checkpointLabel } from './format';
import { checkpointIcon, undoCellIcon } from './icons';
import { PanelState } from './state/panelState';

/** The runtime of a notebook: its session's, else (paused, no session) by its path. */
export function runtimeOfNotebook(
  state: PanelState,
  panel: NotebookPanel
): IRuntimeRecord | undefined {
  const sessionId = panel.sessionContext.session?.id;
  const bySession = sessionId ? state.runtime(sessionId) : undefined;
  return bySession ?? state.runtimeForPath(panel.context.path);
}

/** The state item of one notebook's toolbar. */
class RuntimeStateItem extends ReactWidget {
  constructor(
    private state: PanelState,
    private panel: NotebookPanel,
    private commands: CommandRegistry,
    private trans: TranslationBundle
  ) {
    super();
    this.addClass('jp-DittoToolbarState');
    this.node.setAttribute('role', 'status');
  }

  render(): JSX.Element {
    return <UseSignal signal={this.state.changed}>{() => this.renderState()}</UseSignal>;
  }

  private renderState(): JSX.Element | null {
    const { state, trans, commands } = this;
    const runtime = runtimeOfNotebook(state, this.panel);
    if (!runtime) {
      return null;
    }
    state.cache.ensureLineage(runtime.runtime_id);
    const pending = state.pending(runtime.runtime_id);
    if (pending) {
      return (
        <span className="jp-DittoToolbarState-text jp-mod-pending" aria-live="polite">
          <span className="jp-DittoSpinner" aria-hidden="true" />
          {pending}
        </span>
      );
    }
    if (runtime.status === 'paused') {
      return (
        <span className="jp-DittoToolbarState-text jp-mod-paused">
          {trans.__('paused')}
          <button
            className="jp-DittoButton jp-mod-styled jp-DittoButton-primary"
            aria-label={trans.__('Resume this runtime')}
            onClick={() =>
              void commands.execute(CommandIDs.resume, { runtimeId: runtime.runtime_id })
            }
          >
            {trans.__('Resume')}
          </button>
        </span>
      );
    }
    if (runtime.status === 'closed') {
      return <span className="jp-DittoToolbarState-text jp-mod-closed">{trans.__('closed')}</span>;
    }
    const head = state.cache.lineage(runtime.runtime_id)?.head ?? null;
    return (
      <span
        className="jp-DittoToolbarState-text"
        title={head ? trans.__('Head checkpoint: %1', head.checkpoint_id) : undefined}
      >
        {head ? trans.__('at %1', checkpointLabel(head)) : trans.__('no checkpoint yet')}
      </span>
    );
  }
}

/** Adds the two buttons and the state item to every notebook's toolbar. */
export class NotebookToolbarExtension implements DocumentRegistry.IWidgetExtension<
  NotebookPanel,
  INotebookModel
> {
  constructor(
    private state: PanelState,
    private commands: CommandRegistry,
    private trans: TranslationBundle
  ) {}

  createNew(panel: NotebookPanel): IDisposable {
    const { state, commands, trans } = this;
    const runtimeArgs = (): { runtimeId?: string } => {
      const runtimeId = panel.sessionContext.session?.id;
      return runtimeId ? { runtimeId } : {};
    };
    const button = new ToolbarButton({
      icon: checkpointIcon,
      tooltip: trans.__(
        "Runtime checkpoint: this notebook's variables, workspace files and cells (Ctrl+Alt+C)"
      ),
      onClick: () => void commands.execute(CommandIDs.checkpoint, runtimeArgs())
    });
    // Icons alone, named by their tooltips: with the Runtimes sidebar open, labels push the
    // state item and the kernel's name into the toolbar's overflow menu.
    button.addClass('jp-DittoToolbarCheckpoint');
    const undo = new ToolbarButton({
      icon: undoCellIcon,
      tooltip: trans.__(
        "Runtime undo: this notebook's variables and files go back to just before the last cell ran (Ctrl+Alt+Z; needs %autocheckpoint)"
      ),
      onClick: () => void commands.execute(CommandIDs.undoCell, runtimeArgs())
    });
    undo.addClass('jp-DittoToolbarUndo');
    const stateItem = new RuntimeStateItem(state, panel, commands, trans);
    panel.toolbar.insertItem(10, 'dittoCheckpoint', button);
    panel.toolbar.insertItem(11, 'dittoUndoCell', undo);
    panel.toolbar.insertItem(12, 'dittoState', stateItem);
    const onSession = (): void => {
      const id = panel.sessionContext.session?.id;
      if (id && !state.runtime(id)) {
        void state.cache.refreshRuntime(id);
      } else if (!id) {
        void state.activate(); // no session (a paused runtime?): find it by path
      }
      stateItem.update();
    };
    panel.sessionContext.sessionChanged.connect(onSession);
    void panel.sessionContext.ready.then(onSession);
    return new DisposableDelegate(() => {
      panel.sessionContext.sessionChanged.disconnect(onSession);
      button.dispose();
      undo.dispose();
      stateItem.dispose();
    });
  }
}
