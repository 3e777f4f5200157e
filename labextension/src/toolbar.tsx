/**
 * The notebook toolbar's part: a Checkpoint button, and the runtime's state at a glance
 * (its head checkpoint, or "paused" with a Resume button where the user is looking).
 */

import { ReactWidget, ToolbarButton, UseSignal } from '@jupyterlab/apputils';
import { DocumentRegistry } from '@jupyterlab/docregistry';
import { INotebookModel, NotebookPanel } from '@jupyterlab/notebook';
import { TranslationBundle } from '@jupyterlab/translation';
import { CommandRegistry } from '@lumino/commands';
import { DisposableDelegate, IDisposable } from '@lumino/disposable';
import * as React from 'react';

import { CommandIDs } from './commandIds';
import { checkpointLabel } from './format';
import { checkpointIcon } from './icons';
import { RuntimesModel } from './model';
import { IRuntimeRecord } from './models';

/** The runtime of a notebook: its session's, else (paused, no session) by its path. */
export function runtimeOfNotebook(
  model: RuntimesModel,
  panel: NotebookPanel
): IRuntimeRecord | undefined {
  const sessionId = panel.sessionContext.session?.id;
  const bySession = sessionId ? model.runtime(sessionId) : undefined;
  return bySession ?? model.runtimeForPath(panel.context.path);
}

/** The state item of one notebook's toolbar. */
class RuntimeStateItem extends ReactWidget {
  constructor(
    private model: RuntimesModel,
    private panel: NotebookPanel,
    private commands: CommandRegistry,
    private trans: TranslationBundle
  ) {
    super();
    this.addClass('jp-DittoToolbarState');
    this.node.setAttribute('role', 'status');
  }

  render(): JSX.Element {
    return <UseSignal signal={this.model.changed}>{() => this.renderState()}</UseSignal>;
  }

  private renderState(): JSX.Element | null {
    const { model, trans, commands } = this;
    const runtime = runtimeOfNotebook(model, this.panel);
    if (!runtime) {
      return null;
    }
    model.ensureLineage(runtime.runtime_id);
    const pending = model.pending(runtime.runtime_id);
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
    const head = model.lineage(runtime.runtime_id)?.head ?? null;
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

/** Adds the Checkpoint button and the state item to every notebook's toolbar. */
export class NotebookToolbarExtension implements DocumentRegistry.IWidgetExtension<
  NotebookPanel,
  INotebookModel
> {
  constructor(
    private model: RuntimesModel,
    private commands: CommandRegistry,
    private trans: TranslationBundle
  ) {}

  createNew(panel: NotebookPanel): IDisposable {
    const { model, commands, trans } = this;
    const button = new ToolbarButton({
      icon: checkpointIcon,
      tooltip: trans.__('Checkpoint this runtime'),
      label: trans.__('Checkpoint'),
      onClick: () => {
        const runtimeId = panel.sessionContext.session?.id;
        void commands.execute(CommandIDs.checkpoint, runtimeId ? { runtimeId } : {});
      }
    });
    button.addClass('jp-DittoToolbarCheckpoint');
    const state = new RuntimeStateItem(model, panel, commands, trans);
    panel.toolbar.insertItem(10, 'dittoCheckpoint', button);
    panel.toolbar.insertItem(11, 'dittoState', state);
    const onSession = (): void => {
      const id = panel.sessionContext.session?.id;
      if (id && !model.runtime(id)) {
        void model.refreshRuntime(id);
      } else if (!id) {
        void model.activate(); // no session (a paused runtime?): find it by path
      }
      state.update();
    };
    panel.sessionContext.sessionChanged.connect(onSession);
    void panel.sessionContext.ready.then(onSession);
    return new DisposableDelegate(() => {
      panel.sessionContext.sessionChanged.disconnect(onSession);
      button.dispose();
      state.dispose();
    });
  }
}
