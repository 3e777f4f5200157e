/**
 * One runtime of the side panel: its status, notebook and last change, its actions, its
 * progress, and (opened) its checkpoint tree with the checkpoints picked for Compare above
 * it and the selected checkpoint's details below; after a restore whose checkpoint's cells
 * differ from the notebook's, a notice offering to show or bring them back.
 */

import { caretDownIcon, caretRightIcon } from '@jupyterlab/ui-components';
import * as React from 'react';

import { branchText, fanoutOf } from '../branches/fanout';
import { CommandIDs } from '../commandIds';
import { baseName, formatAge } from '../format';
import { ComparePicks } from '../compare/comparePicks';
import { CheckpointDetails } from './details';
import { IRuntimeItemProps } from './panelProps';
import { RestoreNotice } from './restoreNotice';
import { CheckpointTree } from './tree';

/** A runtime of the list. */
export function RuntimeItem(props: IRuntimeItemProps): JSX.Element {
  const { state, commands, trans, runtime, pinned, now } = props;
  const id = runtime.runtime_id;
  const expanded = state.isExpanded(id);
  const pending = state.pending(id);
  const name = baseName(runtime.conversation_id);
  const selection = state.selection;
  const treeId = `ditto-tree-${id}`;
  const args = { runtimeId: id };
  const fanout = fanoutOf(runtime);
  const action = (command: string, label: string): JSX.Element | null =>
    commands.isEnabled(command, args) ? (
      <button
        className="jp-DittoButton jp-mod-styled"
        aria-label={`${label} ${name}`}
        title={commands.caption(command, args) || label}
        disabled={pending !== undefined}
        onClick={() => void commands.execute(command, args)}
      >
        {label}
      </button>
    ) : null;
  return (
    <li
      className={`jp-DittoRuntime${pinned ? ' jp-mod-pinned' : ''}`}
      data-runtime-id={id}
      aria-label={trans.__('%1, %2', name, runtime.status)}
    >
      <div
        className="jp-DittoRuntime-header"
        onContextMenu={() => state.setMenuTarget({ runtimeId: id, checkpointId: null })}
      >
        <button
          className="jp-DittoIconButton jp-DittoRuntime-toggle"
          aria-expanded={expanded}
          aria-controls={treeId}
          aria-label={
            expanded
              ? trans.__('Hide the checkpoints of %1', name)
              : trans.__('Show the checkpoints of %1', name)
          }
          onClick={() => state.toggle(id)}
        >
          {expanded ? <caretDownIcon.react tag="span" /> : <caretRightIcon.react tag="span" />}
        </button>
        <span
          className={`jp-DittoStatusDot jp-mod-${runtime.status}`}
          role="img"
          aria-label={trans.__('status: %1', runtime.status)}
        />
        <span className="jp-DittoRuntime-name" title={runtime.conversation_id}>
          {name}
        </span>
        <span
          className="jp-DittoRuntime-age"
          title={trans.__('Last change: %1', new Date(runtime.updated_at_ms).toLocaleString())}
        >
          {formatAge(runtime.updated_at_ms, now, (m, ...a) => trans.__(m, ...a))}
        </span>
      </div>
      <div className="jp-DittoRuntime-sub">
        <span className={`jp-DittoStatusText jp-mod-${runtime.status}`}>{runtime.status}</span>
        {pinned ? (
          <span className="jp-DittoBadge jp-mod-pinned">{trans.__('this notebook')}</span>
        ) : null}
        {fanout ? (
          <span
            className="jp-DittoBadge jp-mod-branch jp-DittoRuntime-fanout"
            title={trans.__(
              'One of %1 runtimes checked out at once from one checkpoint',
              fanout.size
            )}
          >
            {branchText(fanout, (m, ...a) => trans.__(m, ...a))}
          </span>
        ) : null}
        <span className="jp-DittoRuntime-actions">
          {action(CommandIDs.checkpoint, trans.__('Checkpoint'))}
          {action(CommandIDs.pause, trans.__('Pause'))}
          {action(CommandIDs.resume, trans.__('Resume'))}
          {action(CommandIDs.close, trans.__('Close'))}
          {action(CommandIDs.keepBranch, trans.__('Keep'))}
        </span>
      </div>
      {pending ? (
        <div className="jp-DittoProgress" role="progressbar" aria-label={pending}>
          <div className="jp-DittoProgress-bar" />
          <span className="jp-DittoProgress-label">{pending}</span>
        </div>
      ) : null}
      <RestoreNotice {...props} />
      {expanded ? (
        <div id={treeId}>
          <ComparePicks {...props} />
          <CheckpointTree
            state={state}
            runtimeId={id}
            commands={commands}
            trans={trans}
            now={now}
          />
          {selection && selection.runtimeId === id ? (
            <CheckpointDetails
              state={state}
              runtimeId={id}
              checkpointId={selection.checkpointId}
              commands={commands}
              trans={trans}
            />
          ) : null}
        </div>
      ) : null}
    </li>
  );
}
