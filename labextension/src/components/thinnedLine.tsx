/**
 * In a runtime: what retention last thinned of its automatic checkpoints, with Dismiss.
 */

import * as React from 'react';

import { thinnedReason, thinnedText } from '../thinnedText';
import { IRuntimeItemProps } from './panelProps';

/** The runtime's last thinning, in a line (none: nothing). */
export function ThinnedLine(props: IRuntimeItemProps): JSX.Element | null {
  const { state, trans, runtime } = props;
  const id = runtime.runtime_id;
  const thinned = state.cache.thinned(id);
  if (!thinned) {
    return null;
  }
  const t = (m: string, ...a: (string | number)[]): string => trans.__(m, ...a);
  return (
    <div
      className="jp-DittoNotice jp-DittoThinned"
      role="status"
      aria-label={trans.__('Retention')}
      title={thinnedReason(thinned, t)}
    >
      <span className="jp-DittoNotice-text">{thinnedText(thinned, t)}</span>
      <span className="jp-DittoNotice-actions">
        <button
          className="jp-DittoIconButton jp-DittoNotice-dismiss"
          aria-label={trans.__('Dismiss')}
          title={trans.__('Dismiss')}
          onClick={() => state.cache.noteThinned(id, null)}
        >
          ×
        </button>
      </span>
    </div>
  );
}
