/**
 * The details of the selected checkpoint: its metadata, whether its snapshot still exists,
 * the values it could not keep, what it holds (variables, files, notebook), what changed
 * since its parent, the checkouts made from it, and its actions (Compare among them).
 */

import { TranslationBundle } from '@jupyterlab/translation';
import { CommandRegistry } from '@lumino/commands';
import * as React from 'react';

import { LIVE } from '../apiTypes';
import { CommandIDs } from '../commandIds';
import { baseName, checkpointLabel, formatBytes, shortId } from '../format';
import { PanelState } from '../state/panelState';
import { ChangesSection } from './changesSection';
import { HoldsSection } from './holdsSection';

/** Props of `CheckpointDetails`. */
export interface ICheckpointDetailsProps {
  state: PanelState;
  runtimeId: string;
  checkpointId: string;
  commands: CommandRegistry;
  trans: TranslationBundle;
}

/** The selected checkpoint, in full. */
export function CheckpointDetails(props: ICheckpointDetailsProps): JSX.Element | null {
  const { state, runtimeId, checkpointId, commands, trans } = props;
  const checkpoint = state.cache.tree(runtimeId)?.checkpoints.get(checkpointId);
  if (!checkpoint) {
    return null;
  }
  const runtime = state.runtime(runtimeId);
  const head = state.cache.lineage(runtimeId)?.head?.checkpoint_id === checkpointId;
  const checkouts = state.cache.checkoutsOf(runtimeId, checkpointId);
  const metadata = Object.keys(checkpoint.metadata).length
    ? JSON.stringify(checkpoint.metadata, null, 2)
    : null;
  const args = { runtimeId, checkpointId };
  const button = (
    command: string,
    label: string,
    warn = false,
    commandArgs: Record<string, string> = args,
    pressed?: boolean
  ): JSX.Element => (
    <button
      className={`jp-DittoButton jp-mod-styled${warn ? ' jp-DittoButton-danger' : ''}`}
      aria-label={`${label} ${checkpointLabel(checkpoint)}`}
      aria-pressed={pressed}
      title={commands.caption(command, commandArgs) || undefined}
      disabled={!commands.isEnabled(command, commandArgs)}
      onClick={() => void commands.execute(command, commandArgs)}
    >
      {label}
    </button>
  );
  const live = runtime?.status === 'idle' || runtime?.status === 'busy';
  const picked = state.pickIndex(runtimeId, checkpointId) > 0;
  const parentId = checkpoint.parent_checkpoint_id;
  const info = state.info;
  const retry = (): void => info.forget(checkpointId);
  return (
    <section
      className="jp-DittoDetails"
      aria-label={trans.__('Checkpoint %1', checkpointLabel(checkpoint))}
    >
      <div className="jp-DittoDetails-title">
        {checkpointLabel(checkpoint)}
        {head ? <span className="jp-DittoBadge jp-mod-head">{trans.__('head')}</span> : null}
      </div>
      <dl className="jp-DittoDetails-fields">
        <dt>{trans.__('Id')}</dt>
        <dd className="jp-DittoMono">{checkpoint.checkpoint_id}</dd>
        <dt>{trans.__('Parent')}</dt>
        <dd className="jp-DittoMono">
          {checkpoint.parent_checkpoint_id
            ? shortId(checkpoint.parent_checkpoint_id)
            : trans.__('none')}
        </dd>
        <dt>{trans.__('Taken')}</dt>
        <dd>{new Date(checkpoint.created_at_ms).toLocaleString()}</dd>
        <dt>{trans.__('Written')}</dt>
        <dd>{formatBytes(checkpoint.bytes_written)}</dd>
        <dt>{trans.__('Snapshot')}</dt>
        <dd>
          {checkpoint.has_provider_snapshot
            ? trans.__('kept')
            : trans.__('deleted (variables only)')}
        </dd>
        {metadata ? (
          <>
            <dt>{trans.__('Metadata')}</dt>
            <dd>
              <pre className="jp-DittoMono">{metadata}</pre>
            </dd>
          </>
        ) : null}
      </dl>
      {checkpoint.unrestorable.length > 0 ? (
        <div className="jp-DittoDetails-lost">
          <div className="jp-DittoDetails-subtitle">{trans.__('Not kept')}</div>
          <ul>
            {checkpoint.unrestorable.map(value => (
              <li key={value.name}>
                <code>{value.name}</code> ({value.type}): {value.reason}
              </li>
            ))}
          </ul>
        </div>
      ) : null}
      <HoldsSection
        loaded={info.contents(runtimeId, checkpointId)}
        checkpoint={checkpoint}
        trans={trans}
        onRetry={retry}
      />
      {parentId ? (
        <ChangesSection
          loaded={info.changes(runtimeId, checkpointId, parentId)}
          parentId={parentId}
          trans={trans}
          onRetry={retry}
          onShowAll={() =>
            void commands.execute(CommandIDs.compare, {
              runtimeId,
              from: parentId,
              to: checkpointId
            })
          }
        />
      ) : null}
      {checkouts.length > 0 ? (
        <div className="jp-DittoDetails-checkouts">
          <div className="jp-DittoDetails-subtitle">{trans.__('Checked out to')}</div>
          <ul>
            {checkouts.map(branch => (
              <li key={branch.runtime_id}>
                <button
                  className="jp-DittoLink"
                  aria-label={trans.__('Open %1', branch.conversation_id)}
                  onClick={() =>
                    void commands.execute('docmanager:open', { path: branch.conversation_id })
                  }
                >
                  {baseName(branch.conversation_id)}
                </button>{' '}
                <span className={`jp-DittoStatusText jp-mod-${branch.status}`}>
                  {branch.status}
                </span>
              </li>
            ))}
          </ul>
        </div>
      ) : null}
      <div className="jp-DittoDetails-actions">
        {runtime && runtime.status !== 'closed' && runtime.status !== 'paused'
          ? button(CommandIDs.restore, trans.__('Restore'), true)
          : null}
        {button(CommandIDs.checkout, trans.__('Check out'))}
        {live
          ? button(CommandIDs.compare, trans.__('Compare with live'), false, {
              runtimeId,
              from: checkpointId,
              to: LIVE
            })
          : null}
        {button(
          CommandIDs.pickForCompare,
          picked ? trans.__('Unpick') : trans.__('Pick for compare'),
          false,
          args,
          picked
        )}
        {checkpoint.has_provider_snapshot
          ? button(CommandIDs.deleteSnapshot, trans.__('Delete snapshot'), true)
          : null}
      </div>
    </section>
  );
}
