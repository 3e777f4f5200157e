/**
 * The checkpoints picked for Compare in a runtime (A, and B or live; or up to eight, side
 * by side), with Compare and Clear, above its checkpoint tree.
 */

import * as React from 'react';

import { LIVE } from '../apiTypes';
import { CommandIDs } from '../commandIds';
import { checkpointLabelIn } from '../format';
import { IRuntimeItemProps } from '../components/panelProps';

/** The letter of a pick's place: 1 -> A, 2 -> B, ... */
export function pickLetter(place: number): string {
  return String.fromCharCode(64 + place);
}

/** The checkpoints picked for Compare in this runtime, and Compare. */
export function ComparePicks(props: IRuntimeItemProps): JSX.Element | null {
  const { state, commands, trans, runtime } = props;
  const picks = state.picks;
  if (!picks || picks.runtimeId !== runtime.runtime_id) {
    return null;
  }
  const ids = picks.checkpointIds;
  const [a, b] = ids;
  const many = ids.length > 2;
  const live = runtime.status === 'idle' || runtime.status === 'busy';
  const compareArgs = b ? {} : { runtimeId: runtime.runtime_id, from: a, to: LIVE };
  const canCompare = b !== undefined || live;
  const labels = ids.map(id => checkpointLabelIn(state.cache, id));
  return (
    <div className="jp-DittoPicks" role="group" aria-label={trans.__('Picked for compare')}>
      <span className="jp-DittoPicks-text">
        {ids.map((id, i) => (
          <React.Fragment key={id}>
            {i > 0 ? '  ' : null}
            <span className="jp-DittoBadge jp-mod-pick">{pickLetter(i + 1)}</span> {labels[i]}
          </React.Fragment>
        ))}
        {b ? null : (
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
            many
              ? trans.__('Compare %1 side by side', labels.join(', '))
              : b
                ? trans.__('Compare %1 and %2', labels[0], labels[1])
                : trans.__('Compare %1 with live', labels[0])
          }
          disabled={!canCompare}
          onClick={() =>
            void (many
              ? commands.execute(CommandIDs.comparePicked)
              : commands.execute(CommandIDs.compare, compareArgs))
          }
        >
          {many
            ? trans.__('Compare %1', ids.length)
            : b
              ? trans.__('Compare')
              : trans.__('Compare with live')}
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
