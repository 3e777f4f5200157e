/**
 * The checkpoints picked for Compare in a runtime (A, and B or live), with Compare and
 * Clear, above its checkpoint tree.
 */

import * as React from 'react';

import { LIVE } from '../apiTypes';
import { CommandIDs } from '../commandIds';
import { checkpointLabelIn } from '../format';
import { IRuntimeItemProps } from '../components/panelProps';

/** The checkpoints picked for Compare in this runtime, and Compare. */
export function ComparePicks(props: IRuntimeItemProps): JSX.Element | null {
  const { state, commands, trans, runtime } = props;
  const picks = state.picks;
  if (!picks || picks.runtimeId !== runtime.runtime_id) {
    return null;
  }
  const [a, b] = picks.checkpointIds;
  const live = runtime.status === 'idle' || runtime.status === 'busy';
  const compareArgs = b ? {} : { runtimeId: runtime.runtime_id, from: a, to: LIVE };
  const canCompare = b !== undefined || live;
  return (
    <div className="jp-DittoPicks" role="group" aria-label={trans.__('Picked for compare')}>
      <span className="jp-DittoPicks-text">
        <span className="jp-DittoBadge jp-mod-pick">A</span> {checkpointLabelIn(state.cache, a)}
        {b ? (
          <>
            {'  '}
            <span className="jp-DittoBadge jp-mod-pick">B</span> {checkpointLabelIn(state.cache, b)}
          </>
        ) : (
          <span className="jp-DittoPicks-hint">
            {' '}
            {trans.__('Ctrl+click a second checkpoint, or compare with live')}
          </span>
        )}
      </span>
      <span className="jp-DittoPicks-actions">
        <button
          className="jp-DittoButton jp-mod-styled jp-DittoButton-primary"
          aria-label={
            b
              ? trans.__(
                  'Compare %1 and %2',
                  checkpointLabelIn(state.cache, a),
                  checkpointLabelIn(state.cache, b)
                )
              : trans.__('Compare %1 with live', checkpointLabelIn(state.cache, a))
          }
          disabled={!canCompare}
          onClick={() => void commands.execute(CommandIDs.compare, compareArgs)}
        >
          {b ? trans.__('Compare') : trans.__('Compare with live')}
        </button>
        <button
          className="jp-DittoButton jp-mod-styled"
          aria-label={trans.__('Clear the checkpoints picked for compare')}
          onClick={() => state.clearPicks()}
        >
          {trans.__('Clear')}
        </button>
      </span>
    </div>
  );
}
