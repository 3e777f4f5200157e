/**
 * Every action as a command: in the palette, in a checkpoint's context menu, and (for
 * Checkpoint) behind a keyboard shortcut set in the settings schema.
 *
 * Arguments are optional: `runtimeId` defaults to the runtime of the notebook in focus
 * (else the pinned one), `checkpointId` to the checkpoint selected in the panel (a right
 * click selects the row first).
 */

import { JupyterFrontEnd } from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { INotebookTracker } from '@jupyterlab/notebook';
import { TranslationBundle } from '@jupyterlab/translation';
import { ReadonlyPartialJSONObject } from '@lumino/coreutils';

import { RuntimeActions } from './actions';
import { IRuntimeRecord } from './apiTypes';
import { CommandIDs } from './commandIds';
import { PanelState } from './state/panelState';
import { runtimeOfNotebook } from './toolbar';

/** What the commands need. */
export interface ICommandsOptions {
  state: PanelState;
  actions: RuntimeActions;
  notebooks: INotebookTracker | null;
  trans: TranslationBundle;
  palette: ICommandPalette | null;
}

const PALETTE_CATEGORY = 'Runtimes';

/** Register the commands, their palette entries and the checkpoint context menu. */
export function registerCommands(app: JupyterFrontEnd, options: ICommandsOptions): void {
  const { state, actions, notebooks, trans, palette } = options;
  const { commands } = app;

  const runtimeIdOf = (args: ReadonlyPartialJSONObject): string | null => {
    if (typeof args.runtimeId === 'string') {
      return args.runtimeId;
    }
    if (state.menuTarget) {
      return state.menuTarget.runtimeId;
    }
    const current = notebooks?.currentWidget;
    if (current) {
      const runtime = runtimeOfNotebook(state, current);
      return runtime?.runtime_id ?? current.sessionContext.session?.id ?? null;
    }
    return state.selection?.runtimeId ?? state.pinnedId;
  };
  const runtimeOf = (args: ReadonlyPartialJSONObject): IRuntimeRecord | undefined => {
    const id = runtimeIdOf(args);
    return id ? state.runtime(id) : undefined;
  };
  const checkpointIdOf = (args: ReadonlyPartialJSONObject): string | null => {
    if (typeof args.checkpointId === 'string') {
      return args.checkpointId;
    }
    if (state.menuTarget) {
      return state.menuTarget.checkpointId;
    }
    return state.selection?.checkpointId ?? null;
  };
  const live = (runtime: IRuntimeRecord | undefined): boolean =>
    runtime !== undefined && (runtime.status === 'idle' || runtime.status === 'busy');

  commands.addCommand(CommandIDs.openPanel, {
    label: trans.__('Show Runtimes Panel'),
    execute: () => app.shell.activateById('ditto-runtimes-panel')
  });

  commands.addCommand(CommandIDs.refresh, {
    label: trans.__('Refresh Runtimes'),
    execute: () => state.cache.refresh()
  });

  commands.addCommand(CommandIDs.checkpoint, {
    label: trans.__('Checkpoint Runtime…'),
    caption: trans.__('Save the variables and workspace of the runtime as a checkpoint'),
    isEnabled: args => {
      const runtime = runtimeOf(args);
      // A notebook whose session the server has not registered yet can checkpoint too.
      return runtime ? live(runtime) : runtimeIdOf(args) !== null;
    },
    execute: args => {
      const runtimeId = runtimeIdOf(args);
      return runtimeId ? actions.checkpoint(runtimeId) : undefined;
    }
  });

  commands.addCommand(CommandIDs.restore, {
    label: trans.__('Restore Checkpoint…'),
    caption: trans.__("Replace the kernel's variables with the checkpoint's"),
    isEnabled: args => {
      const checkpointId = checkpointIdOf(args);
      const checkpoint = checkpointId ? state.cache.checkpoint(checkpointId) : undefined;
      const runtimeId =
        typeof args.runtimeId === 'string' ? args.runtimeId : checkpoint?.runtime_id;
      return checkpoint !== undefined && live(runtimeId ? state.runtime(runtimeId) : undefined);
    },
    execute: args => {
      const checkpointId = checkpointIdOf(args);
      const checkpoint = checkpointId ? state.cache.checkpoint(checkpointId) : undefined;
      const runtimeId =
        typeof args.runtimeId === 'string' ? args.runtimeId : checkpoint?.runtime_id;
      return checkpointId && runtimeId ? actions.restore(runtimeId, checkpointId) : undefined;
    }
  });

  commands.addCommand(CommandIDs.checkout, {
    label: trans.__('Check Out Checkpoint'),
    caption: trans.__('Start a new runtime from the checkpoint and open its notebook'),
    isEnabled: args => checkpointIdOf(args) !== null,
    execute: args => {
      const checkpointId = checkpointIdOf(args);
      return checkpointId ? actions.checkout(checkpointId) : undefined;
    }
  });

  commands.addCommand(CommandIDs.deleteSnapshot, {
    label: trans.__('Delete Checkpoint Snapshot…'),
    caption: trans.__("Delete the checkpoint's workspace snapshot; the checkpoint stays"),
    isEnabled: args => {
      const checkpointId = checkpointIdOf(args);
      return (
        checkpointId !== null &&
        state.cache.checkpoint(checkpointId)?.has_provider_snapshot === true
      );
    },
    execute: args => {
      const checkpointId = checkpointIdOf(args);
      return checkpointId ? actions.deleteSnapshot(checkpointId) : undefined;
    }
  });

  commands.addCommand(CommandIDs.pause, {
    label: trans.__('Pause Runtime'),
    caption: trans.__('Checkpoint the runtime and stop its kernel; resume brings it back'),
    isEnabled: args => live(runtimeOf(args)),
    execute: args => {
      const runtimeId = runtimeIdOf(args);
      return runtimeId ? actions.pause(runtimeId) : undefined;
    }
  });

  commands.addCommand(CommandIDs.resume, {
    label: trans.__('Resume Runtime'),
    caption: trans.__('Start a kernel from the paused checkpoint and reattach the notebook'),
    isEnabled: args => runtimeOf(args)?.status === 'paused',
    execute: args => {
      const runtimeId = runtimeIdOf(args);
      return runtimeId ? actions.resume(runtimeId) : undefined;
    }
  });

  commands.addCommand(CommandIDs.close, {
    label: trans.__('Close Runtime…'),
    caption: trans.__('Stop the runtime for good; its checkpoints stay'),
    isEnabled: args => {
      const runtime = runtimeOf(args);
      return runtime !== undefined && runtime.status !== 'closed';
    },
    execute: args => {
      const runtimeId = runtimeIdOf(args);
      return runtimeId ? actions.close(runtimeId) : undefined;
    }
  });

  const all = [
    CommandIDs.openPanel,
    CommandIDs.refresh,
    CommandIDs.checkpoint,
    CommandIDs.restore,
    CommandIDs.checkout,
    CommandIDs.deleteSnapshot,
    CommandIDs.pause,
    CommandIDs.resume,
    CommandIDs.close
  ];
  for (const command of all) {
    palette?.addItem({ command, category: trans.__(PALETTE_CATEGORY) });
  }

  // A checkpoint's context menu: its own actions, then its runtime's; a runtime's
  // header: the runtime's. The panel sets the menu's target as the menu opens.
  const checkpointActions = [CommandIDs.restore, CommandIDs.checkout, CommandIDs.deleteSnapshot];
  const runtimeActions = [
    CommandIDs.checkpoint,
    CommandIDs.pause,
    CommandIDs.resume,
    CommandIDs.close
  ];
  [...checkpointActions, ...runtimeActions].forEach((command, rank) => {
    app.contextMenu.addItem({ command, selector: '.jp-DittoTree', rank: 100 + rank });
  });
  runtimeActions.forEach((command, rank) => {
    app.contextMenu.addItem({ command, selector: '.jp-DittoRuntime-header', rank: 100 + rank });
  });
  app.contextMenu.menu.aboutToClose.connect(() => {
    // The menu closes, then runs the chosen command: forget the target after that.
    window.setTimeout(() => state.setMenuTarget(null), 0);
  });
}
