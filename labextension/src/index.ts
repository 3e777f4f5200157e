/**
 * ditto-jupyter's JupyterLab extension: the "Runtimes" side panel, its commands (palette,
 * context menu, shortcuts), the notebook toolbar's Runtime checkpoint and Runtime undo
 * buttons and runtime state, the Compare tab, all kept live by the server's runtime
 * events; and the open notebooks' documents for the checkpoints taken inside a kernel.
 */

import {
  ILabShell,
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { IDocumentManager } from '@jupyterlab/docmanager';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { ITranslator, nullTranslator } from '@jupyterlab/translation';

import { IConfirmations, RuntimeActions } from './actions';
import { RuntimeApi } from './api';
import { CellActions } from './cellActions';
import { registerCommands } from './commands';
import { BranchActions } from './branches/branchActions';
import { registerBranchCommands } from './branches/branchCommands';
import { CompareTab } from './compare/compareTab';
import { RuntimesPanel } from './components/panel';
import { isRuntimeEvent } from './apiTypes';
import { runtimeDocument } from './notebookDocuments';
import { installResumeOnRun } from './resumeOnRun';
import { CheckpointInfo } from './state/checkpointInfo';
import { PanelState } from './state/panelState';
import { answerPendingDocument } from './state/pendingDocuments';
import { applyRuntimeEvent } from './state/runtimeEvents';
import { ServerCache } from './state/serverCache';
import { NotebookToolbarExtension } from './toolbar';
import { widgetsPlugin } from './widgets/plugin';

const PLUGIN_ID = 'ditto-jupyter:plugin';

/** How long the runtime list waits after Jupyter's sessions change before reloading. */
const SESSIONS_SETTLE_MS = 300;

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'The Runtimes side panel: checkpoint, restore, branch, pause and resume.',
  autoStart: true,
  optional: [
    ILabShell,
    ILayoutRestorer,
    ICommandPalette,
    INotebookTracker,
    IDocumentManager,
    ISettingRegistry,
    ITranslator
  ],
  activate: (
    app: JupyterFrontEnd,
    labShell: ILabShell | null,
    restorer: ILayoutRestorer | null,
    palette: ICommandPalette | null,
    notebooks: INotebookTracker | null,
    docManager: IDocumentManager | null,
    settingRegistry: ISettingRegistry | null,
    translator: ITranslator | null
  ) => {
    const trans = (translator ?? nullTranslator).load('ditto_jupyter');
    const api = new RuntimeApi(app.serviceManager.serverSettings);
    const cache = new ServerCache(api);
    const info = new CheckpointInfo(api);
    const state = new PanelState(cache, info);
    let confirmations: IConfirmations = {
      confirmRestore: true,
      confirmClose: true,
      confirmDeleteSnapshot: true
    };
    if (settingRegistry) {
      void settingRegistry
        .load(PLUGIN_ID)
        .then(settings => {
          const read = (): void => {
            const value = (key: string): boolean => settings.get(key).composite !== false;
            confirmations = {
              confirmRestore: value('confirmRestore'),
              confirmClose: value('confirmClose'),
              confirmDeleteSnapshot: value('confirmDeleteSnapshot')
            };
            const pageSize = settings.get('pageSize').composite;
            if (typeof pageSize === 'number' && pageSize > 0) {
              cache.pageSize = pageSize;
            }
          };
          read();
          settings.changed.connect(read);
        })
        .catch(reason => console.error('ditto-jupyter: cannot load settings', reason));
    }

    let cellActions: CellActions | null = null;
    const compareTab = new CompareTab(app.shell, trans);
    const actions = new RuntimeActions({
      api,
      state,
      trans,
      docManager,
      notebooks,
      sessions: app.serviceManager.sessions,
      confirmations: () => confirmations,
      compareTab,
      afterRestore: (runtimeId, checkpointId, cellsChanged, cellsNote) =>
        void cellActions?.afterRestore(runtimeId, checkpointId, cellsChanged, cellsNote)
    });
    cellActions = new CellActions({
      api,
      state,
      trans,
      notebooks,
      compare: (runtimeId, from, to) => actions.compare(runtimeId, from, to),
      reveal: panel => app.shell.activateById(panel.id)
    });
    registerCommands(app, { state, actions, cellActions, notebooks, trans, palette });
    const branchActions = new BranchActions({ api, state, trans, compareTab });
    registerBranchCommands(app, { state, actions: branchActions, trans, palette });

    const panel = new RuntimesPanel(state, app.commands, trans);
    app.shell.add(panel, 'right', { rank: 650 });
    restorer?.add(panel, 'ditto-runtimes-panel');

    app.docRegistry.addWidgetExtension(
      'Notebook',
      new NotebookToolbarExtension(state, app.commands, trans)
    );

    // The notebook in focus pins its runtime on top of the panel.
    const followFocus = (): void => {
      const current = notebooks?.currentWidget ?? null;
      state.setFocus(current?.sessionContext.session?.id ?? null, current?.context.path ?? null);
    };
    let watched: NotebookPanel | null = null;
    notebooks?.currentChanged.connect((_, current) => {
      watched?.sessionContext.sessionChanged.disconnect(followFocus);
      watched = current;
      current?.sessionContext.sessionChanged.connect(followFocus);
      followFocus();
    });
    labShell?.currentChanged.connect(followFocus);

    // Open notebooks report their kernel's busy and idle as they change.
    notebooks?.widgetAdded.connect((_, panel) => {
      const context = panel.sessionContext;
      let runtimeId: string | null = null;
      const report = (): void => {
        const id = context.session?.id ?? null;
        if (runtimeId !== null && runtimeId !== id) {
          state.setKernelStatus(runtimeId, null);
        }
        runtimeId = id;
        const status = context.session?.kernel?.status;
        if (id !== null) {
          state.setKernelStatus(id, status === 'idle' || status === 'busy' ? status : null);
        }
      };
      context.statusChanged.connect(report);
      context.sessionChanged.connect(report);
      // A cell run in the notebook of a paused runtime resumes it (resumeOnRun.ts).
      void context.ready.then(() => {
        if (!panel.isDisposed) {
          panel.disposed.connect(installResumeOnRun(panel, state, actions));
        }
      });
      panel.disposed.connect(() => {
        if (runtimeId !== null) {
          state.setKernelStatus(runtimeId, null);
        }
      });
      report();
    });

    // Live: runtime events from the server, and Jupyter's own session list.
    app.serviceManager.events.stream.connect((_, event) => {
      if (isRuntimeEvent(event)) {
        // A checkpoint taken in a kernel waits for the document of its open notebook.
        void answerPendingDocument(api, runtimeId => runtimeDocument(notebooks, runtimeId), event);
        void applyRuntimeEvent(cache, event, info);
        if (event.action === 'pause' && event.ok) {
          // Notebooks of the paused runtime drop their session of the stopped kernel now,
          // not at JupyterLab's next poll, so a cell run there resumes it.
          void app.serviceManager.sessions.refreshRunning();
        }
      }
    });
    let settle: number | undefined;
    app.serviceManager.sessions.runningChanged.connect(() => {
      if (state.active) {
        window.clearTimeout(settle);
        settle = window.setTimeout(() => void cache.refresh(), SESSIONS_SETTLE_MS);
      }
    });

    void app.restored.then(followFocus);
  }
};

export default [plugin, widgetsPlugin];
