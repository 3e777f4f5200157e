/**
 * The fan-out commands: "Compare the branches" of a fan-out group (`fanoutId`, else the
 * fan-out of `runtimeId`) and "Keep this branch" on a fan-out child (`runtimeId`, else the
 * runtime the context menu or the selection names), in the palette and the runtime menu.
 */

import { JupyterFrontEnd } from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { TranslationBundle } from '@jupyterlab/translation';
import { ReadonlyPartialJSONObject } from '@lumino/coreutils';

import { CommandIDs } from '../commandIds';
import { pickedSides } from '../compare/compareSides';
import { PanelState } from '../state/panelState';
import { BranchActions } from './branchActions';
import { fanoutOf, siblingsToClose } from './fanout';

/** What the fan-out commands need. */
export interface IBranchCommandsOptions {
  state: PanelState;
  actions: BranchActions;
  trans: TranslationBundle;
  palette: ICommandPalette | null;
}

/** Register the fan-out commands. */
export function registerBranchCommands(
  app: JupyterFrontEnd,
  options: IBranchCommandsOptions
): void {
  const { state, actions, trans, palette } = options;
  const runtimeIdOf = (args: ReadonlyPartialJSONObject): string | null => {
    if (typeof args.runtimeId === 'string') {
      return args.runtimeId;
    }
    return state.menuTarget?.runtimeId ?? state.selection?.runtimeId ?? state.pinnedId;
  };
  const fanoutIdOf = (args: ReadonlyPartialJSONObject): string | null => {
    if (typeof args.fanoutId === 'string') {
      return args.fanoutId;
    }
    const runtimeId = runtimeIdOf(args);
    const record = runtimeId ? state.runtime(runtimeId) : undefined;
    return record ? (fanoutOf(record)?.id ?? null) : null;
  };

  app.commands.addCommand(CommandIDs.compareBranches, {
    label: trans.__('Compare the Branches of a Runtime Fan-out'),
    caption: trans.__('Variables, files and cells of every branch of one fan-out, side by side'),
    isEnabled: args => {
      const fanoutId = fanoutIdOf(args);
      return fanoutId !== null && actions.members(fanoutId).length >= 2;
    },
    execute: args => {
      const fanoutId = fanoutIdOf(args);
      return fanoutId ? actions.compareBranches(fanoutId) : undefined;
    }
  });

  app.commands.addCommand(CommandIDs.keepBranch, {
    label: trans.__('Keep This Runtime Branch…'),
    caption: trans.__('Close the other branches of its fan-out; their checkpoints stay'),
    isEnabled: args => {
      const runtimeId = runtimeIdOf(args);
      const record = runtimeId ? state.runtime(runtimeId) : undefined;
      return (
        record !== undefined &&
        record.status !== 'closed' &&
        fanoutOf(record) !== null &&
        siblingsToClose(state.cache.records(), record.runtime_id).length > 0
      );
    },
    execute: args => {
      const runtimeId = runtimeIdOf(args);
      return runtimeId ? actions.keep(runtimeId) : undefined;
    }
  });

  app.commands.addCommand(CommandIDs.comparePicked, {
    label: trans.__('Compare Picked Runtime Checkpoints Side by Side'),
    caption: trans.__('Variables, files and cells of 3 to 8 picked checkpoints, side by side'),
    isEnabled: () => pickedSides(state) !== null,
    execute: () => {
      const sides = pickedSides(state);
      return sides
        ? actions.compareMany(sides, trans.__('%1 checkpoints side by side', sides.length))
        : undefined;
    }
  });

  for (const command of [
    CommandIDs.compareBranches,
    CommandIDs.keepBranch,
    CommandIDs.comparePicked
  ]) {
    palette?.addItem({ command, category: trans.__('Runtimes') });
  }
  app.contextMenu.addItem({
    command: CommandIDs.comparePicked,
    selector: '.jp-DittoTree',
    rank: 104
  });
  app.contextMenu.addItem({
    command: CommandIDs.keepBranch,
    selector: '.jp-DittoRuntime-header',
    rank: 120
  });
}
