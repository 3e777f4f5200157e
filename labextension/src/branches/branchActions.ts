/**
 * The fan-out operations as the user meets them: compare the branches of a fan-out side by
 * side (POST /compare, in the Compare tab), and keep one branch (POST .../keep), which first
 * asks in a dialog naming the siblings it closes.
 */

import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';
import { TranslationBundle } from '@jupyterlab/translation';
import * as React from 'react';

import { RuntimeApi, errorText } from '../api';
import { IRuntimeRecord } from '../apiTypes';
import { CompareTab } from '../compare/compareTab';
import { baseName, shortId } from '../format';
import { PanelState } from '../state/panelState';
import { ICompareSideRequest, MAX_COMPARE_SIDES } from './branchTypes';
import { fanoutOf, siblingsToClose } from './fanout';
import { KeepDialogBody } from './keepDialogBody';

/** What the fan-out operations need. */
export interface IBranchActionsOptions {
  api: Pick<RuntimeApi, 'compareMany' | 'keep'>;
  state: PanelState;
  trans: TranslationBundle;
  compareTab: CompareTab;
}

/** Runs the fan-out operations of the panel and the palette. */
export class BranchActions {
  constructor(private options: IBranchActionsOptions) {}

  /** The runtimes of a fan-out, by their place in it. */
  members(fanoutId: string): IRuntimeRecord[] {
    return this.options.state.cache
      .records()
      .filter(r => fanoutOf(r)?.id === fanoutId)
      .sort((a, b) => (fanoutOf(a)?.index ?? 0) - (fanoutOf(b)?.index ?? 0));
  }

  /** Compare the branches of a fan-out (the first MAX_COMPARE_SIDES), each live or at its head. */
  async compareBranches(fanoutId: string): Promise<void> {
    const trans = this.options.trans;
    const members = this.members(fanoutId).slice(0, MAX_COMPARE_SIDES);
    const sides = members.map(r => ({ runtime_id: r.runtime_id, at: null }));
    await this.compareMany(sides, trans.__('%1 branches side by side', members.length));
  }

  /** Compare 2 to 8 sides in the Compare tab. */
  async compareMany(sides: ICompareSideRequest[], title: string): Promise<void> {
    const tab = this.options.compareTab;
    tab.show({ status: 'loading', title });
    try {
      const result = await this.options.api.compareMany(sides);
      tab.show({ status: 'sides', title, result });
    } catch (error) {
      tab.show({ status: 'failed', title, error: errorText(error) });
    }
  }

  /** Keep a fan-out child: after confirming, its live and paused siblings are closed. */
  async keep(runtimeId: string): Promise<void> {
    const { state, trans, api } = this.options;
    const name = this.name(runtimeId);
    const siblings = siblingsToClose(state.cache.records(), runtimeId);
    if (siblings.length === 0) {
      Notification.info(trans.__('No other branch of the fan-out of %1 is open.', name));
      return;
    }
    const closing = siblings.map(r => this.name(r.runtime_id));
    const answer = await showDialog({
      title: trans.__('Keep this branch?'),
      body: React.createElement(KeepDialogBody, { kept: name, closing, trans }),
      buttons: [
        Dialog.cancelButton({ label: trans.__('Cancel') }),
        Dialog.warnButton({
          label: trans._n('Close %1 branch', 'Close %1 branches', closing.length)
        })
      ]
    });
    if (!answer.button.accept) {
      return;
    }
    state.setPending(runtimeId, trans.__('Closing the other branches…'));
    try {
      const result = await api.keep(runtimeId);
      await Promise.all(
        [runtimeId, ...siblings.map(r => r.runtime_id)].map(id => state.cache.refreshRuntime(id))
      );
      Notification.success(
        trans._n(
          'Kept %2; closed %1 other branch.',
          'Kept %2; closed %1 other branches.',
          result.closed.length,
          name
        ),
        { autoClose: 4000 }
      );
      for (const failure of result.failed) {
        Notification.error(
          trans.__(
            '%1 was not closed: %2: %3',
            this.name(failure.runtime_id),
            failure.error,
            failure.message
          ),
          { autoClose: false }
        );
      }
    } catch (error) {
      Notification.error(errorText(error), { autoClose: false });
    } finally {
      state.setPending(runtimeId, null);
    }
  }

  private name(runtimeId: string): string {
    const record = this.options.state.runtime(runtimeId);
    return record ? baseName(record.conversation_id) : shortId(runtimeId);
  }
}
