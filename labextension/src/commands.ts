/**
 * Every action as a command: in the palette, in a checkpoint's context menu, and (for
 * Checkpoint) behind a keyboard shortcut set in the settings schema.
 *
 * Arguments are optional: `runtimeId` defaults to the runtime of the notebook in focus
 * (else the pinned one), `checkpointId` to the checkpoint selected in the panel (a right
 * click selects the row first). Labels say "Runtime", so none reads like one of
 * JupyterLab's file checkpoints (File > Save and Create Checkpoint).
 */

import { JupyterFrontEnd } from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { INotebookTracker } from '@jupyterlab/notebook';
import { TranslationBundle } from '@jupyterlab/translation';
import { ReadonlyPartialJSONObject } from '@lumino/coreutils';

import { RuntimeActions } from './actions';
import { IRuntimeRecord } from './apiTypes';
import { CellActions } from './cellActions';
import { CommandIDs } from './commandIds';
import { compareSides } from './compare/compareSides';
import { PanelState } from './state/panelState';
import { runtimeOfNotebook } from './toolbar';

/** What the commands need. */
export interface ICommandsOptions {
  state: PanelState;
  actions: RuntimeActions;
  cellActions: CellActions;
  notebooks: INotebookTracker | null;
  trans: TranslationBundle;
  palette: ICommandPalette | null;
}

const PALETTE_CATEGORY = 'Runtimes';

/** Register the commands, their palette entries and the checkpoint context menu. */
export function registerCommands(app: JupyterFrontEnd, options: ICommandsOptions): void {
  const { state, actions, cellActions, notebooks, trans, palette } = options;
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
    caption: trans.__(
      'Save the variables, workspace files and notebook of the runtime as a checkpoint'
    ),
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
    label: trans.__('Restore Runtime Checkpoint…'),
    caption: trans.__(
      "Bring the kernel's variables and the workspace files back to the checkpoint's"
    ),
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
    label: trans.__('Check Out Runtime Checkpoint'),
    caption: trans.__('Start a new runtime from the checkpoint and open its notebook as it was'),
    isEnabled: args => checkpointIdOf(args) !== null,
    execute: args => {
      const checkpointId = checkpointIdOf(args);
      return checkpointId ? actions.checkout(checkpointId) : undefined;
    }
  });

  commands.addCommand(CommandIDs.deleteSnapshot, {
    label: trans.__('Delete Runtime Checkpoint Snapshot…'),
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

  commands.addCommand(CommandIDs.pickForCompare, {
    label: args => {
      const checkpointId = checkpointIdOf(args);
      const runtimeId = checkpointId ? state.cache.checkpoint(checkpointId)?.runtime_id : null;
      return runtimeId && checkpointId && state.pickIndex(runtimeId, checkpointId) > 0
        ? trans.__('Unpick Runtime Checkpoint for Compare')
        : trans.__('Pick Runtime Checkpoint for Compare');
    },
    caption: trans.__('Pick two checkpoints (or one and the live kernel), then Compare'),
    isEnabled: args => {
      const checkpointId = checkpointIdOf(args);
      return checkpointId !== null && state.cache.checkpoint(checkpointId) !== undefined;
    },
    execute: args => {
      const checkpointId = checkpointIdOf(args);
      const runtimeId = checkpointId ? state.cache.checkpoint(checkpointId)?.runtime_id : null;
      if (checkpointId && runtimeId) {
        state.togglePick(runtimeId, checkpointId);
      }
    }
  });

  commands.addCommand(CommandIDs.compare, {
    label: trans.__('Compare Runtime Checkpoints'),
    caption: trans.__(
      'What changed between two checkpoints, or a checkpoint and the live kernel: variables, files, cells'
    ),
    isEnabled: args => compareSides(state, args, checkpointIdOf(args)) !== null,
    execute: args => {
      const sides = compareSides(state, args, checkpointIdOf(args));
      return sides ? actions.compare(sides.runtimeId, sides.from, sides.to) : undefined;
    }
  });

  commands.addCommand(CommandIDs.undoCell, {
    label: trans.__('Undo Last Cell in Runtime'),
    caption: trans.__(
      "Roll the runtime's variables and files back to just before its last cell (with %autocheckpoint on)"
    ),
    isEnabled: args => {
      const runtime = runtimeOf(args);
      return runtime ? live(runtime) : runtimeIdOf(args) !== null;
    },
    execute: args => {
      const runtimeId = runtimeIdOf(args);
      return runtimeId ? actions.undo(runtimeId) : undefined;
    }
  });

  // After a restore: the notice's two actions.
  const noticeOf = (
    args: ReadonlyPartialJSONObject
  ): { runtimeId: string; checkpointId: string } | null => {
    const runtimeId = runtimeIdOf(args);
    const checkpointId =
      typeof args.checkpointId === 'string'
        ? args.checkpointId
        : runtimeId
          ? (state.restoreNotice(runtimeId)?.checkpointId ?? null)
          : null;
    return runtimeId && checkpointId ? { runtimeId, checkpointId } : null;
  };

  commands.addCommand(CommandIDs.showCellChanges, {
    label: trans.__('Show Changes Since Runtime Checkpoint'),
    caption: trans.__('Compare the restored checkpoint with the notebook and kernel as they are'),
    isEnabled: args => noticeOf(args) !== null,
    execute: args => {
      const target = noticeOf(args);
      return target ? cellActions.showChanges(target.runtimeId, target.checkpointId) : undefined;
    }
  });

  commands.addCommand(CommandIDs.bringCellsBack, {
    label: trans.__("Bring Back Runtime Checkpoint's Cells…"),
    caption: trans.__(
      "Replace the notebook's cells with the checkpoint's (a file checkpoint is taken first)"
    ),
    isEnabled: args => noticeOf(args) !== null,
    execute: args => {
      const target = noticeOf(args);
      return target ? cellActions.bringCellsBack(target.runtimeId, target.checkpointId) : undefined;
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
    CommandIDs.compare,
    CommandIDs.undoCell,
    CommandIDs.showCellChanges,
    CommandIDs.bringCellsBack,
    CommandIDs.pause,
    CommandIDs.resume,
    CommandIDs.close
  ];
  for (const command of all) {
    palette?.addItem({ command, category: trans.__(PALETTE_CATEGORY) });
  }

  // A checkpoint's context menu: its own actions, then its runtime's; a runtime's
  // header: the runtime's. The panel sets the menu's target as the menu opens.
  const checkpointActions = [
    CommandIDs.restore,
    CommandIDs.checkout,
    CommandIDs.pickForCompare,
    CommandIDs.compare,
    CommandIDs.deleteSnapshot
  ];
  const runtimeActions = [
    CommandIDs.checkpoint,
    CommandIDs.undoCell,
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
