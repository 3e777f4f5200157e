/**
 * One child of an open fan-out group in a checkpoint tree: its notebook, its status,
 * "branch 2 of 4", and "Keep" (close the other branches, which asks first).
 */

import { TranslationBundle } from '@jupyterlab/translation';
import { CommandRegistry } from '@lumino/commands';
import * as React from 'react';

import { ICheckoutBranch, RuntimeStatus } from '../apiTypes';
import { branchText, fanoutOf } from '../branches/fanout';
import { CommandIDs } from '../commandIds';
import { baseName } from '../format';

/** Props of `BranchRow`. */
export interface IBranchRowProps {
  branch: ICheckoutBranch;
  /** The child's status as the panel knows it now. */
  status: RuntimeStatus;
  graph: JSX.Element;
  index: number;
  count: number;
  top: number;
  height: number;
  commands: CommandRegistry;
  trans: TranslationBundle;
}

/** The row of one fan-out child. */
export function BranchRow(props: IBranchRowProps): JSX.Element {
  const { branch, status, commands, trans } = props;
  const name = baseName(branch.conversation_id);
  const fanout = fanoutOf(branch);
  const place = fanout ? branchText(fanout, (m, ...a) => trans.__(m, ...a)) : '';
  const args = { runtimeId: branch.runtime_id };
  return (
    <div
      role="treeitem"
      aria-level={3}
      aria-posinset={props.index + 1}
      aria-setsize={props.count}
      aria-label={trans.__('%1, %2, %3', name, place, status)}
      className="jp-DittoCheckpoint jp-DittoBranch"
      data-branch-runtime-id={branch.runtime_id}
      style={{ top: props.top, height: props.height }}
    >
      {props.graph}
      <span
        className={`jp-DittoStatusDot jp-mod-${status}`}
        role="img"
        aria-label={trans.__('status: %1', status)}
      />
      <span className="jp-DittoCheckpoint-name jp-DittoBranch-name" title={branch.conversation_id}>
        {name}
      </span>
      <span className="jp-DittoBadge jp-mod-branch">{place}</span>
      <span className={`jp-DittoStatusText jp-mod-${status}`}>{status}</span>
      {status !== 'closed' && commands.isEnabled(CommandIDs.keepBranch, args) ? (
        <button
          className="jp-DittoButton jp-mod-styled jp-DittoBranch-keep"
          aria-label={trans.__('Keep %1', name)}
          title={trans.__('Keep this branch and close the others of its fan-out')}
          onClick={() => void commands.execute(CommandIDs.keepBranch, args)}
        >
          {trans.__('Keep')}
        </button>
      ) : null}
    </div>
  );
}
